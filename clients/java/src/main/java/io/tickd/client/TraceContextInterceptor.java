package io.tickd.client;

import io.grpc.CallOptions;
import io.grpc.Channel;
import io.grpc.ClientCall;
import io.grpc.ClientInterceptor;
import io.grpc.ForwardingClientCall;
import io.grpc.Metadata;
import io.grpc.MethodDescriptor;
import io.tickd.v1.TimersGrpc;
import java.util.Map;
import java.util.Set;

/** Sends the {@link TracingHook}'s current W3C context with the calls that register or move a timer. */
final class TraceContextInterceptor implements ClientInterceptor {
    private static final Set<String> TRACED_METHODS = Set.of(
            TimersGrpc.getNewTimeoutMethod().getFullMethodName(),
            TimersGrpc.getNewTimeoutsMethod().getFullMethodName(),
            TimersGrpc.getRescheduleMethod().getFullMethodName());
    private static final Set<String> HEADERS = Set.of("traceparent", "tracestate", "baggage");

    private final TracingHook tracing;

    TraceContextInterceptor(TracingHook tracing) {
        this.tracing = tracing;
    }

    @Override
    public <Q, A> ClientCall<Q, A> interceptCall(MethodDescriptor<Q, A> method, CallOptions options, Channel next) {
        ClientCall<Q, A> call = next.newCall(method, options);
        if (!TRACED_METHODS.contains(method.getFullMethodName())) {
            return call;
        }
        return new ForwardingClientCall.SimpleForwardingClientCall<Q, A>(call) {
            @Override
            public void start(Listener<A> listener, Metadata headers) {
                for (Map.Entry<String, String> header : tracing.currentContext().entrySet()) {
                    if (HEADERS.contains(header.getKey()) && !header.getValue().isEmpty()) {
                        headers.put(Metadata.Key.of(header.getKey(), Metadata.ASCII_STRING_MARSHALLER), header.getValue());
                    }
                }
                super.start(listener, headers);
            }
        };
    }
}
