package io.tickd.client;

import java.time.Duration;
import java.util.logging.Level;
import java.util.logging.Logger;

/**
 * What a {@link Subscriber} tells its owner besides the deliveries themselves; every method
 * has a do-nothing default. Called on the subscriber's threads: keep it short.
 */
public interface SubscriberListener {
    /**
     * The automatic ack after the handler was answered; false if tickd no longer awaited it
     * (answered its id as unknown). Also told {@code false} by the default
     * {@link #onAckNotSent}.
     */
    default void onAcknowledged(Delivery delivery, boolean acknowledged) {
    }

    /**
     * The handler returned after the stream its delivery came on had ended (the subscriber
     * reconnected meanwhile, e.g. across a tickd restart): no ack was sent, since tickd took
     * the delivery back when the stream ended; it comes again with a higher attempt. By
     * default this tells {@link #onAcknowledged} {@code false}.
     */
    default void onAckNotSent(Delivery delivery) {
        onAcknowledged(delivery, false);
    }

    /**
     * The handler threw: the delivery stays unacknowledged and will come again. By default
     * this logs a WARNING with the error on the {@code io.tickd.client.Subscriber} logger
     * (java.util.logging, which writes to stderr unless configured otherwise), so that a
     * failing handler is never silent; override it to report failures your own way.
     */
    default void onHandlerFailed(Delivery delivery, Throwable error) {
        Logger.getLogger(Subscriber.class.getName()).log(Level.WARNING,
                "the handler failed on " + delivery + "; it stays unacknowledged and comes again", error);
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
