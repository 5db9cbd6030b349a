package io.tickd.client;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertNotEquals;
import static org.junit.Assert.assertTrue;

import io.grpc.CallOptions;
import io.grpc.Channel;
import io.grpc.ClientCall;
import io.grpc.ClientInterceptor;
import io.grpc.MethodDescriptor;
import io.grpc.Status;
import io.tickd.v1.TimerRef;
import io.tickd.v1.TimerSpec;
import java.time.Duration;
import java.time.Instant;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.junit.After;
import org.junit.Test;

/** The lease keeper's reconnect back-off and its hold on a lease kept by key, against a real tickd. */
public class LeaseKeeperTest {
    private TickdServer server;

    @After
    public void stopTickd() {
        if (server != null) {
            server.close();
        }
    }

    @Test
    public void reconnectsBackOffEvenWithCallRetriesOff() throws Exception {
        server = TickdServer.start("--sync", "none");
        try (TickdClient noRetries = TickdClient.builder().target(server.address()).retryPolicy(RetryPolicy.none()).build();
                LeaseKeeper keeper = noRetries.leaseKeeper((lease, why) -> { })) {
            assertTrue("the client's reconnect back-off starts above zero",
                    noRetries.reconnectPolicy().initialBackoff().compareTo(Duration.ZERO) > 0);
            Duration firstWait = keeper.reconnectBackoff().next();
            assertTrue("the keeper waits before reconnecting: " + firstWait, firstWait.compareTo(Duration.ZERO) > 0);
            Subscriber subscriber = noRetries.subscriber(delivery -> { }).start();
            subscriber.stop();
        }
    }

    @Test
    public void aKeyRegisteredAnewIsReportedLostAndNotKeptAlive() throws Exception {
        server = TickdServer.start("--sync", "always");
        Map<TimerRef, TickdException> lost = new ConcurrentHashMap<>();
        Set<Instant> deadlines = ConcurrentHashMap.newKeySet();
        CountDownLatch gate = new CountDownLatch(1);
        GateInterceptor keepAliveGate = new GateInterceptor(gate);
        try (TickdClient tickd = server.client().namespace("rekey").build();
                TickdClient keeperClient = server.client().namespace("rekey").interceptor(keepAliveGate).build();
                LeaseKeeper keeper = keeperClient.leaseKeeper(new LeaseListener() {
                    @Override
                    public void onLost(TimerRef lease, TickdException reason) {
                        lost.put(lease, reason);
                    }

                    @Override
                    public void onRenewed(TimerRef lease, Instant deadline) {
                        deadlines.add(deadline);
                    }
                })) {
            TimerRef worker = tickd.byKey("worker");
            String firstId = tickd.register(TimerSpec.newBuilder().setKey("worker")
                    .setTtl(ProtoTime.duration(Duration.ofSeconds(1))).build()).getTimer().getId();
            keeper.add(worker, Duration.ofSeconds(1));
            Await.until("the lease heartbeated", () -> !deadlines.isEmpty());

            keepAliveGate.close(); // the keeper's next KeepAlive stream waits at the gate
            server.stop();
            Instant stoppedAt = Instant.now();
            Await.until("wall-clock time past the lease's last possible deadline",
                    () -> Instant.now().isAfter(stoppedAt.plusSeconds(1).plusMillis(200)));
            server.startAgain();
            String secondId = tickd.register(TimerSpec.newBuilder().setKey("worker").setReplace(true)
                    .setTtl(ProtoTime.duration(Duration.ofSeconds(1))).build()).getTimer().getId();
            assertNotEquals(firstId, secondId);

            gate.countDown(); // the keeper reconnects and heartbeats "worker": tickd answers with the new id
            Await.until("the original lease reported lost", () -> lost.containsKey(worker));
            assertEquals(Status.Code.NOT_FOUND, lost.get(worker).code());
            assertEquals(Set.of(), keeper.leases());
            // Not kept alive by the keeper: the newcomer (ttl 1 s) expires on its own.
            Await.until("the new lease to expire", () -> {
                try {
                    tickd.get(worker);
                    return false;
                } catch (TickdException gone) {
                    return gone.code() == Status.Code.NOT_FOUND;
                }
            });
        }
    }

    /** Holds new KeepAlive calls (on the caller's thread) once closed, until its latch is released. */
    private static final class GateInterceptor implements ClientInterceptor {
        private final CountDownLatch released;
        private volatile boolean closed;

        GateInterceptor(CountDownLatch released) {
            this.released = released;
        }

        void close() {
            closed = true;
        }

        @Override
        public <Q, A> ClientCall<Q, A> interceptCall(MethodDescriptor<Q, A> method, CallOptions options, Channel next) {
            if (closed && method.getFullMethodName().endsWith("/KeepAlive")) {
                try {
                    released.await(120, TimeUnit.SECONDS);
                } catch (InterruptedException interrupted) {
                    Thread.currentThread().interrupt();
                }
            }
            return next.newCall(method, options);
        }
    }
}
