package io.tickd.client;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertNotEquals;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import com.google.protobuf.ByteString;
import io.grpc.Status;
import io.tickd.v1.Expiration;
import io.tickd.v1.NewTimeoutResponse;
import io.tickd.v1.RedriveResponse;
import io.tickd.v1.Timer;
import io.tickd.v1.TimerSpec;
import java.time.DayOfWeek;
import java.time.Duration;
import java.time.Instant;
import java.time.ZoneId;
import java.time.ZonedDateTime;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.AfterClass;
import org.junit.BeforeClass;
import org.junit.Test;

/** Every RPC through the client against a real tickd, each answer checked. */
public class ApiRoundTripTest {
    private static TickdServer server;

    @BeforeClass
    public static void startTickd() throws Exception {
        server = TickdServer.start("--sync", "none", "--max-attempts", "2");
    }

    @AfterClass
    public static void stopTickd() {
        if (server != null) {
            server.close();
        }
    }

    private static TickdClient client(String namespace) {
        return server.client().namespace(namespace).build();
    }

    private static TimerSpec.Builder in(Duration delay) {
        return TimerSpec.newBuilder().setDelay(ProtoTime.duration(delay));
    }

    @Test
    public void batchWithOneInvalidItemRegistersTheOthers() {
        try (TickdClient tickd = client("batch")) {
            List<BatchResult> results = tickd.registerAll(Arrays.asList(
                    in(Duration.ofHours(1)).setKey("first").build(),
                    TimerSpec.newBuilder().setKey("bad").setCron("not a cron").build(),
                    in(Duration.ofHours(1)).setKey("third").build()));
            assertEquals(3, results.size());
            assertTrue(results.get(0).isRegistered());
            assertEquals("first", results.get(0).registered().getTimer().getKey());
            assertFalse(results.get(1).isRegistered());
            assertEquals(Status.Code.INVALID_ARGUMENT, results.get(1).error().code());
            assertTrue(results.get(1).error().description(), results.get(1).error().description().contains("cron"));
            assertTrue(results.get(2).isRegistered());
            assertEquals(2, tickd.pendingCount());
        }
    }

    @Test
    public void registeringAKeyAgainReturnsTheTimerAndReplaceReplacesIt() {
        try (TickdClient tickd = client("replace")) {
            NewTimeoutResponse first = tickd.register(in(Duration.ofHours(1)).setKey("k").build());
            assertTrue(first.getCreated());
            NewTimeoutResponse again = tickd.register(in(Duration.ofHours(5)).setKey("k").build());
            assertFalse(again.getCreated());
            assertFalse(again.getReplaced());
            assertEquals(first.getTimer().getDeadline(), again.getTimer().getDeadline());
            NewTimeoutResponse replaced = tickd.register(in(Duration.ofHours(5)).setKey("k").setReplace(true)
                    .setPayload(ByteString.copyFromUtf8("new")).build());
            assertFalse(replaced.getCreated());
            assertTrue(replaced.getReplaced());
            assertEquals(first.getTimer().getId(), replaced.getTimer().getId());
            assertTrue(ProtoTime.instant(replaced.getTimer().getDeadline())
                    .isAfter(ProtoTime.instant(first.getTimer().getDeadline())));
            assertEquals("new", tickd.get(tickd.byKey("k")).getPayload().toStringUtf8());
        }
    }

    @Test
    public void cronWithATimeZoneFiresAtNineInBerlinOnWeekdays() {
        try (TickdClient tickd = client("cron")) {
            Timer timer = tickd.register(TimerSpec.newBuilder().setKey("standup")
                    .setCron("0 9 * * MON-FRI").setTimeZone("Europe/Berlin").build()).getTimer();
            ZonedDateTime next = ProtoTime.instant(timer.getDeadline()).atZone(ZoneId.of("Europe/Berlin"));
            assertEquals(9, next.getHour());
            assertEquals(0, next.getMinute());
            assertFalse(next.getDayOfWeek() == DayOfWeek.SATURDAY || next.getDayOfWeek() == DayOfWeek.SUNDAY);
            Timer got = tickd.get(tickd.byId(timer.getId()));
            assertEquals("0 9 * * MON-FRI", got.getCron());
            assertEquals("Europe/Berlin", got.getTimeZone());
        }
    }

