package io.tickd.client;

import io.grpc.CallOptions;
import io.grpc.Channel;
import io.grpc.ClientCall;
import io.grpc.ClientInterceptor;
import io.grpc.MethodDescriptor;
import java.util.concurrent.atomic.AtomicInteger;

/** Counts the calls (each retry is one) a client makes, to see retries happen. */
final class CallCounter implements ClientInterceptor {
    final AtomicInteger calls = new AtomicInteger();

    @Override
    public <Q, A> ClientCall<Q, A> interceptCall(MethodDescriptor<Q, A> method, CallOptions options, Channel next) {
        calls.incrementAndGet();
        return next.newCall(method, options);
    }
}
