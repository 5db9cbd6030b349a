package tickd.client;

import io.grpc.Channel;
import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.stub.ClientCallStreamObserver;
import io.grpc.stub.ClientResponseObserver;
import io.grpc.stub.StreamObserver;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.Consumer;
import java.util.logging.Level;
import java.util.logging.Logger;
import tickd.v1.Tickd;
import tickd.v1.TimersGrpc;

/**
 * A drop-in replacement for Netty's {@code HashedWheelTimer}, backed by tickd.
 *
 * <pre>{@code
 * // before: Timer timer = new HashedWheelTimer();
 * RemoteTimer timer = RemoteTimer.connect("127.0.0.1:50051", "orders-" + podName);
 * Timeout timeout = timer.newTimeout(t -> closeUnpaidOrder(42), 30, TimeUnit.MINUTES);
 * timeout.cancel(); // when the order is paid
 * }</pre>
 *
 * <p>The wheel lives in tickd: registering, cancelling and firing happen there, and this class
 * keeps only the tasks. Each timer gets a fresh client key; the timer's expiration comes back
 * over one Subscribe stream, the task with that key runs on a single task thread (as in Netty,
 * tasks should be short), and the expiration is then acknowledged, so a task that never ran
 * is delivered again.
 *
 * <p>Tasks are Java objects and cannot survive this JVM. Give each process its own namespace
 * for {@code newTimeout}; for work that must outlive the process, register timers with a
 * payload (from any language) and handle them with {@link #onExpiration}.
 */
public final class RemoteTimer implements AutoCloseable {
    private static final Logger LOG = Logger.getLogger(RemoteTimer.class.getName());

    private final ManagedChannel ownedChannel;
    private final TimersGrpc.TimersBlockingStub blocking;
    private final TimersGrpc.TimersStub async;
    private final String namespace;
    private final long rpcTimeoutMillis;
    private final Map<String, RemoteTimeout> byKey = new ConcurrentHashMap<>();
    private final ExecutorService tasks;
    private final ScheduledExecutorService heartbeats;
    private final AtomicReference<ClientCallStreamObserver<Tickd.SubscribeRequest>> subscription =
            new AtomicReference<>();
    private volatile Consumer<Tickd.Expiration> fallback;
    private volatile boolean stopped;

    /** Connects to tickd at {@code host:port} (plaintext) and subscribes to {@code namespace}. */
    public static RemoteTimer connect(String target, String namespace) {
        ManagedChannel channel = ManagedChannelBuilder.forTarget(target).usePlaintext().build();
        return new RemoteTimer(channel, channel, namespace);
    }

    /** Uses a channel the caller owns (TLS, interceptors, ...) and subscribes to {@code namespace}. */
    public RemoteTimer(Channel channel, String namespace) {
        this(channel, null, namespace);
    }

    private RemoteTimer(Channel channel, ManagedChannel owned, String namespace) {
        this.ownedChannel = owned;
        this.blocking = TimersGrpc.newBlockingStub(channel);
        this.async = TimersGrpc.newStub(channel);
        this.namespace = namespace;
        this.rpcTimeoutMillis = 10_000;
        this.tasks = Executors.newSingleThreadExecutor(daemon("tickd-timer-tasks"));
        this.heartbeats = Executors.newSingleThreadScheduledExecutor(daemon("tickd-heartbeats"));
        subscribe();
    }

    private static java.util.concurrent.ThreadFactory daemon(String name) {
        return runnable -> {
            Thread thread = new Thread(runnable, name);
            thread.setDaemon(true);
            return thread;
        };
    }

    public String namespace() {
        return namespace;
    }

    /**
     * Schedules {@code task} to run once after {@code delay}: Netty's
     * {@code Timer.newTimeout(TimerTask, long, TimeUnit)}. Throws
     * {@link RejectedExecutionException} when tickd refuses it (e.g. too many pending timers).
     */
    public Timeout newTimeout(TimerTask task, long delay, TimeUnit unit) {
        Tickd.TimerSpec.Builder spec = Tickd.TimerSpec.newBuilder()
                .setDelay(duration(Math.max(0, unit.toNanos(delay))));
        return register(task, spec);
    }

    /**
     * Registers a lease: a timer that fires {@code ttl} after its last heartbeat, running
     * {@code onExpired} (say, to reassign a worker's jobs). Heartbeat it with {@link #keepAlive}.
     */
    public Timeout newLease(TimerTask onExpired, long ttl, TimeUnit unit) {
        Tickd.TimerSpec.Builder spec = Tickd.TimerSpec.newBuilder()
                .setTtl(duration(unit.toNanos(ttl)));
        return register(onExpired, spec);
    }

    /**
     * Handles expirations of this namespace that belong to no task of this timer, e.g. timers
     * registered with a payload by another service or before a restart. Acknowledged after the
     * handler returns.
     */
    public void onExpiration(Consumer<Tickd.Expiration> handler) {
        this.fallback = handler;
    }

