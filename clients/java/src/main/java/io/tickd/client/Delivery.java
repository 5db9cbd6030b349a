package io.tickd.client;

import com.google.protobuf.ByteString;
import io.tickd.v1.AckResponse;
import io.tickd.v1.Expiration;
import io.tickd.v1.Timer;
import java.util.Collections;

/** One delivered expiration, with what is needed to acknowledge it. */
public final class Delivery {
    private final TickdClient client;
    private final String namespace;
    private final Expiration expiration;

    Delivery(TickdClient client, String namespace, Expiration expiration) {
        this.client = client;
        this.namespace = namespace;
        this.expiration = expiration;
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
     * Acknowledges this delivery (retried on UNAVAILABLE). True if tickd was awaiting it;
     * false if it was not (already acknowledged, or timed out and due for redelivery).
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
