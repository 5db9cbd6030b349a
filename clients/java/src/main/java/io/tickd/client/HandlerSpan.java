package io.tickd.client;

import io.tickd.v1.TraceContext;
import java.util.Map;
import java.util.Optional;

/**
 * The CONSUMER span a handler runs in, as {@link TracingHook#startHandler} is to start it:
 * named {@code tickd.expiration <namespace>}; on attempt 1 a child of the registering call's
 * span ({@link #parent}), on later attempts a span of its own (its parent the thread's current
 * context, usually none) with a link to it ({@link #link}). The registering call's baggage
 * ({@link #baggage}) belongs in the handler's context on every attempt.
 */
public final class HandlerSpan {
    private final Delivery delivery;
    private final Optional<TraceContext> parent;
    private final Optional<TraceContext> link;

    private HandlerSpan(Delivery delivery, Optional<TraceContext> parent, Optional<TraceContext> link) {
        this.delivery = delivery;
        this.parent = parent;
        this.link = link;
    }

    static HandlerSpan of(Delivery delivery) {
        TraceContext carried = delivery.expiration().getTraceContext();
        boolean traced = !carried.getTraceparent().isEmpty();
        boolean first = delivery.attempt() <= 1;
        return new HandlerSpan(delivery, traced && first ? Optional.of(carried) : Optional.empty(),
                traced && !first ? Optional.of(carried) : Optional.empty());
    }

    /** {@code tickd.expiration <namespace>}. */
    public String name() {
        return "tickd.expiration " + delivery.namespace();
    }

    /** The delivery the handler is given. */
    public Delivery delivery() {
        return delivery;
    }

    /** The registering call's context, as the span's parent: on attempt 1, when it sent one. */
    public Optional<TraceContext> parent() {
        return parent;
    }

    /** The registering call's context, to link to: on later attempts, when it sent one. */
    public Optional<TraceContext> link() {
        return link;
    }

    /** The registering call's W3C baggage; empty when it sent none. */
    public String baggage() {
        return delivery.expiration().getTraceContext().getBaggage();
    }

    /** The span's attributes: namespace, timer id and key, attempt, delivery id. */
    public Map<String, Object> attributes() {
        return Map.of(
                "messaging.system", "tickd",
                "tickd.namespace", delivery.namespace(),
                "tickd.timer.id", delivery.timer().getId(),
                "tickd.timer.key", delivery.timer().getKey(),
                "tickd.attempt", (long) delivery.attempt(),
                "tickd.delivery.id", delivery.deliveryId());
    }
}
