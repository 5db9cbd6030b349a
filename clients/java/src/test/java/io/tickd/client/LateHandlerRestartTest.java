package io.tickd.client;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertNotEquals;
import static org.junit.Assert.assertTrue;

import io.tickd.v1.TimerSpec;
import java.time.Duration;
import java.util.ArrayList;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.junit.After;
import org.junit.Test;

/**
 * A handler still running when tickd is restarted (same data directory; SIGTERM, or SIGKILL)
 * finishes once the subscriber has reconnected: its ack is not sent ({@code onAckNotSent},
 * never acknowledged), its expiration comes again with attempt 2 or more, and no other
 * expiration is settled in its place: those registered after the restart, held in their
 * handlers meanwhile, are each acknowledged by their own ack.
 */
public class LateHandlerRestartTest {
    private static final List<String> AFTER = List.of("after-0", "after-1", "after-2");

    private TickdServer server;
    private final List<Delivery> delivered = new ArrayList<>();
    /** What the listener was told per delivery (the same object the handler got). */
    private final Map<Delivery, List<String>> outcomes = new IdentityHashMap<>();
    private final CountDownLatch releaseHeld = new CountDownLatch(1);
    private final CountDownLatch releaseOthers = new CountDownLatch(1);

    @After
    public void stopTickd() {
        releaseHeld.countDown();
        releaseOthers.countDown();
        if (server != null) {
            server.close();
        }
    }

    @Test
    public void aHandlerFinishingAfterASigtermRestartGetsNoAckAndItsExpirationComesAgain() throws Exception {
        handlerFinishingAfterARestart(false);
    }

    @Test
    public void aHandlerFinishingAfterASigkillRestartGetsNoAckAndItsExpirationComesAgain() throws Exception {
        handlerFinishingAfterARestart(true);
    }

    private void handlerFinishingAfterARestart(boolean kill) throws Exception {
        server = TickdServer.start("--sync", "always");
        try (TickdClient timers = server.client().namespace("late-handler").build();
                Subscriber subscriber = timers.subscriber(this::handle)
                        .maxInFlight(8).ackTimeout(Duration.ofMinutes(1))
                        .listener(new SubscriberListener() {
                            @Override
                            public void onAcknowledged(Delivery delivery, boolean acknowledged) {
                                told(delivery, acknowledged ? "acknowledged" : "unknown");
                            }

                            @Override
                            public void onAckNotSent(Delivery delivery) {
                                told(delivery, "not sent");
                            }

                            @Override
                            public void onAckFailed(Delivery delivery, TickdException error) {
                                told(delivery, "failed: " + error.getMessage());
                            }
                        }).start()) {
            try {
                register(timers, "held");
                Await.until("the held handler to start", () -> of("held").size() == 1);
                Delivery first = of("held").get(0);
                assertEquals(1, first.attempt());
                assertFalse(first.streamEnded());

                if (kill) {
                    server.kill();
                } else {
                    server.stop();
                }
                server.startAgain();
                for (String key : AFTER) {
                    register(timers, key);
                }
                // The held expiration again (on the new stream: the subscriber reconnected) and
                // the new ones, all in their handlers, each awaiting its own ack.
                Await.until("the held expiration again and every later one",
                        () -> of("held").size() >= 2 && AFTER.stream().noneMatch(key -> of(key).isEmpty()));
                assertTrue(first.streamEnded());

                releaseHeld.countDown();
                Await.until("the late handler's outcome", () -> outcome(first) != null);
                assertEquals("the late handler's ack", List.of("not sent"), outcome(first));

                releaseOthers.countDown();
                List<Delivery> others = new ArrayList<>();
                others.add(of("held").get(1));
                for (String key : AFTER) {
                    others.add(of(key).get(0));
                }
                Await.until("the acks of the held expiration's second delivery and of the later ones",
                        () -> others.stream().allMatch(delivery -> outcome(delivery) != null));
                for (Delivery delivery : others) {
                    assertEquals(delivery + " acknowledged by its own ack", List.of("acknowledged"), outcome(delivery));
                }
                Await.until("nothing pending or dead in the namespace",
                        () -> timers.pendingCount() == 0 && timers.deadCount() == 0);
                Delivery again = others.get(0);
                assertTrue("attempts survive a restart: the held expiration came again as " + again,
                        again.attempt() >= 2);
                assertNotEquals("a delivery id repeated across the restart", first.deliveryId(), again.deliveryId());
            } finally {
                // Before the subscriber closes: stop() waits for the handlers.
                releaseHeld.countDown();
                releaseOthers.countDown();
            }
        }
    }

    private void handle(Delivery delivery) throws InterruptedException {
        boolean firstOfHeld;
        synchronized (delivered) {
            firstOfHeld = delivery.timer().getKey().equals("held") && of("held").isEmpty();
            delivered.add(delivery);
        }
        CountDownLatch gate = firstOfHeld ? releaseHeld : releaseOthers;
        if (!gate.await(Await.GENEROUS.toSeconds(), TimeUnit.SECONDS)) {
            throw new IllegalStateException(delivery + " was never released");
        }
    }

    private void told(Delivery delivery, String outcome) {
        synchronized (outcomes) {
            outcomes.computeIfAbsent(delivery, unused -> new ArrayList<>()).add(outcome);
        }
    }

    private List<String> outcome(Delivery delivery) {
        synchronized (outcomes) {
            List<String> told = outcomes.get(delivery);
            return told == null ? null : List.copyOf(told);
        }
    }

    private List<Delivery> of(String key) {
        synchronized (delivered) {
            List<Delivery> found = new ArrayList<>();
            for (Delivery delivery : delivered) {
                if (delivery.timer().getKey().equals(key)) {
                    found.add(delivery);
                }
            }
            return found;
        }
    }

    /** Registers a timer due now, with a key: retried while tickd is coming back. */
    private static void register(TickdClient client, String key) {
        client.register(TimerSpec.newBuilder().setKey(key).setDelay(ProtoTime.duration(Duration.ZERO)).build());
    }
}
