package io.tickd.client;

import io.tickd.v1.TimerRef;
import java.time.Duration;
import java.time.Instant;

/**
 * What a {@link LeaseKeeper} tells its owner. Only {@link #onLost} must be handled; the rest
 * default to doing nothing. Called on the keeper's thread: keep it short.
 */
@FunctionalInterface
public interface LeaseListener {
    /**
     * A heartbeat was answered NOT_FOUND: the lease expired (its heartbeats did not arrive in
     * time, e.g. while tickd was unreachable) or tickd does not know it after a reconnect. The
     * keeper has stopped heartbeating it and does NOT register it again: whoever supervises
     * the lease has received (or will receive) its expiration.
     */
    void onLost(TimerRef lease, TickdException reason);

    /** A heartbeat was answered: the lease's deadline is now {@code deadline}. */
    default void onRenewed(TimerRef lease, Instant deadline) {
    }

    /** A heartbeat was refused with another code (e.g. PERMISSION_DENIED); the keeper keeps trying. */
    default void onHeartbeatFailed(TimerRef lease, TickdException error) {
    }

    /** The KeepAlive stream broke; the keeper reconnects after {@code reconnectIn}. */
    default void onDisconnected(TickdException error, Duration reconnectIn) {
    }

    /**
     * tickd refused the KeepAlive stream with a code no reconnect can cure (UNAUTHENTICATED,
     * PERMISSION_DENIED, INVALID_ARGUMENT, UNIMPLEMENTED): the keeper has ended and keeps no
     * lease any more (its {@code ended()} future fails with the same error).
     */
    default void onFailed(TickdException error) {
    }
}
