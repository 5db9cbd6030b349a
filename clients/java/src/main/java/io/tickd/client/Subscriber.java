package io.tickd.client;

import io.grpc.Status;
import io.grpc.stub.ClientCallStreamObserver;
import io.grpc.stub.ClientResponseObserver;
import io.tickd.v1.SubscribeRequest;
import io.tickd.v1.SubscribeResponse;
import java.time.Duration;
import java.util.Objects;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.logging.Level;
import java.util.logging.Logger;

/**
 * A subscriber of one namespace (sharing by default; see {@link Builder#observer} and
 * {@link Builder#autoAck} for the other modes): takes its expirations over a Subscribe stream, runs
 * the handler for each on a pool of at most {@code maxInFlight} threads, and acknowledges each
 * once its handler returned (or leaves that to the handler, with {@code manualAck}).
 *
 * <p>When the stream breaks (tickd restarting, network) it reconnects with exponential
 * back-off and jitter, forever, until stopped. Expirations that fire meanwhile wait in tickd;
 * deliveries that were in flight and not acknowledged when the stream ended come again (tickd
 * takes them back as it sees the stream end, or at its next start), with a higher attempt.
 * Delivery is therefore at least once: handlers must be idempotent. A handler that returns
 * after the stream its delivery came on has ended gets no ack: it would mean nothing, so it
 * is not sent, and {@link SubscriberListener#onAckNotSent} is told.
 *
 * <p>The back-off starts again from its first step each time tickd accepts a subscription
 * (answers with response headers). A refusal no reconnect can cure (UNAUTHENTICATED,
 * PERMISSION_DENIED, INVALID_ARGUMENT, UNIMPLEMENTED) ends the subscriber instead:
 * {@link SubscriberListener#onFailed} is told and {@link #ended()} fails with that error.
 *
 * <p>The stream asks tickd for one message per free handler slot (gRPC flow control), so
 * deliveries do not pile up in this process while the handlers are busy.
 */
public final class Subscriber implements AutoCloseable {
    private static final Logger LOG = Logger.getLogger(Subscriber.class.getName());

    private final TickdClient client;
    private final ExpirationHandler handler;
    private final SubscriberListener listener;
    private final SubscribeRequest request;
    private final int maxInFlight;
    private final boolean manualAck;
    /** tickd awaits an ack per delivery (not an observer, not auto-ack): it takes back those of a stream that ended. */
    private final boolean deliveriesAwaitAcks;
    private final RetryPolicy reconnectPolicy;
    private final ExecutorService handlerPool;
    private final Thread supervisor;
    private final CountDownLatch stopRequested = new CountDownLatch(1);
    private final Object streamLock = new Object();
    private ClientCallStreamObserver<SubscribeRequest> currentStream;
    private volatile boolean stopping;
    private final CompletableFuture<Void> ended = new CompletableFuture<>();

    private Subscriber(Builder builder) {
        this.client = builder.client;
        this.handler = builder.handler;
        this.listener = builder.listener;
        this.maxInFlight = builder.maxInFlight;
        // Observers and auto-ack subscribers have nothing to acknowledge.
        this.manualAck = builder.manualAck || builder.observer || builder.autoAck;
        this.deliveriesAwaitAcks = !builder.observer && !builder.autoAck;
        this.reconnectPolicy = builder.reconnectPolicy != null ? builder.reconnectPolicy : client.reconnectPolicy();
        SubscribeRequest.Builder request = SubscribeRequest.newBuilder()
                .setNamespace(builder.namespace)
                .setMode(builder.observer ? SubscribeRequest.Mode.MODE_OBSERVER : SubscribeRequest.Mode.MODE_SHARED)
                .setAutoAck(builder.autoAck)
                .setMaxUnacked(builder.maxUnacked);
        if (builder.ackTimeout != null) {
            request.setAckTimeout(ProtoTime.duration(builder.ackTimeout));
        }
        this.request = request.build();
        AtomicInteger threadNumber = new AtomicInteger();
        this.handlerPool = Executors.newFixedThreadPool(maxInFlight, runnable -> daemon(runnable,
                "tickd-subscriber-" + builder.namespace + "-handler-" + threadNumber.incrementAndGet()));
        this.supervisor = daemon(this::superviseStreams, "tickd-subscriber-" + builder.namespace);
    }

    private static Thread daemon(Runnable runnable, String name) {
        Thread thread = new Thread(runnable, name);
        thread.setDaemon(true);
        return thread;
    }

