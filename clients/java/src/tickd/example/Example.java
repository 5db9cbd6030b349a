package tickd.example;

import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import com.google.protobuf.ByteString;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import tickd.client.RemoteTimer;
import tickd.client.Timeout;
import tickd.v1.Tickd;
import tickd.v1.TimersGrpc;

/**
 * Moving from Netty's HashedWheelTimer to tickd: timeouts, a heartbeat lease, and consuming
 * expirations registered by another service; then, with the generated stub, a cron timer
 * replaced under its key and rescheduled, and Redrive. Exits non-zero if anything does not
 * happen.
 *
 * <p>Run with TICKD_ADDR=host:port (default 127.0.0.1:50051); see clients/java/run.sh.
 */
public final class Example {
    /** Only so a broken server fails the example instead of hanging it. */
    private static final long PATIENCE_SECONDS = 30;

    public static void main(String[] args) throws Exception {
        String addr = System.getenv().getOrDefault("TICKD_ADDR", "127.0.0.1:50051");
        String namespace = "java-example-" + UUID.randomUUID().toString().substring(0, 8);
        try (RemoteTimer timer = RemoteTimer.connect(addr, namespace)) {
            timeouts(timer);
            lease(timer);
            consume(timer, addr);
            schedules(timer.namespace(), addr);
        }
        System.out.println("all ok");
    }

    /** newTimeout, exactly as with HashedWheelTimer; one of them cancelled. */
    private static void timeouts(RemoteTimer timer) throws Exception {
        List<String> ran = new CopyOnWriteArrayList<>();
        CountDownLatch done = new CountDownLatch(3);
        Timeout first = timer.newTimeout(t -> { ran.add("first"); done.countDown(); }, 100, TimeUnit.MILLISECONDS);
        Timeout third = timer.newTimeout(t -> { ran.add("third"); done.countDown(); }, 300, TimeUnit.MILLISECONDS);
        Timeout fourth = timer.newTimeout(t -> { ran.add("fourth"); done.countDown(); }, 400, TimeUnit.MILLISECONDS);
        // Cancelled long before it is due, as a request timeout is when the answer comes.
        Timeout doomed = timer.newTimeout(t -> { ran.add("doomed"); done.countDown(); }, 1, TimeUnit.HOURS);
        check(doomed.cancel(), "cancel() of a pending timeout returns true");
        check(!doomed.cancel(), "a second cancel() returns false");
        check(doomed.isCancelled(), "isCancelled() after cancel()");
        check(done.await(PATIENCE_SECONDS, TimeUnit.SECONDS), "three tasks ran, got " + ran);
        check(ran.equals(List.of("first", "third", "fourth")), "tasks ran in deadline order: " + ran);
        check(first.isExpired() && third.isExpired() && fourth.isExpired(), "isExpired() after running");
        check(!fourth.cancel(), "cancel() after running returns false");
        System.out.println("newTimeout ok: 3 tasks ran in deadline order; the cancelled one did not run");
    }

    /** A worker heartbeats its lease; once it stops, the supervisor's task runs. */
    private static void lease(RemoteTimer timer) throws Exception {
        CountDownLatch expired = new CountDownLatch(1);
        Timeout lease = timer.newLease(t -> expired.countDown(), 2, TimeUnit.SECONDS);
        long lastDeadline;
        try (RemoteTimer.Heartbeat heartbeat = timer.keepAlive(lease, 2, TimeUnit.SECONDS)) {
            List<Tickd.KeepAliveResponse> answers = heartbeat.awaitAnswers(3, PATIENCE_SECONDS, TimeUnit.SECONDS);
            long previous = Long.MIN_VALUE;
            for (Tickd.KeepAliveResponse answer : answers) {
                check(answer.getId().equals(lease.id()), "heartbeat answered for the lease");
                long deadline = nanos(answer.getDeadline());
                check(deadline >= previous, "each heartbeat pushes the deadline on");
                previous = deadline;
            }
            lastDeadline = previous;
            check(!lease.isExpired(), "the lease is alive while heartbeating");
        }
        check(expired.await(PATIENCE_SECONDS, TimeUnit.SECONDS), "the lease expired after heartbeats stopped");
        check(lease.isExpired(), "isExpired() once the lease task ran");
        check(System.currentTimeMillis() * 1_000_000L >= lastDeadline, "not before its last deadline");
        System.out.println("lease ok: 3 heartbeats kept it alive; its task ran once they stopped");
    }