    @Test
    public void aRepeatingTimerFiresAgainAndAgain() throws Exception {
        try (TickdClient tickd = client("repeat")) {
            Timer timer = tickd.register(in(Duration.ofMillis(100)).setKey("tick")
                    .setRepeat(ProtoTime.duration(Duration.ofMillis(100))).build()).getTimer();
            assertEquals(Duration.ofMillis(100), ProtoTime.duration(timer.getRepeat()));
            AtomicInteger firings = new AtomicInteger();
            try (Subscriber subscriber = tickd.subscriber(delivery -> firings.incrementAndGet()).start()) {
                Await.until("three firings of the repeating timer", () -> firings.get() >= 3);
            }
            assertTrue(tickd.cancel(tickd.byId(timer.getId())));
        }
    }

    @Test
    public void aLeaseIsTouchedForwardByItsTtl() {
        try (TickdClient tickd = client("ttl")) {
            Timer lease = tickd.register(TimerSpec.newBuilder().setKey("worker")
                    .setTtl(ProtoTime.duration(Duration.ofHours(1))).build()).getTimer();
            assertEquals(Duration.ofHours(1), ProtoTime.duration(lease.getTtl()));
            Instant before = Instant.now();
            Timer touched = tickd.touch(tickd.byKey("worker"), Duration.ofHours(2));
            assertEquals(Duration.ofHours(2), ProtoTime.duration(touched.getTtl()));
            assertFalse(ProtoTime.instant(touched.getDeadline()).isBefore(before.plus(Duration.ofHours(2))));
            Timer touchedAgain = tickd.touch(tickd.byId(lease.getId()));
            assertEquals(Duration.ofHours(2), ProtoTime.duration(touchedAgain.getTtl()));
        }
    }

    @Test
    public void rescheduleKeepsOrReplacesThePayload() {
        try (TickdClient tickd = client("reschedule")) {
            Timer timer = tickd.register(in(Duration.ofHours(1)).setKey("r")
                    .setPayload(ByteString.copyFromUtf8("original")).build()).getTimer();
            Timer moved = tickd.reschedule(tickd.byKey("r"), Duration.ofHours(3));
            assertEquals(timer.getId(), moved.getId());
            assertTrue(ProtoTime.instant(moved.getDeadline()).isAfter(ProtoTime.instant(timer.getDeadline())));
            assertEquals("original", tickd.get(tickd.byKey("r")).getPayload().toStringUtf8());

            Instant at = Instant.now().plus(Duration.ofDays(1));
            Timer movedAt = tickd.rescheduleAt(tickd.byId(timer.getId()), at, "moved".getBytes());
            assertEquals(ProtoTime.timestamp(at), movedAt.getDeadline());
            assertEquals("moved", tickd.get(tickd.byKey("r")).getPayload().toStringUtf8());

            tickd.reschedule(tickd.byKey("r"), Duration.ofHours(1), new byte[0]);
            assertTrue("an empty payload is a payload", tickd.get(tickd.byKey("r")).getPayload().isEmpty());
        }
    }

    @Test
    public void getAndCancelByIdAndByKey() {
        try (TickdClient tickd = client("cancel")) {
            Timer byId = tickd.register(in(Duration.ofHours(1)).setPayload(ByteString.copyFromUtf8("p")).build()).getTimer();
            assertTrue("registration answers carry no payload", byId.getPayload().isEmpty());
            Timer got = tickd.get(tickd.byId(byId.getId()));
            assertEquals("p", got.getPayload().toStringUtf8());
            assertTrue(ProtoTime.duration(got.getRemaining()).compareTo(Duration.ZERO) > 0);
            assertTrue(tickd.cancel(tickd.byId(byId.getId())));
            assertFalse("cancelled already", tickd.cancel(tickd.byId(byId.getId())));

            tickd.register(in(Duration.ofHours(1)).setKey("by-key").build());
            assertTrue(tickd.cancel(tickd.byKey("by-key")));
            TickdException gone = expectError(() -> tickd.cancel(tickd.byKey("by-key")));
            assertEquals(Status.Code.NOT_FOUND, gone.code());
            TickdException unknown = expectError(() -> tickd.get(tickd.byId(byId.getId())));
            assertEquals(Status.Code.NOT_FOUND, unknown.code());
        }
    }

    @Test
    public void errorsCarryTheCodeAndAMessageNamingTheField() {
        try (TickdClient tickd = client("errors")) {
            TickdException both = expectError(() -> tickd.register(TimerSpec.newBuilder()
                    .setDelay(ProtoTime.duration(Duration.ofSeconds(1)))
                    .setDeadline(ProtoTime.timestamp(Instant.now())).build()));
            assertEquals(Status.Code.INVALID_ARGUMENT, both.code());
            assertTrue(both.description(), both.description().contains("delay") || both.description().contains("deadline"));
            TickdException zone = expectError(() -> tickd.register(TimerSpec.newBuilder()
                    .setCron("@daily").setTimeZone("Mars/Olympus_Mons").build()));
            assertEquals(Status.Code.INVALID_ARGUMENT, zone.code());
            assertTrue(zone.description(), zone.description().contains("time_zone"));
            assertTrue(zone.getMessage().startsWith("INVALID_ARGUMENT: "));
        }
    }

