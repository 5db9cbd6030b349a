package io.tickd.client;

import io.grpc.CallOptions;
import io.grpc.Channel;
import io.grpc.ClientCall;
import io.grpc.ClientInterceptor;
import io.grpc.ForwardingClientCall;
import io.grpc.Metadata;
import io.grpc.MethodDescriptor;

/**
 * Sends {@code authorization: Bearer TOKEN} on every call, as tickd's
 * {@code --auth-token-file} expects.
 *
 * <p>An interceptor rather than {@code CallCredentials} because those are meant for TLS
 * channels, and a token over plaintext (e.g. on a private network or a Unix socket
 * proxied to TCP) is the caller's choice to make.
 */
final class BearerTokenInterceptor implements ClientInterceptor {
    private static final Metadata.Key<String> AUTHORIZATION =
            Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER);

    private final String headerValue;

    BearerTokenInterceptor(String token) {
        this.headerValue = "Bearer " + token;
    }

    @Override
    public <Q, A> ClientCall<Q, A> interceptCall(MethodDescriptor<Q, A> method, CallOptions options, Channel next) {
        return new ForwardingClientCall.SimpleForwardingClientCall<Q, A>(next.newCall(method, options)) {
            @Override
            public void start(Listener<A> listener, Metadata headers) {
                headers.put(AUTHORIZATION, headerValue);
                super.start(listener, headers);
            }
        };
    }
}
