package io.tickd.client;

import io.grpc.Status;
import io.grpc.stub.StreamObserver;
import io.tickd.v1.KeepAliveRequest;
import io.tickd.v1.KeepAliveResponse;
import io.tickd.v1.TimerRef;
import java.time.Duration;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.concurrent.Callable;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;

/**
 * Keeps a set of leases (timers with a ttl) alive over ONE KeepAlive stream, heartbeating
 * each about every third of its ttl. Leases can be added and removed while it runs.
 *
 * <p>When the stream breaks, the keeper reconnects with exponential back-off and jitter and,
 * once reconnected, heartbeats every lease at once. A heartbeat answered NOT_FOUND means the
 * lease is gone (it expired while heartbeats could not reach tickd, or tickd does not know it
 * after a restart): the keeper reports it to {@link LeaseListener#onLost} and stops
 * heartbeating it. It never re-creates a lost lease: its expiration has fired, and whoever
 * supervises it may already have acted on it.
 *
 * <p>A lease kept by key is pinned to the timer id tickd answers its first heartbeat with: if a
 * later answer names another id, the original lease is gone (it expired and someone registered
 * the key anew) and the keeper reports it lost instead of keeping the newcomer alive.
 *
 * <p>A stream refused with a code no reconnect can cure (UNAUTHENTICATED, PERMISSION_DENIED,
 * INVALID_ARGUMENT, UNIMPLEMENTED) ends the keeper: {@link LeaseListener#onFailed} is told,
 * {@link #ended()} fails with that error, and no lease is heartbeated any more.
 *
 * <p>All state lives on one thread (the keeper's scheduler); stream callbacks and the public
 * methods hand their work to it, so heartbeats are sent in order on the stream.
 */
public final class LeaseKeeper implements AutoCloseable {
    private final TickdClient client;
    private final LeaseListener listener;
    private final ScheduledExecutorService keeperThread;
    private final Map<TimerRef, Lease> leases = new HashMap<>();
    private final Map<Long, Lease> awaitingAnswer = new HashMap<>();
    private final Backoff reconnectBackoff;
    private final CompletableFuture<Void> ended = new CompletableFuture<>();
    private StreamObserver<KeepAliveRequest> stream;
    private long streamGeneration;
    private long lastSequence;
    private boolean closed;

    LeaseKeeper(TickdClient client, LeaseListener listener) {
        this.client = client;
        this.listener = Objects.requireNonNull(listener);
        this.reconnectBackoff = client.reconnectPolicy().newBackoff();
        this.keeperThread = Executors.newSingleThreadScheduledExecutor(runnable -> {
            Thread thread = new Thread(runnable, "tickd-lease-keeper");
            thread.setDaemon(true);
            return thread;
        });
        keeperThread.execute(this::connect);
    }

    /** One kept lease and its heartbeat schedule. */
    private static final class Lease {
        final TimerRef ref;
        final Duration ttl;
        ScheduledFuture<?> heartbeats;
        /** The timer id of the first answered heartbeat (a key may later name another timer). */
        String id;

        Lease(TimerRef ref, Duration ttl) {
            this.ref = ref;
            this.ttl = ttl;
        }
    }

    /**
     * Starts heartbeating {@code lease} now and every {@code ttl}/3; each heartbeat sets its
     * deadline to now + {@code ttl} (and its ttl to {@code ttl}). Adding a kept lease again
     * changes its ttl.
     */
    public void add(TimerRef lease, Duration ttl) {
        if (ttl.isNegative() || ttl.isZero()) {
            throw new IllegalArgumentException("ttl must be positive");
        }
        TimerRef ref = client.withDefaultNamespace(lease);
        onKeeperThread(() -> {
            removeNow(ref);
            Lease kept = new Lease(ref, ttl);
            leases.put(ref, kept);
            long periodNanos = Math.max(1, ttl.toNanos() / 3);
            kept.heartbeats = keeperThread.scheduleAtFixedRate(() -> heartbeat(kept), 0, periodNanos, TimeUnit.NANOSECONDS);
            return null;
        });
    }

    /** Stops heartbeating {@code lease} (it then expires one ttl after its last heartbeat). */
    public void remove(TimerRef lease) {
        TimerRef ref = client.withDefaultNamespace(lease);
        onKeeperThread(() -> {
            removeNow(ref);
            return null;
        });
    }

    /** The leases being kept now (lost and removed ones are not). */
    public Set<TimerRef> leases() {
        return onKeeperThread(() -> new HashSet<>(leases.keySet()));
    }

    private void removeNow(TimerRef ref) {
        Lease removed = leases.remove(ref);
        if (removed != null) {
            removed.heartbeats.cancel(false);
        }
    }

