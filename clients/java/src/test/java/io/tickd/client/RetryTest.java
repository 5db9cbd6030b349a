package io.tickd.client;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import io.grpc.Status;
import io.tickd.v1.NewTimeoutResponse;
import io.tickd.v1.TimerSpec;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.After;
import org.junit.Test;

/** Calls made while tickd is down: idempotent ones wait for it within the retry budget, keyless registrations do not. */
public class RetryTest {
    private TickdServer server;

    @After
    public void stopTickd() {
        if (server != null) {
            server.close();
        }
    }

    private static TimerSpec keyed(String key) {
        return TimerSpec.newBuilder().setKey(key).setDelay(ProtoTime.duration(Duration.ofHours(1))).build();
    }

    @Test
    public void aKeyedRegistrationIssuedWhileTickdIsDownSucceedsOnceItIsBack() throws Exception {
        server = TickdServer.start("--sync", "always");
        CallCounter counter = new CallCounter();
        try (TickdClient tickd = server.client().namespace("retry").interceptor(counter)
                .retryPolicy(RetryPolicy.of(1000, Duration.ofMillis(50), Duration.ofMillis(250), 2.0)).build()) {
            tickd.register(keyed("warm-up"));
            server.stop();
            int before = counter.calls.get();
            CompletableFuture<NewTimeoutResponse> registration = CompletableFuture.supplyAsync(() -> tickd.register(keyed("while-down")));
            CompletableFuture<Boolean> cancellation = CompletableFuture.supplyAsync(() -> tickd.cancel(tickd.byKey("warm-up")));
            Await.until("both calls to have been retried at least once", () -> counter.calls.get() >= before + 4);
            assertTrue("still waiting for tickd", !registration.isDone() && !cancellation.isDone());
            server.startAgain();
            NewTimeoutResponse registered = registration.get(60, TimeUnit.SECONDS);
            assertTrue(registered.getCreated());
            assertEquals("while-down", tickd.get(tickd.byKey("while-down")).getKey());
            assertTrue("the cancel reached tickd once it was back", cancellation.get(60, TimeUnit.SECONDS));
        }
    }

    @Test
    public void aKeylessRegistrationIsNotRetried() throws Exception {
        server = TickdServer.start("--sync", "none");
        CallCounter counter = new CallCounter();
        try (TickdClient tickd = server.client().namespace("no-retry").interceptor(counter)
                .retryPolicy(RetryPolicy.of(1000, Duration.ofMillis(50), Duration.ofMillis(250), 2.0)).build()) {
            tickd.pendingCount();
            server.stop();
            int before = counter.calls.get();
            try {
                tickd.register(TimerSpec.newBuilder().setDelay(ProtoTime.duration(Duration.ofHours(1))).build());
                fail("a keyless registration while tickd is down must fail");
            } catch (TickdException expected) {
                assertEquals(Status.Code.UNAVAILABLE, expected.code());
            }
            assertEquals("one attempt, no retry", before + 1, counter.calls.get());
        }
    }

    @Test
    public void retriesStopAtTheBudget() throws Exception {
        server = TickdServer.start("--sync", "none");
        CallCounter counter = new CallCounter();
        try (TickdClient tickd = server.client().namespace("budget").interceptor(counter)
                .retryPolicy(RetryPolicy.of(3, Duration.ofMillis(10), Duration.ofMillis(20), 2.0)).build()) {
            server.stop();
            try {
                tickd.get(tickd.byKey("anything"));
                fail("tickd is down");
            } catch (TickdException expected) {
                assertEquals(Status.Code.UNAVAILABLE, expected.code());
            }
            assertEquals("three attempts in all", 3, counter.calls.get());
        }
    }
}
