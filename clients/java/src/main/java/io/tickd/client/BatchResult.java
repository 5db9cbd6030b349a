package io.tickd.client;

import io.tickd.v1.NewTimeoutResponse;

/**
 * One item of a batch registration's answer: registered, or refused alone (an invalid item
 * does not fail the others).
 */
public final class BatchResult {
    private final NewTimeoutResponse registered;
    private final TickdException error;

    BatchResult(NewTimeoutResponse registered, TickdException error) {
        this.registered = registered;
        this.error = error;
    }

    public boolean isRegistered() {
        return registered != null;
    }

    /** The registration (timer, created, replaced); throws this item's error if it failed. */
    public NewTimeoutResponse registered() {
        if (registered == null) {
            throw error;
        }
        return registered;
    }

    /** This item's error with its gRPC code and message, or null if it registered. */
    public TickdException error() {
        return error;
    }

    @Override
    public String toString() {
        return registered != null ? "registered(" + registered.getTimer().getId() + ")" : "error(" + error.getMessage() + ")";
    }
}
