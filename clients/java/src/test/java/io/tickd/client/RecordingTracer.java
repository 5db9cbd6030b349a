package io.tickd.client;

import io.tickd.v1.TraceContext;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ThreadLocalRandom;

/**
 * A tiny tracer implementing {@link TracingHook} for the tests (OpenTelemetry's Java SDK is
 * not in Debian, and Maven runs offline): spans with W3C ids, a current span and baggage per
 * thread, and every ended span recorded.
 */
final class RecordingTracer implements TracingHook {
    /** A span as a tracer would export it; parentSpanId null for a root. */
    static final class Span {
        final String name;
        final String traceId;
        final String spanId;
        final String parentSpanId;
        final List<String> linkedSpanIds;
        final Map<String, Object> attributes;
        final String baggage;
        volatile boolean failed;

        Span(String name, String traceId, String spanId, String parentSpanId, List<String> linkedSpanIds,
                Map<String, Object> attributes, String baggage) {
            this.name = name;
            this.traceId = traceId;
            this.spanId = spanId;
            this.parentSpanId = parentSpanId;
            this.linkedSpanIds = linkedSpanIds;
            this.attributes = attributes;
            this.baggage = baggage;
        }

        String traceparent() {
            return "00-" + traceId + "-" + spanId + "-01";
        }

        @Override
        public String toString() {
            return name + " " + attributes + " trace " + traceId + " parent " + parentSpanId + " links " + linkedSpanIds;
        }
    }

    private final ThreadLocal<Span> current = new ThreadLocal<>();
    final List<Span> ended = new CopyOnWriteArrayList<>();

    /** Runs {@code body} inside a new root span with this baggage, and returns that span. */
    Span inSpan(String name, String baggage, Runnable body) {
        Span span = new Span(name, randomHex(16), randomHex(8), null, List.of(), Map.of(), baggage);
        Span outer = current.get();
        current.set(span);
        try {
            body.run();
        } finally {
            current.set(outer);
        }
        return span;
    }

    /** The current span of this thread (null: none). */
    Span current() {
        return current.get();
    }

    @Override
    public Map<String, String> currentContext() {
        Span span = current.get();
        if (span == null) {
            return Map.of();
        }
        return span.baggage.isEmpty() ? Map.of("traceparent", span.traceparent())
                : Map.of("traceparent", span.traceparent(), "baggage", span.baggage);
    }

    @Override
    public HandlerScope startHandler(HandlerSpan handler) {
        Span outer = current.get();
        Optional<String[]> parent = handler.parent().map(RecordingTracer::ids);
        String traceId = parent.map(ids -> ids[0]).orElse(outer != null ? outer.traceId : randomHex(16));
        String parentSpanId = parent.map(ids -> ids[1]).orElse(outer != null ? outer.spanId : null);
        List<String> links = handler.link().map(link -> List.of(ids(link)[1])).orElse(List.of());
        Span span = new Span(handler.name(), traceId, randomHex(8), parentSpanId, links, handler.attributes(),
                handler.baggage());
        current.set(span);
        return new HandlerScope() {
            @Override
            public void failed(Throwable error) {
                span.failed = true;
            }

            @Override
            public void close() {
                current.set(outer);
                ended.add(span);
            }
        };
    }

    /** The trace id and the span id of a traceparent. */
    private static String[] ids(TraceContext context) {
        String[] parts = context.getTraceparent().split("-");
        return new String[] {parts[1], parts[2]};
    }

    private static String randomHex(int bytes) {
        StringBuilder hex = new StringBuilder();
        for (int i = 0; i < bytes; i++) {
            hex.append(String.format("%02x", ThreadLocalRandom.current().nextInt(256)));
        }
        return hex.toString();
    }
}