    private Timeout register(TimerTask task, Tickd.TimerSpec.Builder spec) {
        if (stopped) {
            throw new IllegalStateException("cannot be started once stopped");
        }
        String key = "rt-" + UUID.randomUUID();
        RemoteTimeout timeout = new RemoteTimeout(task, key);
        // In the map before the call: a short timer may fire before its answer arrives.
        byKey.put(key, timeout);
        try {
            Tickd.NewTimeoutResponse answer = unary().newTimeout(Tickd.NewTimeoutRequest.newBuilder()
                    .setTimer(spec.setNamespace(namespace).setKey(key))
                    .build());
            timeout.id = answer.getTimer().getId();
            return timeout;
        } catch (StatusRuntimeException error) {
            byKey.remove(key);
            throw new RejectedExecutionException("tickd refused the timer: " + error.getStatus(), error);
        }
    }

    /**
     * Heartbeats {@code lease} every third of {@code ttl} over a KeepAlive stream, each
     * heartbeat pushing its deadline to now + ttl, until the returned handle is closed.
     */
    public Heartbeat keepAlive(Timeout lease, long ttl, TimeUnit unit) {
        return new Heartbeat((RemoteTimeout) lease, unit.toNanos(ttl));
    }

    /** Stops delivery and heartbeats; returns the timeouts that had not expired (Netty's stop()). */
    public Set<Timeout> stop() {
        stopped = true;
        ClientCallStreamObserver<Tickd.SubscribeRequest> call = subscription.get();
        if (call != null) {
            call.cancel("RemoteTimer stopped", null);
        }
        heartbeats.shutdownNow();
        tasks.shutdown();
        Set<Timeout> unexpired = new HashSet<>();
        for (RemoteTimeout timeout : byKey.values()) {
            if (!timeout.isExpired() && !timeout.isCancelled()) {
                unexpired.add(timeout);
            }
        }
        if (ownedChannel != null) {
            ownedChannel.shutdown();
        }
        return unexpired;
    }

    @Override
    public void close() {
        stop();
    }

    private TimersGrpc.TimersBlockingStub unary() {
        return blocking.withDeadlineAfter(rpcTimeoutMillis, TimeUnit.MILLISECONDS);
    }

    private static com.google.protobuf.Duration duration(long nanos) {
        return com.google.protobuf.Duration.newBuilder()
                .setSeconds(nanos / 1_000_000_000L)
                .setNanos((int) (nanos % 1_000_000_000L))
                .build();
    }

    private void subscribe() {
        Tickd.SubscribeRequest request = Tickd.SubscribeRequest.newBuilder()
                .setNamespace(namespace)
                .setMode(Tickd.SubscribeRequest.Mode.MODE_SHARED)
                .build();
        async.subscribe(request, new ClientResponseObserver<Tickd.SubscribeRequest, Tickd.SubscribeResponse>() {
            @Override
            public void beforeStart(ClientCallStreamObserver<Tickd.SubscribeRequest> call) {
                subscription.set(call);
            }

            @Override
            public void onNext(Tickd.SubscribeResponse response) {
                Tickd.Expiration expiration = response.getExpiration();
                tasks.execute(() -> deliver(expiration));
            }

            @Override
            public void onError(Throwable error) {
                if (!stopped) {
                    // A production client would resubscribe with back-off here; expirations
                    // wait in tickd's buffer meanwhile.
                    LOG.log(Level.WARNING, "tickd subscription failed: " + Status.fromThrowable(error));
                }
            }

            @Override
            public void onCompleted() {
                if (!stopped) {
                    LOG.warning("tickd closed the subscription");
                }
            }
        });
    }

    /** On the task thread: runs the expiration's task (or the fallback), then acknowledges. */
    private void deliver(Tickd.Expiration expiration) {
        String key = expiration.getTimer().getKey();
        RemoteTimeout timeout = key.isEmpty() ? null : byKey.get(key);
        try {
            if (timeout != null) {
                byKey.remove(key);
                if (timeout.state.compareAndSet(RemoteTimeout.PENDING, RemoteTimeout.EXPIRED)) {
                    timeout.task.run(timeout);
                }
            } else if (fallback != null) {
                fallback.accept(expiration);
            } else {
                LOG.warning("no task for expiration of timer " + expiration.getTimer().getId() + "; dropped");
            }
        } catch (Throwable error) {
            // As Netty does: a failing task is logged, and the timer goes on.
            LOG.log(Level.WARNING, "timer task failed", error);
        }
        try {
            unary().ack(Tickd.AckRequest.newBuilder()
                    .setNamespace(namespace)
                    .addDeliveryIds(expiration.getDeliveryId())
                    .build());
        } catch (StatusRuntimeException error) {
            LOG.log(Level.WARNING, "ack failed (the expiration will be delivered again): " + error.getStatus());
        }
    }

    private final class RemoteTimeout implements Timeout {
        static final int PENDING = 0;
        static final int EXPIRED = 1;
        static final int CANCELLED = 2;

