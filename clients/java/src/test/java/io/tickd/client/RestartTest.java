package io.tickd.client;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertTrue;

import io.grpc.Status;
import io.tickd.v1.TimerRef;
import io.tickd.v1.TimerSpec;
import java.time.Duration;
import java.time.Instant;
import java.util.HashSet;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import org.junit.After;
import org.junit.Test;

/**
 * The subscriber and the lease keeper across a restart of a durable tickd (SIGTERM, exit,
 * start again on the same port and data directory): every expiration registered before and
 * after is handled and acknowledged, a long lease is kept, a short one that expired while
 * tickd was down is reported lost.
 */
public class RestartTest {
    private TickdServer server;

    @After
    public void stopTickd() {
        if (server != null) {
            server.close();
        }
    }

    @Test
    public void subscriberAndLeaseKeeperCarryOnAcrossARestart() throws Exception {
        server = TickdServer.start("--sync", "always", "--ack-timeout", "2s");
        Set<String> handled = ConcurrentHashMap.newKeySet();
        Set<String> acknowledged = ConcurrentHashMap.newKeySet();
        Map<TimerRef, TickdException> lost = new ConcurrentHashMap<>();
        Map<TimerRef, Instant> lastDeadline = new ConcurrentHashMap<>();

        try (TickdClient timers = server.client().namespace("restart").build();
                TickdClient leases = server.client().namespace("leases").build();
                Subscriber subscriber = timers.subscriber(delivery -> handled.add(delivery.timer().getKey()))
                        .maxInFlight(4)
                        .listener(new SubscriberListener() {
                            @Override
                            public void onAcknowledged(Delivery delivery, boolean wasAwaited) {
                                if (wasAwaited) {
                                    acknowledged.add(delivery.timer().getKey());
                                }
                            }
                        }).start();
                LeaseKeeper keeper = leases.leaseKeeper(new LeaseListener() {
                    @Override
                    public void onLost(TimerRef lease, TickdException reason) {
                        lost.put(lease, reason);
                    }

                    @Override
                    public void onRenewed(TimerRef lease, Instant deadline) {
                        lastDeadline.put(lease, deadline);
                    }
                })) {
            TimerRef longLease = leases.byKey("long-lease");
            TimerRef shortLease = leases.byKey("short-lease");
            leases.register(TimerSpec.newBuilder().setKey("long-lease").setTtl(ProtoTime.duration(Duration.ofSeconds(60))).build());
            leases.register(TimerSpec.newBuilder().setKey("short-lease").setTtl(ProtoTime.duration(Duration.ofSeconds(1))).build());
            keeper.add(longLease, Duration.ofSeconds(60));
            keeper.add(shortLease, Duration.ofSeconds(1));
            Await.until("both leases heartbeated", () -> lastDeadline.containsKey(longLease) && lastDeadline.containsKey(shortLease));
            // Kept alive, not just answered once: its deadline moved on by more than its ttl.
            Instant firstShortDeadline = lastDeadline.get(shortLease);
            Await.until("the short lease heartbeated for more than its ttl",
                    () -> lastDeadline.get(shortLease).isAfter(firstShortDeadline.plusSeconds(1)));

            Set<String> expected = new HashSet<>();
            for (int i = 0; i < 5; i++) {
                expected.add(register(timers, "before-" + i, Duration.ZERO));
            }
            for (int i = 0; i < 5; i++) {
                expected.add(register(timers, "around-" + i, Duration.ofSeconds(3)));
            }
            Await.until("the timers due before the restart to be acknowledged",
                    () -> acknowledged.containsAll(Set.of("before-0", "before-1", "before-2", "before-3", "before-4")));

            Await.until("the short lease still renewed just before the stop",
                    () -> lastDeadline.get(shortLease).isAfter(Instant.now().plusMillis(200)));
            assertTrue("the short lease was still kept at the stop", keeper.leases().contains(shortLease));
            server.stop();
            // The short lease cannot be heartbeated now. Its last heartbeat reached tickd before
            // the stop ended (a later answered one may have been sent after the last answer we
            // saw), so its deadline is at most stoppedAt + ttl: wait until that has passed.
            Instant stoppedAt = Instant.now();
            Await.until("wall-clock time past the short lease's last possible deadline",
                    () -> Instant.now().isAfter(stoppedAt.plusSeconds(1).plusMillis(200)));
            Instant restartedAt = Instant.now();
            server.startAgain();

            for (int i = 0; i < 5; i++) {
                expected.add(register(timers, "after-" + i, Duration.ZERO));
            }
            Await.untilValue("every expiration handled and acknowledged", () -> missing(expected, acknowledged), Set::isEmpty);
            assertTrue(handled.containsAll(expected));

            Await.until("the short lease reported lost", () -> lost.containsKey(shortLease));
            assertEquals(Status.Code.NOT_FOUND, lost.get(shortLease).code());
            Await.until("the long lease heartbeated after the restart",
                    () -> lastDeadline.get(longLease).isAfter(restartedAt.plusSeconds(59)));
            assertFalse("the long lease is not lost", lost.containsKey(longLease));
            assertEquals(Set.of(longLease), keeper.leases());
            assertEquals("the long lease is still pending", "long-lease", leases.get(longLease).getKey());

            subscriber.stop();
            assertEquals("nothing left pending", 0, timers.pendingCount());
            assertEquals("nothing dead", 0, timers.deadCount());
        }
    }

    /** Registers with a key: retried if tickd is still coming up. */
    private static String register(TickdClient client, String key, Duration delay) {
        client.register(TimerSpec.newBuilder().setKey(key).setDelay(ProtoTime.duration(delay)).build());
        return key;
    }

    private static Set<String> missing(Set<String> expected, Set<String> seen) {
        Set<String> missing = new HashSet<>(expected);
        missing.removeAll(seen);
        return missing;
    }
}