    public String namespace() {
        return request.getNamespace();
    }

    /** Opens a stream, waits for it to end, backs off, opens the next, until stopped. */
    private void superviseStreams() {
        Backoff backoff = reconnectPolicy.newBackoff();
        while (!stopping) {
            TickdException why = runOneStream(backoff);
            if (stopping) {
                return;
            }
            if (StreamRefusals.cannotBeCuredByReconnecting(why)) {
                LOG.log(Level.WARNING, "subscription to " + namespace() + " refused, not reconnecting: " + why.getMessage());
                listener.onFailed(why);
                ended.completeExceptionally(why);
                return;
            }
            Duration wait = backoff.next();
            listener.onDisconnected(why, wait);
            try {
                if (stopRequested.await(wait.toNanos(), TimeUnit.NANOSECONDS)) {
                    return;
                }
            } catch (InterruptedException interrupted) {
                return;
            }
            client.wakeChannel();
        }
    }

    /** Runs one Subscribe stream to its end; returns why it ended. */
    private TickdException runOneStream(Backoff backoff) {
        CountDownLatch ended = new CountDownLatch(1);
        // Set once this stream has ended: its deliveries' handlers that return later send no ack.
        AtomicBoolean streamEnded = new AtomicBoolean();
        TickdException[] why = new TickdException[1];
        client.asyncStub().withInterceptors(new AcceptedStreamInterceptor(backoff::reset))
                .subscribe(request, new ClientResponseObserver<SubscribeRequest, SubscribeResponse>() {
            private ClientCallStreamObserver<SubscribeRequest> stream;

            @Override
            public void beforeStart(ClientCallStreamObserver<SubscribeRequest> stream) {
                this.stream = stream;
                stream.disableAutoRequestWithInitial(maxInFlight);
                synchronized (streamLock) {
                    currentStream = stream;
                    if (stopping) {
                        stream.cancel("subscriber stopped", null);
                    }
                }
            }

            @Override
            public void onNext(SubscribeResponse response) {
                Delivery delivery = new Delivery(client, request.getNamespace(), response.getExpiration(), streamEnded::get);
                try {
                    handlerPool.execute(() -> {
                        if (stopping) {
                            return; // not started: tickd delivers it again once the stream closes
                        }
                        if (deliveriesAwaitAcks && delivery.streamEnded()) {
                            return; // its stream ended while it waited: tickd took it back and delivers it again
                        }
                        try {
                            runHandler(delivery);
                        } finally {
                            if (!stopping) {
                                stream.request(1);
                            }
                        }
                    });
                } catch (RejectedExecutionException stopped) {
                    // Stopping: left unacknowledged, tickd delivers it again after its ack timeout.
                }
            }

            @Override
            public void onError(Throwable error) {
                why[0] = TickdException.fromThrowable(error);
                streamEnded.set(true);
                ended.countDown();
            }

            @Override
            public void onCompleted() {
                why[0] = new TickdException(Status.Code.UNAVAILABLE, "tickd ended the subscription", null);
                streamEnded.set(true);
                ended.countDown();
            }
        });
        try {
            ended.await();
        } catch (InterruptedException interrupted) {
            Thread.currentThread().interrupt();
        }
        return why[0];
    }

    private void runHandler(Delivery delivery) {
        try (TracingHook.HandlerScope span = client.tracing().startHandler(HandlerSpan.of(delivery))) {
            try {
                handler.handle(delivery);
            } catch (Throwable error) {
                span.failed(error);
                throw error;
            }
        } catch (Throwable error) {
            LOG.log(Level.FINE, "handler failed for " + delivery, error);
            listener.onHandlerFailed(delivery, error);
            return;
        }
        if (manualAck) {
            return;
        }
        if (delivery.streamEnded()) {
            // tickd took the delivery back when its stream ended (after a restart its id names
            // nothing; an older tickd, numbering deliveries from 1 at each start, would take it
            // for another): an ack now would mean nothing, so none is sent.
            LOG.log(Level.WARNING, delivery + ": the handler returned after the stream it came on had ended;"
                    + " its ack is not sent: tickd took the delivery back and delivers it again");
            listener.onAckNotSent(delivery);
            return;
        }
        try {
            listener.onAcknowledged(delivery, delivery.ack());
        } catch (TickdException error) {
            listener.onAckFailed(delivery, error);
        }
    }

