package io.tickd.client;

import com.google.protobuf.ByteString;
import io.tickd.v1.AckResponse;
import io.tickd.v1.Expiration;
import io.tickd.v1.Timer;
import java.util.Collections;
import java.util.function.BooleanSupplier;

/** One delivered expiration, with what is needed to acknowledge it. */
public final class Delivery {
    private final TickdClient client;
    private final String namespace;
    private final Expiration expiration;
    private final BooleanSupplier streamEnded;

    Delivery(TickdClient client, String namespace, Expiration expiration, BooleanSupplier streamEnded) {
        this.client = client;
        this.namespace = namespace;
        this.expiration = expiration;
        this.streamEnded = streamEnded;
    }

    public Expiration expiration() {
        return expiration;
    }

    public Timer timer() {
        return expiration.getTimer();
    }

    public ByteString payload() {
        return expiration.getTimer().getPayload();
    }

    /** 1 on the first delivery, then 2, 3, ... on redeliveries. */
    public int attempt() {
        return expiration.getAttempt();
    }

    public String deliveryId() {
        return expiration.getDeliveryId();
    }

    public String namespace() {
        return namespace;
    }

    /**
     * True once the Subscribe stream this delivery came on has ended (it broke, tickd
     * restarted, or the subscriber stopped). tickd takes back the unacknowledged deliveries of
     * a stream that ended and delivers them again with a higher attempt, so the subscriber
     * sends no automatic ack for this one when its handler returns (see
     * {@link SubscriberListener#onAckNotSent}).
     */
    public boolean streamEnded() {
        return streamEnded.getAsBoolean();
    }

    /**
     * Acknowledges this delivery (retried on UNAVAILABLE), whatever became of the stream it
     * came on. True if tickd was awaiting it; false if tickd answered its id as unknown, not
     * awaiting an ack (already acknowledged, its ack timeout passed, or its stream ended, a
     * tickd restart included: it is delivered again). {@link TickdClient#ack} acks many ids and
     * lists the unknown ones.
     */
    public boolean ack() {
        AckResponse answer = client.ack(namespace, Collections.singletonList(expiration.getDeliveryId()));
        return answer.getAcknowledged() == 1;
    }

    @Override
    public String toString() {
        return "Delivery(" + deliveryId() + ", timer " + timer().getId() + ", attempt " + attempt() + ")";
    }
}
