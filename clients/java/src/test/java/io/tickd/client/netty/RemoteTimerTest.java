package io.tickd.client.netty;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertSame;
import static org.junit.Assert.assertTrue;

import com.google.protobuf.ByteString;
import io.tickd.client.ProtoTime;
import io.tickd.client.TestTickd;
import io.tickd.client.TickdClient;
import io.tickd.v1.Expiration;
import io.tickd.v1.TimerSpec;
import java.time.Duration;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.AfterClass;
import org.junit.BeforeClass;
import org.junit.Test;

/** RemoteTimer keeps Netty's Timer behaviour, with tickd as the wheel. */
public class RemoteTimerTest {
    private static TestTickd tickd;

    @BeforeClass
    public static void startTickd() throws Exception {
        tickd = TestTickd.start("--sync", "none");
    }

    @AfterClass
    public static void stopTickd() {
        if (tickd != null) {
            tickd.close();
        }
    }

    @Test
    public void aTimeoutRunsItsTaskOnceAndThenCountsAsExpired() throws Exception {
        try (RemoteTimer timer = RemoteTimer.connect(tickd.address(), "rt-run")) {
            CompletableFuture<Timeout> ran = new CompletableFuture<>();
            Timeout timeout = timer.newTimeout(ran::complete, 50, TimeUnit.MILLISECONDS);
            assertFalse(timeout.id().isEmpty());
            assertSame(timeout, ran.get(60, TimeUnit.SECONDS));
            assertTrue(timeout.isExpired());
            assertFalse("an expired timeout cannot be cancelled", timeout.cancel());
            assertSame(timer, timeout.timer());
        }
    }

    @Test
    public void aCancelledTimeoutNeverRunsAndStopReturnsTheUnexpired() throws Exception {
        RemoteTimer timer = RemoteTimer.connect(tickd.address(), "rt-cancel");
        AtomicInteger runs = new AtomicInteger();
        Timeout cancelled = timer.newTimeout(t -> runs.incrementAndGet(), 1, TimeUnit.HOURS);
        Timeout pending = timer.newTimeout(t -> runs.incrementAndGet(), 1, TimeUnit.HOURS);
        assertTrue(cancelled.cancel());
        assertTrue(cancelled.isCancelled());
        assertFalse("cancelled once only", cancelled.cancel());
        try (TickdClient client = TickdClient.builder().target(tickd.address()).namespace("rt-cancel").build()) {
            assertEquals("only the uncancelled one is pending on tickd", 1, client.pendingCount());
        }
        Set<Timeout> unexpired = timer.stop();
        assertEquals(Set.of(pending), unexpired);
        assertEquals(0, runs.get());
    }

    @Test
    public void expirationsWithoutATaskGoToTheFallbackHandler() throws Exception {
        try (RemoteTimer timer = RemoteTimer.connect(tickd.address(), "rt-fallback");
                TickdClient other = TickdClient.builder().target(tickd.address()).namespace("rt-fallback").build()) {
            CompletableFuture<Expiration> received = new CompletableFuture<>();
            timer.onExpiration(received::complete);
            other.register(TimerSpec.newBuilder().setDelay(ProtoTime.duration(Duration.ZERO))
                    .setPayload(ByteString.copyFromUtf8("from another service")).build());
            assertEquals("from another service", received.get(60, TimeUnit.SECONDS).getTimer().getPayload().toStringUtf8());
        }
    }

    @Test
    public void anExpirationNobodyHandlesIsLeftUnacknowledgedAndEndsDead() throws Exception {
        try (TestTickd strict = TestTickd.start("--sync", "none", "--ack-timeout", "1s", "--max-attempts", "2");
                RemoteTimer timer = RemoteTimer.connect(strict.address(), "rt-orphan");
                TickdClient other = TickdClient.builder().target(strict.address()).namespace("rt-orphan").build()) {
            // No task of this JVM and no onExpiration handler: not acknowledged (not lost), so
            // tickd redelivers it and then keeps it dead, where an operator can redrive it.
            other.register(TimerSpec.newBuilder().setKey("orphan").setDelay(ProtoTime.duration(Duration.ZERO)).build());
            long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            while (other.deadCount() != 1) {
                assertTrue("the unhandled expiration ends dead", System.nanoTime() < end);
                Thread.sleep(20); // polling interval
            }
            assertEquals("orphan", other.deadExpirations().get(0).getTimer().getKey());
        }
    }

    @Test
    public void aLeaseKeptAliveDoesNotFireUntilItsHeartbeatStops() throws Exception {
        try (RemoteTimer timer = RemoteTimer.connect(tickd.address(), "rt-lease")) {
            CountDownLatch leaseExpired = new CountDownLatch(1);
            Timeout lease = timer.newLease(t -> leaseExpired.countDown(), 3, TimeUnit.SECONDS);
            Heartbeat heartbeat = timer.keepAlive(lease, 3, TimeUnit.SECONDS);
            assertTrue(heartbeat.isActive());
            // Two ttls pass (a timeout fires after them) while the lease is heartbeated every second.
            CountDownLatch later = new CountDownLatch(1);
            timer.newTimeout(t -> later.countDown(), 6, TimeUnit.SECONDS);
            assertTrue(later.await(60, TimeUnit.SECONDS));
            assertEquals("kept alive past two ttls", 1, leaseExpired.getCount());
            assertFalse(lease.isExpired());
            heartbeat.close();
            assertFalse(heartbeat.isActive());
            assertTrue("fires once its heartbeats stopped", leaseExpired.await(60, TimeUnit.SECONDS));
            assertTrue(lease.isExpired());
        }
    }
}
