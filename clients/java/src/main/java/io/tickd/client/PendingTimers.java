package io.tickd.client;

import io.tickd.v1.Timer;

/**
 * A namespace's pending timers as a lazy {@link Iterable}: nothing is fetched until iterated,
 * and each iterator lists afresh, one Pending page at a time.
 */
public final class PendingTimers implements Iterable<Timer> {
    private final TickdClient client;
    private final String namespace;
    private final int pageSize;

    PendingTimers(TickdClient client, String namespace, int pageSize) {
        this.client = client;
        this.namespace = namespace;
        this.pageSize = pageSize;
    }

    @Override
    public PendingIterator iterator() {
        return new PendingIterator(client, namespace, pageSize);
    }
}
