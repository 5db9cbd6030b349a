package io.tickd.client.netty;

import io.tickd.client.LeaseKeeper;
import io.tickd.v1.TimerRef;

/** Keeps one lease of a {@link RemoteTimer} alive until closed. */
public final class Heartbeat implements AutoCloseable {
    private final LeaseKeeper keeper;
    private final TimerRef lease;

    Heartbeat(LeaseKeeper keeper, TimerRef lease) {
        this.keeper = keeper;
        this.lease = lease;
    }

    /** True while the lease is heartbeated (false once closed, or once tickd reported it lost). */
    public boolean isActive() {
        try {
            return keeper.leases().contains(lease);
        } catch (IllegalStateException keeperClosed) {
            return false;
        }
    }

    /** Stops heartbeating: the lease then expires one ttl after its last heartbeat. */
    @Override
    public void close() {
        keeper.remove(lease);
    }
}