    /**
     * Work that outlives a JVM: another service registers a timer with a payload in this
     * namespace; the timer's expiration handler takes it, and it is acknowledged.
     */
    private static void consume(RemoteTimer timer, String addr) throws Exception {
        BlockingQueue<Tickd.Expiration> handled = new ArrayBlockingQueue<>(10);
        timer.onExpiration(handled::add);
        ManagedChannel channel = ManagedChannelBuilder.forTarget(addr).usePlaintext().build();
        try {
            Tickd.NewTimeoutResponse registered = TimersGrpc.newBlockingStub(channel)
                    .withDeadlineAfter(PATIENCE_SECONDS, TimeUnit.SECONDS)
                    .newTimeout(Tickd.NewTimeoutRequest.newBuilder()
                            .setTimer(Tickd.TimerSpec.newBuilder()
                                    .setNamespace(timer.namespace())
                                    .setDelay(com.google.protobuf.Duration.newBuilder().setNanos(50_000_000))
                                    .setPayload(ByteString.copyFrom("close order 42", StandardCharsets.UTF_8)))
                            .build());
            Tickd.Expiration expiration = handled.poll(PATIENCE_SECONDS, TimeUnit.SECONDS);
            check(expiration != null, "the payload timer's expiration was handled");
            check(expiration.getTimer().getId().equals(registered.getTimer().getId()), "the same timer");
            check(expiration.getTimer().getPayload().toStringUtf8().equals("close order 42"), "its payload");
            check(expiration.getAttempt() == 1, "first delivery");
        } finally {
            channel.shutdownNow();
        }
        System.out.println("consume ok: a payload timer from another service was handled and acknowledged");
    }

    /**
     * A cron timer (09:00 on weekdays in Berlin), replaced under its key, then rescheduled;
     * and Redrive, which finds nothing dead in a fresh namespace.
     */
    private static void schedules(String namespace, String addr) {
        ManagedChannel channel = ManagedChannelBuilder.forTarget(addr).usePlaintext().build();
        try {
            TimersGrpc.TimersBlockingStub stub = TimersGrpc.newBlockingStub(channel)
                    .withDeadlineAfter(PATIENCE_SECONDS, TimeUnit.SECONDS);
            Tickd.NewTimeoutResponse created = stub.newTimeout(Tickd.NewTimeoutRequest.newBuilder()
                    .setTimer(Tickd.TimerSpec.newBuilder()
                            .setNamespace(namespace)
                            .setKey("standup")
                            .setCron("0 9 * * MON-FRI")
                            .setTimeZone("Europe/Berlin"))
                    .build());
            Tickd.Timer cronTimer = created.getTimer();
            check(created.getCreated() && cronTimer.getCron().equals("0 9 * * MON-FRI")
                    && cronTimer.getTimeZone().equals("Europe/Berlin"), "the cron timer shows its schedule");
            check(nanos(cronTimer.getDeadline()) > System.currentTimeMillis() * 1_000_000L, "its next firing is ahead");

            // replace with the key: the pending timer is replaced whole, keeping its id.
            Tickd.NewTimeoutResponse replaced = stub.newTimeout(Tickd.NewTimeoutRequest.newBuilder()
                    .setTimer(Tickd.TimerSpec.newBuilder()
                            .setNamespace(namespace)
                            .setKey("standup")
                            .setCron("30 9 * * MON-FRI")
                            .setTimeZone("Europe/Berlin")
                            .setReplace(true))
                    .build());
            check(!replaced.getCreated() && replaced.getReplaced()
                    && replaced.getTimer().getId().equals(cronTimer.getId()), "replaced under its key");
            check(replaced.getTimer().getCron().equals("30 9 * * MON-FRI"), "the new schedule");

            // Reschedule moves this firing (the schedule carries on after it), with a new payload.
            long newSeconds = 1_893_488_400L; // 2030-01-01T09:00:00Z
            Tickd.TimerRef byKey = Tickd.TimerRef.newBuilder().setNamespace(namespace).setKey("standup").build();
            Tickd.Timer moved = stub.reschedule(Tickd.RescheduleRequest.newBuilder()
                    .setTimer(byKey)
                    .setDeadline(com.google.protobuf.Timestamp.newBuilder().setSeconds(newSeconds))
                    .setPayload(ByteString.copyFrom("moved", StandardCharsets.UTF_8))
                    .build()).getTimer();
            check(moved.getDeadline().getSeconds() == newSeconds, "rescheduled to the new deadline");
            Tickd.Timer got = stub.get(Tickd.GetRequest.newBuilder().setTimer(byKey).build()).getTimer();
            check(got.getPayload().toStringUtf8().equals("moved"), "the new payload");
            stub.cancel(Tickd.CancelRequest.newBuilder().setTimer(byKey).build());

            // Redrive: no ids means every dead expiration of the namespace (none here); ids that
            // are not dead expirations come back in not_dead.
            Tickd.RedriveResponse all = stub.redrive(Tickd.RedriveRequest.newBuilder().setNamespace(namespace).build());
            check(all.getRedriven() == 0 && all.getNotDeadCount() == 0, "nothing dead to redrive");
            Tickd.RedriveResponse named = stub.redrive(Tickd.RedriveRequest.newBuilder()
                    .setNamespace(namespace).addDeliveryIds("00000000000000ff").build());
            check(named.getNotDeadList().equals(List.of("00000000000000ff")), "an unknown id is not dead");
        } finally {
            channel.shutdownNow();
        }
        System.out.println("schedules ok: a cron timer was registered, replaced and rescheduled; redrive found nothing dead");
    }

    private static long nanos(com.google.protobuf.Timestamp timestamp) {
        return timestamp.getSeconds() * 1_000_000_000L + timestamp.getNanos();
    }

    private static void check(boolean condition, String what) {
        if (!condition) {
            System.err.println("FAILED: " + what);
            System.exit(1);
        }
    }
}
