package io.tickd.client;

import io.tickd.v1.PendingRequest;
import io.tickd.v1.PendingResponse;
import io.tickd.v1.Timer;
import java.util.ArrayDeque;
import java.util.Deque;
import java.util.Iterator;
import java.util.NoSuchElementException;

/**
 * Walks Pending's pages lazily: the next page is fetched only when the current one is used
 * up. A page may be empty and still carry a token (tickd looks at a bounded number of stored
 * timers per call), so empty pages are followed until a page has timers or the token ends.
 */
public final class PendingIterator implements Iterator<Timer> {
    private final TickdClient client;
    private final String namespace;
    private final int pageSize;
    private final Deque<Timer> page = new ArrayDeque<>();
    private String nextPageToken = "";
    private boolean lastPageFetched;
    private int pagesFetched;

    PendingIterator(TickdClient client, String namespace, int pageSize) {
        if (pageSize < 1) {
            throw new IllegalArgumentException("pageSize must be at least 1");
        }
        this.client = client;
        this.namespace = namespace;
        this.pageSize = pageSize;
    }

    @Override
    public boolean hasNext() {
        while (page.isEmpty() && !lastPageFetched) {
            PendingResponse response = client.pendingPage(PendingRequest.newBuilder()
                    .setNamespace(namespace).setPageSize(pageSize).setPageToken(nextPageToken).build());
            pagesFetched++;
            page.addAll(response.getTimersList());
            nextPageToken = response.getNextPageToken();
            lastPageFetched = nextPageToken.isEmpty();
        }
        return !page.isEmpty();
    }

    /** How many Pending calls this iteration has made so far. */
    public int pagesFetched() {
        return pagesFetched;
    }

    @Override
    public Timer next() {
        if (!hasNext()) {
            throw new NoSuchElementException();
        }
        return page.removeFirst();
    }
}
