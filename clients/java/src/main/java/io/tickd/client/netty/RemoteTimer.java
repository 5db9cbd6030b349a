package io.tickd.client.netty;

import io.tickd.client.Delivery;
import io.tickd.client.LeaseKeeper;
import io.tickd.client.LeaseListener;
import io.tickd.client.ProtoTime;
import io.tickd.client.Subscriber;
import io.tickd.client.TickdClient;
import io.tickd.client.TickdException;
import io.tickd.v1.Expiration;
import io.tickd.v1.TimerRef;
import io.tickd.v1.TimerSpec;
import java.time.Duration;
import java.util.Collections;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;
import java.util.logging.Level;
import java.util.logging.Logger;

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
 * keeps only the tasks. Each timer gets a fresh client key (so registering it is retried
 * safely); expirations come back through a {@link Subscriber} of the namespace, the task with
 * that key runs on its one handler thread (as in Netty, tasks should be short), and the
 * expiration is then acknowledged, so a task that never ran is delivered again.
 *
 * <p>Tasks are Java objects and cannot survive this JVM. Give each process its own namespace
 * for {@code newTimeout}; for work that must outlive the process, register timers with a
 * payload (from any language) and handle them with {@link #onExpiration}.
 */
public final class RemoteTimer implements AutoCloseable {
    private static final Logger LOG = Logger.getLogger(RemoteTimer.class.getName());

    private final TickdClient client;
    private final boolean ownsClient;
    private final String namespace;
    private final Map<String, RemoteTimeout> byKey = new ConcurrentHashMap<>();
    /**
     * Keys whose task ran (or was cancelled) here lately: a redelivery of one of them (its ack
     * was lost) is acknowledged, not mistaken for an expiration nobody can handle.
     */
    private final Set<String> recentlyFinishedKeys = Collections.newSetFromMap(
            Collections.synchronizedMap(new LinkedHashMap<String, Boolean>() {
                @Override
                protected boolean removeEldestEntry(Map.Entry<String, Boolean> eldest) {
                    return size() > 10_000;
                }
            }));
    private final Subscriber subscriber;
    private LeaseKeeper leaseKeeper;
    private volatile Consumer<Expiration> fallback;
    private volatile boolean stopped;

    /** Connects to tickd at {@code host:port} (plaintext) and subscribes to {@code namespace}. */
    public static RemoteTimer connect(String target, String namespace) {
        return new RemoteTimer(TickdClient.builder().target(target).namespace(namespace).build(), namespace, true);
    }

    /** Uses a client the caller configured (TLS, token, retries) and owns; subscribes to {@code namespace}. */
    public RemoteTimer(TickdClient client, String namespace) {
        this(client, namespace, false);
    }

    private RemoteTimer(TickdClient client, String namespace, boolean ownsClient) {
        this.client = client;
        this.ownsClient = ownsClient;
        this.namespace = namespace;
        this.subscriber = client.subscriber(this::deliver).namespace(namespace).maxInFlight(1).start();
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
        return register(task, TimerSpec.newBuilder()
                .setDelay(ProtoTime.duration(Duration.ofNanos(Math.max(0, unit.toNanos(delay))))));
    }

    /**
     * Registers a lease: a timer that fires {@code ttl} after its last heartbeat, running
     * {@code onExpired} (say, to reassign a worker's jobs). Heartbeat it with {@link #keepAlive}.
     */
    public Timeout newLease(TimerTask onExpired, long ttl, TimeUnit unit) {
        return register(onExpired, TimerSpec.newBuilder().setTtl(ProtoTime.duration(Duration.ofNanos(unit.toNanos(ttl)))));
    }

    /**
     * Handles expirations of this namespace that belong to no task of this timer, e.g. timers
     * registered with a payload by another service or before a restart. Acknowledged after the
     * handler returns. Without such a handler they are left unacknowledged (see deliver).
     */
    public void onExpiration(Consumer<Expiration> handler) {
        this.fallback = handler;
    }

    private Timeout register(TimerTask task, TimerSpec.Builder spec) {
        if (stopped) {
            throw new IllegalStateException("cannot be started once stopped");
        }
        String key = "rt-" + UUID.randomUUID();
        RemoteTimeout timeout = new RemoteTimeout(task, key);
        // In the map before the call: a short timer may fire before its answer arrives.
        byKey.put(key, timeout);
        try {
            timeout.id = client.register(spec.setNamespace(namespace).setKey(key).build()).getTimer().getId();
            return timeout;
        } catch (TickdException error) {
            byKey.remove(key);
            throw new RejectedExecutionException("tickd refused the timer: " + error.getMessage(), error);
        }
    }

    /**
     * Heartbeats {@code lease} every third of {@code ttl} (over the one KeepAlive stream this
     * timer shares among its leases), each heartbeat pushing its deadline to now + ttl, until
     * the returned handle is closed.
     */
    public synchronized Heartbeat keepAlive(Timeout lease, long ttl, TimeUnit unit) {
        if (leaseKeeper == null) {
            leaseKeeper = client.leaseKeeper(new LeaseListener() {
                @Override
                public void onLost(TimerRef lost, TickdException reason) {
                    // Its expiration reaches deliver(), which runs the lease's task.
                    LOG.warning("lease " + lost + " lost: " + reason.getMessage());
                }
            });
        }
        TimerRef ref = TimerRef.newBuilder().setNamespace(namespace).setKey(((RemoteTimeout) lease).key).build();
        leaseKeeper.add(ref, Duration.ofNanos(unit.toNanos(ttl)));
        return new Heartbeat(leaseKeeper, ref);
    }

    /** Stops delivery and heartbeats; returns the timeouts that had not expired (Netty's stop()). */
    public Set<Timeout> stop() {
        stopped = true;
        subscriber.stop();
        synchronized (this) {
            if (leaseKeeper != null) {
                leaseKeeper.close();
            }
        }
        Set<Timeout> unexpired = new HashSet<>();
        for (RemoteTimeout timeout : byKey.values()) {
            if (!timeout.isExpired() && !timeout.isCancelled()) {
                unexpired.add(timeout);
            }
        }
        if (ownsClient) {
            client.close();
        }
        return unexpired;
    }

    @Override
    public void close() {
        stop();
    }

    /**
     * On the subscriber's handler thread: runs the expiration's task (or the fallback); the
     * subscriber acks once this returns. An expiration with neither a task of this JVM nor a
     * fallback handler is NOT acknowledged (this throws): tickd delivers it again, and after
     * its attempt limit keeps it dead, where an operator can list and redrive it, instead of
     * it being lost for good.
     */
    private void deliver(Delivery delivery) {
        Expiration expiration = delivery.expiration();
        String key = expiration.getTimer().getKey();
        RemoteTimeout timeout = key.isEmpty() ? null : byKey.get(key);
        if (timeout == null && fallback == null && !recentlyFinishedKeys.contains(key)) {
            String why = "no task in this JVM and no onExpiration handler for expiration of timer "
                    + expiration.getTimer().getId() + " (key '" + key + "', attempt " + delivery.attempt()
                    + "); left unacknowledged: tickd delivers it again, then keeps it dead for an operator to redrive";
            LOG.warning(why);
            throw new IllegalStateException(why);
        }
        try {
            if (timeout != null) {
                byKey.remove(key);
                recentlyFinishedKeys.add(key);
                if (timeout.expire()) {
                    timeout.task().run(timeout);
                }
            } else if (fallback != null && !recentlyFinishedKeys.contains(key)) {
                fallback.accept(expiration);
            }
            // else: a redelivery of a key whose task already ran here (its ack was lost).
        } catch (Throwable error) {
            // As Netty does: a failing task is logged, and the timer goes on.
            LOG.log(Level.WARNING, "timer task failed", error);
        }
    }

    /** Cancels on tickd; false if tickd had already fired it (its expiration is then dropped). */
    boolean cancelRemotely(RemoteTimeout timeout) {
        try {
            boolean wasPending = client.cancel(TimerRef.newBuilder().setNamespace(namespace).setKey(timeout.key).build());
            if (wasPending) {
                byKey.remove(timeout.key); // tickd will never deliver it
                recentlyFinishedKeys.add(timeout.key);
            }
            return wasPending;
        } catch (TickdException error) {
            // NOT_FOUND: fired already, its expiration is on its way and deliver() drops it.
            LOG.log(Level.FINE, "cancel on tickd: " + error.getMessage());
            return false;
        }
    }

    private final class RemoteTimeout extends AbstractTimeout {
        RemoteTimeout(TimerTask task, String key) {
            super(task, key);
        }

        @Override
        public RemoteTimer timer() {
            return RemoteTimer.this;
        }

        @Override
        void cancelOnTickd() {
            cancelRemotely(this);
        }
    }
}
