package io.tickd.client.netty;

/**
 * A handle to a registered timer: the same shape as Netty's {@code io.netty.util.Timeout}.
 */
public interface Timeout {
    /** The timer that created this handle. */
    RemoteTimer timer();

    /** The task run when the timer expires. */
    TimerTask task();

    /** True once the task has been handed its expiration. */
    boolean isExpired();

    /** True once {@link #cancel()} succeeded. */
    boolean isCancelled();

    /**
     * Cancels the timer, on tickd too. Returns false if the task has already run (or is running)
     * or was cancelled before, as Netty does.
     */
    boolean cancel();

    /** The id tickd gave the timer: pass it to {@code tickctl get}. */
    String id();
}
