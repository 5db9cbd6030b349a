package io.tickd.client;

import static org.junit.Assert.assertTrue;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.After;
import org.junit.Test;

/** The subscriber's reconnect back-off starts again once tickd accepts a subscription, before any delivery. */
public class SubscriberReconnectTest {
    private TickdServer server;

    @After
    public void stopTickd() {
        if (server != null) {
            server.close();
        }
    }

    @Test
    public void theBackoffResetsWhenTickdAcceptsTheSubscription() throws Exception {
        server = TickdServer.start("--sync", "none");
        AtomicInteger accepted = new AtomicInteger();
        List<Duration> waits = new CopyOnWriteArrayList<>();
        // 200 ms, x4 per failed reconnect: after three failures the step is at least 3.2 s.
        RetryPolicy backoff = RetryPolicy.of(1, Duration.ofMillis(200), Duration.ofSeconds(60), 4.0);
        try (TickdClient tickd = server.client().namespace("reset").interceptor(new SubscribeAccepted(accepted)).build();
                Subscriber subscriber = tickd.subscriber(delivery -> { }).reconnectBackoff(backoff)
                        .listener(new SubscriberListener() {
                            @Override
                            public void onDisconnected(TickdException error, Duration reconnectIn) {
                                waits.add(reconnectIn);
                            }
                        }).start()) {
            Await.until("the first subscription accepted", () -> accepted.get() == 1);
            server.stop();
            Await.until("three failed reconnects while tickd is down", () -> waits.size() >= 3);
            server.startAgain();
            Await.until("the subscription accepted again (nothing delivered)", () -> accepted.get() == 2);
            int before = waits.size();
            server.stop();
            Await.until("the stream broken again", () -> waits.size() > before);
            Duration afterAccepted = waits.get(before);
            assertTrue("the wait after an accepted subscription is the first step again: " + waits,
                    afterAccepted.compareTo(backoff.initialBackoff()) <= 0);
        }
    }
}