    private void connect() {
        if (closed) {
            return;
        }
        long generation = ++streamGeneration;
        stream = client.asyncStub().keepAlive(new StreamObserver<KeepAliveResponse>() {
            @Override
            public void onNext(KeepAliveResponse answer) {
                post(() -> onAnswer(generation, answer));
            }

            @Override
            public void onError(Throwable error) {
                post(() -> onBroken(generation, TickdException.fromThrowable(error)));
            }

            @Override
            public void onCompleted() {
                post(() -> onBroken(generation,
                        new TickdException(Status.Code.UNAVAILABLE, "tickd ended the KeepAlive stream", null)));
            }
        });
        // After a reconnect, find out at once which leases survived.
        for (Lease lease : leases.values()) {
            heartbeat(lease);
        }
    }

    private void heartbeat(Lease lease) {
        if (stream == null || closed) {
            return; // disconnected: connect() heartbeats every lease once the stream is back
        }
        long sequence = ++lastSequence;
        awaitingAnswer.put(sequence, lease);
        stream.onNext(KeepAliveRequest.newBuilder()
                .setTimer(lease.ref)
                .setTtl(ProtoTime.duration(lease.ttl))
                .setSequence(sequence)
                .build());
    }

    private void onAnswer(long generation, KeepAliveResponse answer) {
        if (generation != streamGeneration) {
            return;
        }
        reconnectBackoff.reset();
        Lease lease = awaitingAnswer.remove(answer.getSequence());
        if (lease == null || leases.get(lease.ref) != lease) {
            return; // removed (or re-added) meanwhile
        }
        if (!answer.hasError()) {
            if (lease.id == null) {
                lease.id = answer.getId();
            } else if (!lease.id.equals(answer.getId())) {
                // The key now names a new timer: ours expired and was registered anew. That
                // heartbeat already renewed the newcomer once; it is not ours to keep alive.
                removeNow(lease.ref);
                listener.onLost(lease.ref, new TickdException(Status.Code.NOT_FOUND,
                        "lease " + lease.id + " is gone: its key now names timer " + answer.getId(), null));
                return;
            }
            listener.onRenewed(lease.ref, ProtoTime.instant(answer.getDeadline()));
            return;
        }
        TickdException error = TickdException.fromItemError(answer.getError());
        if (error.code() == Status.Code.NOT_FOUND) {
            removeNow(lease.ref);
            listener.onLost(lease.ref, error);
        } else {
            listener.onHeartbeatFailed(lease.ref, error);
        }
    }

    private void onBroken(long generation, TickdException error) {
        if (generation != streamGeneration || closed) {
            return;
        }
        stream = null;
        awaitingAnswer.clear();
        if (StreamRefusals.cannotBeCuredByReconnecting(error)) {
            stopHeartbeating();
            keeperThread.shutdown();
            listener.onFailed(error);
            ended.completeExceptionally(error);
            return;
        }
        Duration wait = reconnectBackoff.next();
        listener.onDisconnected(error, wait);
        keeperThread.schedule(() -> {
            client.wakeChannel();
            connect();
        }, wait.toNanos(), TimeUnit.NANOSECONDS);
    }

    /** Stops heartbeating every lease and closes the stream. */
    @Override
    public void close() {
        try {
            onKeeperThread(() -> {
                stopHeartbeating();
                if (stream != null) {
                    stream.onCompleted();
                    stream = null;
                }
                return null;
            });
        } catch (IllegalStateException alreadyClosed) {
            // closed before, or ended by a refusal
        }
        keeperThread.shutdownNow();
        ended.complete(null);
    }

    /**
     * Completes when the keeper is closed; fails with the {@link TickdException} of a refusal
     * no reconnect can cure (see the class doc), after which no lease is kept.
     */
    public CompletableFuture<Void> ended() {
        return ended;
    }

    /** The back-off of this keeper's reconnects (for tests). */
    Backoff reconnectBackoff() {
        return reconnectBackoff;
    }

    private void stopHeartbeating() {
        closed = true;
        for (Lease lease : leases.values()) {
            lease.heartbeats.cancel(false);
        }
        leases.clear();
    }

    /** Hands a stream callback to the keeper's thread; dropped once the keeper is closed. */
    private void post(Runnable work) {
        try {
            keeperThread.execute(work);
        } catch (java.util.concurrent.RejectedExecutionException closed) {
            // closed: nothing left to keep
        }
    }

    private <T> T onKeeperThread(Callable<T> work) {
        try {
            return keeperThread.submit(work).get();
        } catch (ExecutionException failed) {
            throw new IllegalStateException(failed.getCause());
        } catch (java.util.concurrent.RejectedExecutionException shutDown) {
            throw new IllegalStateException("the lease keeper is closed", shutDown);
        } catch (InterruptedException interrupted) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted", interrupted);
        }
    }
}
