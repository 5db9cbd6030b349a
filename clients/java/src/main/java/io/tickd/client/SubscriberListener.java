package io.tickd.client;

import java.time.Duration;

/**
 * What a {@link Subscriber} tells its owner besides the deliveries themselves; every method
 * has a do-nothing default. Called on the subscriber's threads: keep it short.
 */
public interface SubscriberListener {
    /** The automatic ack after the handler was answered; false if tickd no longer awaited it. */
    default void onAcknowledged(Delivery delivery, boolean acknowledged) {
    }

    /** The handler threw: the delivery stays unacknowledged and will come again. */
    default void onHandlerFailed(Delivery delivery, Throwable error) {
    }

    /** The automatic ack failed even after retries: the delivery will come again. */
    default void onAckFailed(Delivery delivery, TickdException error) {
    }

    /** The stream broke (or could not be opened); the subscriber reconnects after {@code reconnectIn}. */
    default void onDisconnected(TickdException error, Duration reconnectIn) {
    }

    /**
     * tickd refused the subscription with a code no reconnect can cure (UNAUTHENTICATED,
     * PERMISSION_DENIED, INVALID_ARGUMENT, UNIMPLEMENTED): the subscriber has ended (its
     * {@code ended()} future fails with the same error); call {@code stop()} to free its threads.
     */
    default void onFailed(TickdException error) {
    }
}