        final TimerTask task;
        final String key;
        final AtomicInteger state = new AtomicInteger(PENDING);
        volatile String id = "";

        RemoteTimeout(TimerTask task, String key) {
            this.task = task;
            this.key = key;
        }

        @Override
        public RemoteTimer timer() {
            return RemoteTimer.this;
        }

        @Override
        public TimerTask task() {
            return task;
        }

        @Override
        public boolean isExpired() {
            return state.get() == EXPIRED;
        }

        @Override
        public boolean isCancelled() {
            return state.get() == CANCELLED;
        }

        @Override
        public String id() {
            return id;
        }

        @Override
        public boolean cancel() {
            if (!state.compareAndSet(PENDING, CANCELLED)) {
                return false;
            }
            try {
                boolean wasPending = unary().cancel(Tickd.CancelRequest.newBuilder()
                        .setTimer(Tickd.TimerRef.newBuilder().setNamespace(namespace).setKey(key))
                        .build()).getCancelled();
                if (wasPending) {
                    byKey.remove(key); // tickd will never deliver it
                }
                // Otherwise its expiration is on its way: deliver() drops it, as cancelled.
            } catch (StatusRuntimeException error) {
                LOG.log(Level.WARNING, "cancel on tickd failed; the task will not run: " + error.getStatus());
            }
            return true;
        }

        @Override
        public String toString() {
            return "RemoteTimeout(id=" + id + ", key=" + key + ", state=" + state.get() + ")";
        }
    }

    /** Heartbeats one lease over a KeepAlive stream until closed. */
    public final class Heartbeat implements AutoCloseable {
        private final RemoteTimeout lease;
        private final StreamObserver<Tickd.KeepAliveRequest> requests;
        private final java.util.concurrent.ScheduledFuture<?> schedule;
        private final AtomicLong sequence = new AtomicLong();
        private final List<Tickd.KeepAliveResponse> answers = new ArrayList<>();
        private volatile Throwable failure;

        private Heartbeat(RemoteTimeout lease, long ttlNanos) {
            this.lease = lease;
            this.requests = async.keepAlive(new StreamObserver<Tickd.KeepAliveResponse>() {
                @Override
                public void onNext(Tickd.KeepAliveResponse answer) {
                    synchronized (answers) {
                        if (answer.hasError()) {
                            failure = new IllegalStateException("heartbeat refused: "
                                    + Status.fromCodeValue(answer.getError().getCode()).getCode()
                                    + ": " + answer.getError().getMessage());
                        } else {
                            answers.add(answer);
                        }
                        answers.notifyAll();
                    }
                }

                @Override
                public void onError(Throwable error) {
                    synchronized (answers) {
                        if (Status.fromThrowable(error).getCode() != Status.Code.CANCELLED) {
                            failure = error;
                        }
                        answers.notifyAll();
                    }
                }

                @Override
                public void onCompleted() {}
            });
            long interval = Math.max(1_000_000L, ttlNanos / 3);
            this.schedule = heartbeats.scheduleAtFixedRate(this::beat, 0, interval, TimeUnit.NANOSECONDS);
        }

        private void beat() {
            Tickd.KeepAliveRequest heartbeat = Tickd.KeepAliveRequest.newBuilder()
                    .setTimer(Tickd.TimerRef.newBuilder().setNamespace(namespace).setKey(lease.key))
                    .setSequence(sequence.incrementAndGet())
                    .build();
            synchronized (requests) {
                requests.onNext(heartbeat);
            }
        }

        /** Blocks until {@code count} heartbeats were answered; throws if one was refused. */
        public List<Tickd.KeepAliveResponse> awaitAnswers(int count, long timeout, TimeUnit unit)
                throws InterruptedException {
            long end = System.nanoTime() + unit.toNanos(timeout);
            synchronized (answers) {
                while (answers.size() < count) {
                    if (failure != null) {
                        throw new IllegalStateException("keepalive failed", failure);
                    }
                    long left = end - System.nanoTime();
                    if (left <= 0) {
                        throw new IllegalStateException("no " + count + " heartbeat answers in time");
                    }
                    TimeUnit.NANOSECONDS.timedWait(answers, left);
                }
                return new ArrayList<>(answers.subList(0, count));
            }
        }

        /** Stops heartbeating: the lease then expires one ttl after its last heartbeat. */
        @Override
        public void close() {
            schedule.cancel(false);
            CountDownLatch flushed = new CountDownLatch(1);
            // On the heartbeat thread, so no beat() runs concurrently with completing the stream.
            heartbeats.execute(() -> {
                synchronized (requests) {
                    requests.onCompleted();
                }
                flushed.countDown();
            });
            try {
                flushed.await(rpcTimeoutMillis, TimeUnit.MILLISECONDS);
            } catch (InterruptedException interrupted) {
                Thread.currentThread().interrupt();
            }
        }
    }
}
