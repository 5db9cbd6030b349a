package io.tickd.client.netty;

import java.util.concurrent.atomic.AtomicInteger;

/** A timeout's local state (pending, expired, cancelled), moved on once each, as in Netty. */
abstract class AbstractTimeout implements Timeout {
    private static final int PENDING = 0;
    private static final int EXPIRED = 1;
    private static final int CANCELLED = 2;

    private final TimerTask task;
    final String key;
    private final AtomicInteger state = new AtomicInteger(PENDING);
    volatile String id = "";

    AbstractTimeout(TimerTask task, String key) {
        this.task = task;
        this.key = key;
    }

    /** Tells tickd; the local state already says cancelled. */
    abstract void cancelOnTickd();

    /** Moves to expired; false if it was cancelled (or expired) before, so the task must not run. */
    boolean expire() {
        return state.compareAndSet(PENDING, EXPIRED);
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
        cancelOnTickd();
        return true;
    }

    @Override
    public String toString() {
        return getClass().getSimpleName() + "(id=" + id + ", key=" + key + ", state=" + state.get() + ")";
    }
}
