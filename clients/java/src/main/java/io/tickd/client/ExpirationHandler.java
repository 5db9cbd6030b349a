package io.tickd.client;

/**
 * User code run for each delivered expiration. Delivery is at least once: the same
 * expiration can come again (its ack was lost, it timed out, the subscriber reconnected),
 * with a higher {@link Delivery#attempt()}, so a handler must be idempotent.
 */
@FunctionalInterface
public interface ExpirationHandler {
    /**
     * Handles one delivery. Returning normally acknowledges it (unless the subscriber leaves
     * acks to the caller); throwing leaves it unacknowledged, so tickd delivers it again
     * after the ack timeout, until its attempt limit makes it dead.
     */
    void handle(Delivery delivery) throws Exception;
}
