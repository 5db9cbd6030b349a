package io.tickd.client;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertNotEquals;
import static org.junit.Assert.assertNull;
import static org.junit.Assert.assertTrue;

import io.tickd.v1.TimerSpec;
import java.time.Duration;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import org.junit.After;
import org.junit.Test;

/**
 * A timer registered inside a span is handled in a child of that span across a SIGKILL
 * restart of a durable tickd; its redelivery (attempt 2, the first handler threw) runs in a
 * span of its own that links to the registering span; a timer registered outside any span
 * carries nothing. With {@link RecordingTracer} as the {@link TracingHook}.
 */
public class TracingTest {
    private TickdServer server;

    @After
    public void stopTickd() {
        if (server != null) {
            server.close();
        }
    }

    @Test
    public void theHandlerSpanContinuesTheRegisteringTraceAcrossASigkillRestart() throws Exception {
        server = TickdServer.start("--sync", "always");
        RecordingTracer tracer = new RecordingTracer();
        List<String> seen = new CopyOnWriteArrayList<>(); // key, attempt, trace context carried, current span
        Set<String> acknowledged = ConcurrentHashMap.newKeySet();
        try (TickdClient timers = server.client().namespace("tracing").tracing(tracer).build()) {
            timers.register(timer("untraced"));
            RecordingTracer.Span registering = tracer.inSpan("register", "order=42", () -> timers.register(timer("traced")));
            server.kill(); // before either fires
            server.startAgain();

            try (Subscriber subscriber = timers.subscriber(delivery -> {
                seen.add(delivery.timer().getKey() + " " + delivery.attempt() + " "
                        + delivery.expiration().hasTraceContext() + " " + tracer.current().spanId);
                if (delivery.timer().getKey().equals("traced") && delivery.attempt() == 1) {
                    throw new IllegalStateException("fail attempt 1: it comes again");
                }
            }).maxInFlight(2).ackTimeout(Duration.ofSeconds(1)).listener(new SubscriberListener() {
                @Override
                public void onAcknowledged(Delivery delivery, boolean wasAcknowledged) {
                    if (wasAcknowledged) {
                        acknowledged.add(delivery.timer().getKey());
                    }
                }

                @Override
                public void onHandlerFailed(Delivery delivery, Throwable error) {
                }
            }).start()) {
                Await.until("both timers acknowledged", () -> acknowledged.containsAll(Set.of("traced", "untraced")));
            }

            RecordingTracer.Span first = handlerSpan(tracer, "traced", 1);
            RecordingTracer.Span second = handlerSpan(tracer, "traced", 2);
            RecordingTracer.Span untraced = handlerSpan(tracer, "untraced", 1);
            assertTrue(seen.toString(), seen.contains("traced 1 true " + first.spanId));
            assertTrue(seen.toString(), seen.contains("traced 2 true " + second.spanId));
            assertTrue(seen.toString(), seen.contains("untraced 1 false " + untraced.spanId));

            assertEquals("tickd.expiration tracing", first.name);
            assertEquals("attempt 1 is in the registering trace", registering.traceId, first.traceId);
            assertEquals("attempt 1 is a child of the registering span", registering.spanId, first.parentSpanId);
            assertEquals(List.of(), first.linkedSpanIds);
            assertTrue("attempt 1's span is marked failed", first.failed);
            assertEquals("order=42", first.baggage);
            assertEquals("tracing", first.attributes.get("tickd.namespace"));
            assertEquals(1L, first.attributes.get("tickd.attempt"));
            assertFalse(((String) first.attributes.get("tickd.delivery.id")).isEmpty());

            assertNull("attempt 2 has no parent, only a link", second.parentSpanId);
            assertNotEquals(registering.traceId, second.traceId);
            assertEquals(List.of(registering.spanId), second.linkedSpanIds);
            assertEquals("order=42", second.baggage);
            assertFalse(second.failed);

            assertNull(untraced.parentSpanId);
            assertEquals(List.of(), untraced.linkedSpanIds);
        }
    }

    private static TimerSpec timer(String key) {
        return TimerSpec.newBuilder().setKey(key).setDelay(ProtoTime.duration(Duration.ofSeconds(1))).build();
    }

    private static RecordingTracer.Span handlerSpan(RecordingTracer tracer, String key, long attempt) {
        return tracer.ended.stream()
                .filter(span -> key.equals(span.attributes.get("tickd.timer.key"))
                        && Long.valueOf(attempt).equals(span.attributes.get("tickd.attempt")))
                .findFirst().orElseThrow(() -> new AssertionError("no handler span of " + key + " attempt " + attempt
                        + " in " + tracer.ended));
    }
}
