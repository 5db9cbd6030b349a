package io.tickd.client;

import java.util.Map;

/**
 * Connects a client to a tracing system (given to {@link TickdClientBuilder#tracing}); the
 * README's "Tracing" shows one for OpenTelemetry. Its methods must not throw.
 *
 * <p>{@link #currentContext()} is asked on the calling thread of each {@code register},
 * {@code registerAll} and {@code reschedule} (each retry included) for the W3C headers of the
 * caller's current span, sent as gRPC metadata; tickd keeps them with the timer and returns
 * them on each of its expirations ({@code Expiration.getTraceContext()}).
 * {@link #startHandler} is called on the handler's thread before each handler runs, and the
 * scope it returns is closed once the handler returned or threw.
 */
public interface TracingHook {
    /** Traces nothing and sends nothing: the default. */
    TracingHook NONE = new TracingHook() {
        @Override
        public Map<String, String> currentContext() {
            return Map.of();
        }

        @Override
        public HandlerScope startHandler(HandlerSpan span) {
            return () -> { };
        }
    };

    /**
     * The current context's {@code traceparent}, {@code tracestate} and {@code baggage}
     * (those it has); empty when there is no valid current span.
     */
    Map<String, String> currentContext();

    /**
     * Starts the span {@code span} describes (its name, parent or link, attributes) and makes
     * it current for the handler.
     */
    HandlerScope startHandler(HandlerSpan span);

    /** A started handler span: {@link #failed} when the handler threw, then {@link #close}. */
    interface HandlerScope extends AutoCloseable {
        /** The handler threw {@code error} (the delivery stays unacknowledged). */
        default void failed(Throwable error) {
        }

        /** Ends the span and restores the context the handler's thread had. */
        @Override
        void close();
    }
}