    /**
     * Stops: takes no new deliveries, lets the handlers in flight finish and their acks go
     * out (over the still open stream: tickd takes back a closed stream's unacknowledged
     * deliveries), then closes the stream, and returns once all of that is done. Deliveries
     * received but not yet started are left unacknowledged, and tickd delivers them again.
     * Do not call it from a handler.
     */
    public void stop() {
        stopping = true;
        stopRequested.countDown();
        boolean interrupted = false;
        handlerPool.shutdown();
        while (true) {
            try {
                if (handlerPool.awaitTermination(1, TimeUnit.MINUTES)) {
                    break;
                }
            } catch (InterruptedException again) {
                interrupted = true;
            }
        }
        synchronized (streamLock) {
            if (currentStream != null) {
                currentStream.cancel("subscriber stopped", null);
            }
        }
        while (true) {
            try {
                supervisor.join();
                break;
            } catch (InterruptedException again) {
                interrupted = true;
            }
        }
        ended.complete(null);
        if (interrupted) {
            Thread.currentThread().interrupt();
        }
    }

    @Override
    public void close() {
        stop();
    }

    /** True once {@link #stop()} began (for tests: stop() is then waiting for the handlers). */
    boolean isStopping() {
        return stopping;
    }

    /**
     * Completes once {@link #stop()} returned; fails with the {@link TickdException} of a
     * refusal no reconnect can cure (see the class doc), after which nothing is delivered.
     */
    public CompletableFuture<Void> ended() {
        return ended;
    }

    /** Configures a {@link Subscriber}; from {@link TickdClient#subscriber(ExpirationHandler)}. */
    public static final class Builder {
        private final TickdClient client;
        private final ExpirationHandler handler;
        private String namespace = "";
        private int maxInFlight = 1;
        private boolean manualAck;
        private boolean observer;
        private boolean autoAck;
        private Duration ackTimeout;
        private int maxUnacked;
        private RetryPolicy reconnectPolicy;
        private SubscriberListener listener = new SubscriberListener() {
        };

        Builder(TickdClient client, ExpirationHandler handler) {
            this.client = client;
            this.handler = Objects.requireNonNull(handler);
        }

        public Builder namespace(String namespace) {
            this.namespace = Objects.requireNonNull(namespace);
            return this;
        }

        /** At most this many handlers run at once (default 1: in order of delivery). */
        public Builder maxInFlight(int handlers) {
            if (handlers < 1) {
                throw new IllegalArgumentException("maxInFlight must be at least 1");
            }
            this.maxInFlight = handlers;
            return this;
        }

        /** The handler acknowledges with {@link Delivery#ack()} itself; nothing is acked for it. */
        public Builder manualAck(boolean manualAck) {
            this.manualAck = manualAck;
            return this;
        }

        /**
         * Observer mode: receives a copy of every expiration of the namespace without taking
         * part in sharing; nothing is acknowledged (the sharing subscribers do that).
         */
        public Builder observer(boolean observer) {
            this.observer = observer;
            return this;
        }

        /**
         * At-most-once: tickd counts each delivery as acknowledged as soon as it is sent, so a
         * handler that fails (or a process that dies) loses it. Nothing is acknowledged here.
         */
        public Builder autoAck(boolean autoAck) {
            this.autoAck = autoAck;
            return this;
        }

        /** How long a delivery may stay unacknowledged before tickd sends it again (default: tickd's). */
        public Builder ackTimeout(Duration ackTimeout) {
            this.ackTimeout = Objects.requireNonNull(ackTimeout);
            return this;
        }

        /** How many unacknowledged deliveries tickd lets this subscriber hold (0: tickd's default). */
        public Builder maxUnacked(int maxUnacked) {
            this.maxUnacked = maxUnacked;
            return this;
        }

        /** The back-off between reconnects (its maxAttempts is ignored); default: the client's {@code reconnectBackoff}. */
        public Builder reconnectBackoff(RetryPolicy policy) {
            this.reconnectPolicy = Objects.requireNonNull(policy).requirePositiveBackoff();
            return this;
        }

        public Builder listener(SubscriberListener listener) {
            this.listener = Objects.requireNonNull(listener);
            return this;
        }

        /** Starts subscribing in the background and returns at once. */
        public Subscriber start() {
            Subscriber subscriber = new Subscriber(this);
            subscriber.supervisor.start();
            return subscriber;
        }
    }
}