    @Test
    public void pendingPagesAreFetchedLazily() {
        try (TickdClient tickd = client("pages")) {
            Set<String> registered = new HashSet<>();
            for (int i = 0; i < 7; i++) {
                registered.add(tickd.register(in(Duration.ofHours(1)).setKey("p" + i).build()).getTimer().getId());
            }
            assertEquals(7, tickd.pendingCount());
            PendingIterator timers = tickd.pending(2).iterator();
            assertEquals("nothing fetched before iterating", 0, timers.pagesFetched());
            Set<String> listed = new HashSet<>();
            listed.add(timers.next().getId());
            assertEquals("only the first page fetched", 1, timers.pagesFetched());
            while (timers.hasNext()) {
                assertTrue("each timer once", listed.add(timers.next().getId()));
            }
            assertEquals(registered, listed);
            assertTrue("at least four pages of two: " + timers.pagesFetched(), timers.pagesFetched() >= 4);
        }
    }

    @Test
    public void deadExpirationsAreListedAndRedriven() throws Exception {
        try (TickdClient tickd = client("dead")) {
            String id = tickd.register(in(Duration.ZERO).setKey("doomed").build()).getTimer().getId();
            Set<Integer> attempts = ConcurrentHashMap.newKeySet();
            try (Subscriber failing = tickd.subscriber(delivery -> {
                attempts.add(delivery.attempt());
                throw new IllegalStateException("handler fails on purpose");
            }).ackTimeout(Duration.ofMillis(200)).start()) {
                Await.until("the expiration to run out of its 2 attempts", () -> tickd.deadCount() == 1);
            }
            assertEquals(new HashSet<>(Arrays.asList(1, 2)), attempts);
            List<Expiration> dead = tickd.deadExpirations();
            assertEquals(1, dead.size());
            assertEquals(id, dead.get(0).getTimer().getId());

            RedriveResponse redriven = tickd.redrive(Arrays.asList(dead.get(0).getDeliveryId(), "no-such-delivery"));
            assertEquals(1, redriven.getRedriven());
            assertEquals(Collections.singletonList("no-such-delivery"), redriven.getNotDeadList());
            assertEquals(0, tickd.deadCount());

            List<Integer> redelivered = Collections.synchronizedList(new ArrayList<>());
            Set<Boolean> acked = ConcurrentHashMap.newKeySet();
            try (Subscriber working = tickd.subscriber(delivery -> redelivered.add(delivery.attempt()))
                    .listener(new SubscriberListener() {
                        @Override
                        public void onAcknowledged(Delivery delivery, boolean acknowledged) {
                            acked.add(acknowledged);
                        }
                    }).start()) {
                Await.until("the redriven expiration to be handled and acked", () -> acked.contains(true));
            }
            assertEquals("attempts count afresh after a redrive", Integer.valueOf(1), redelivered.get(0));
            assertEquals(0, tickd.deadCount());
            assertEquals(0, tickd.pendingCount());
        }
    }

    @Test
    public void derivedClientsShareTheChannelWithTheirOwnDeadlineNamespaceAndRetries() {
        try (TickdClient tickd = client("derived")) {
            TickdClient impatient = tickd.withCallDeadline(Duration.ofNanos(1));
            TickdException late = expectError(impatient::pendingCount);
            assertEquals("a deadline of 1 ns passes before any answer", Status.Code.DEADLINE_EXCEEDED, late.code());
            TickdClient elsewhere = tickd.withNamespace("derived-other").withRetryPolicy(RetryPolicy.none());
            elsewhere.register(in(Duration.ofHours(1)).setKey("x").build());
            assertEquals(1, elsewhere.pendingCount());
            assertEquals(0, tickd.pendingCount());
            elsewhere.close();
            assertEquals("closing a derived client leaves the channel open", 0, tickd.pendingCount());
        }
    }

    private static TickdException expectError(Runnable call) {
        try {
            call.run();
        } catch (TickdException expected) {
            assertNotEquals(Status.Code.OK, expected.code());
            return expected;
        }
        fail("expected a TickdException");
        return null;
    }
}
