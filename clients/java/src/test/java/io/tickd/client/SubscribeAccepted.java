package io.tickd.client;

import io.grpc.CallOptions;
import io.grpc.Channel;
import io.grpc.ClientCall;
import io.grpc.ClientInterceptor;
import io.grpc.ForwardingClientCall;
import io.grpc.ForwardingClientCallListener;
import io.grpc.Metadata;
import io.grpc.MethodDescriptor;
import java.util.concurrent.atomic.AtomicInteger;

/** Counts Subscribe calls answered with response headers, i.e. accepted by tickd. */
final class SubscribeAccepted implements ClientInterceptor {
    private final AtomicInteger accepted;

    SubscribeAccepted(AtomicInteger accepted) {
        this.accepted = accepted;
    }

    @Override
    public <Q, A> ClientCall<Q, A> interceptCall(MethodDescriptor<Q, A> method, CallOptions options, Channel next) {
        ClientCall<Q, A> call = next.newCall(method, options);
        if (!method.getFullMethodName().endsWith("/Subscribe")) {
            return call;
        }
        return new ForwardingClientCall.SimpleForwardingClientCall<Q, A>(call) {
            @Override
            public void start(Listener<A> listener, Metadata headers) {
                super.start(new ForwardingClientCallListener.SimpleForwardingClientCallListener<A>(listener) {
                    @Override
                    public void onHeaders(Metadata responseHeaders) {
                        accepted.incrementAndGet();
                        super.onHeaders(responseHeaders);
                    }
                }, headers);
            }
        };
    }
}
