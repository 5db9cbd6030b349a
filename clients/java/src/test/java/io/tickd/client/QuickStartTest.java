package io.tickd.client;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertTrue;

import com.google.protobuf.ByteString;
import io.tickd.v1.TimerRef;
import io.tickd.v1.TimerSpec;
import java.time.Duration;
import java.time.Instant;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import org.junit.Test;

/** The README's quick start, run as written (with a short delay) against a real tickd. */
public class QuickStartTest {
    @Test
    public void theQuickStartWorks() throws Exception {
        List<String> closedOrders = new CopyOnWriteArrayList<>();
        List<Instant> renewals = new CopyOnWriteArrayList<>();
        try (TickdServer server = TickdServer.start("--sync", "none");
                TickdClient tickd = TickdClient.builder().target(server.address()).namespace("orders").build()) {
            tickd.register(TimerSpec.newBuilder().setKey("order-42")
                    .setDelay(ProtoTime.duration(Duration.ofMillis(100)))
                    .setPayload(ByteString.copyFromUtf8("close order 42")).build());

            Subscriber subscriber = tickd.subscriber(delivery -> closedOrders.add(delivery.payload().toStringUtf8()))
                    .maxInFlight(4).start();

            tickd.register(TimerSpec.newBuilder().setKey("worker-7").setTtl(ProtoTime.duration(Duration.ofSeconds(30))).build());
            LeaseKeeper keeper = tickd.leaseKeeper(new LeaseListener() {
                @Override
                public void onLost(TimerRef lease, TickdException why) {
                    throw new AssertionError("lost " + lease.getKey() + ": " + why.getMessage());
                }

                @Override
                public void onRenewed(TimerRef lease, Instant deadline) {
                    renewals.add(deadline);
                }
            });
            keeper.add(tickd.byKey("worker-7"), Duration.ofSeconds(30));

            Await.until("the order closed", () -> closedOrders.contains("close order 42"));
            Await.until("the lease heartbeated", () -> !renewals.isEmpty());
            keeper.close();
            subscriber.stop();
            assertEquals(1, tickd.pendingCount()); // the lease, until its ttl runs out
            assertTrue(tickd.get(tickd.byKey("worker-7")).getTtl().getSeconds() == 30);
        }
    }
}
