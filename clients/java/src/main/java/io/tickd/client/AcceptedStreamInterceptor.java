package io.tickd.client;

import io.grpc.CallOptions;
import io.grpc.Channel;
import io.grpc.ClientCall;
import io.grpc.ClientInterceptor;
import io.grpc.ForwardingClientCall;
import io.grpc.ForwardingClientCallListener;
import io.grpc.Metadata;
import io.grpc.MethodDescriptor;

/**
 * Runs {@code onAccepted} when tickd answers a call with response headers, i.e. it accepted
 * the stream (a refusal comes as trailers only). A subscriber resets its reconnect back-off
 * there, so a stream that was accepted and then broke starts again from a short wait even if
 * no expiration came through it.
 */
final class AcceptedStreamInterceptor implements ClientInterceptor {
    private final Runnable onAccepted;

    AcceptedStreamInterceptor(Runnable onAccepted) {
        this.onAccepted = onAccepted;
    }

    @Override
    public <Q, A> ClientCall<Q, A> interceptCall(MethodDescriptor<Q, A> method, CallOptions options, Channel next) {
        return new ForwardingClientCall.SimpleForwardingClientCall<Q, A>(next.newCall(method, options)) {
            @Override
            public void start(Listener<A> responseListener, Metadata headers) {
                super.start(new ForwardingClientCallListener.SimpleForwardingClientCallListener<A>(responseListener) {
                    @Override
                    public void onHeaders(Metadata responseHeaders) {
                        onAccepted.run();
                        super.onHeaders(responseHeaders);
                    }
                }, headers);
            }
        };
    }
}
