package io.tickd.client;

import com.google.protobuf.ByteString;
import io.grpc.Channel;
import io.grpc.ClientInterceptor;
import io.grpc.ClientInterceptors;
import io.grpc.ManagedChannel;
import io.tickd.v1.AckRequest;
import io.tickd.v1.AckResponse;
import io.tickd.v1.CancelRequest;
import io.tickd.v1.Expiration;
import io.tickd.v1.GetRequest;
import io.tickd.v1.NewTimeoutRequest;
import io.tickd.v1.NewTimeoutResponse;
import io.tickd.v1.NewTimeoutResult;
import io.tickd.v1.NewTimeoutsRequest;
import io.tickd.v1.PendingRequest;
import io.tickd.v1.PendingResponse;
import io.tickd.v1.RedriveRequest;
import io.tickd.v1.RedriveResponse;
import io.tickd.v1.RescheduleRequest;
import io.tickd.v1.Timer;
import io.tickd.v1.TimerRef;
import io.tickd.v1.TimerSpec;
import io.tickd.v1.TimersGrpc;
import io.tickd.v1.TouchRequest;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.function.Supplier;

/**
 * A client for tickd's {@code Timers} service: every RPC as a blocking method, with a default
 * namespace, a per-call deadline and retries of the calls that are safe to send twice. The
 * {@code Sinks} service (push sinks) is {@link #sinks()}, on the same channel and options.
 *
 * <pre>{@code
 * try (TickdClient tickd = TickdClient.builder().target("127.0.0.1:50051").namespace("orders").build()) {
 *     tickd.register(TimerSpec.newBuilder().setKey("order-42")
 *             .setDelay(ProtoTime.duration(Duration.ofMinutes(30))).build());
 * }
 * }</pre>
 *
 * <p>Requests are the generated {@code io.tickd.v1} messages; a namespace left empty in a
 * {@link TimerSpec} or {@link TimerRef} becomes the client's default namespace.
 *
 * <p><b>Retries.</b> On {@code UNAVAILABLE} (tickd unreachable or restarting) the client
 * retries, as its {@link RetryPolicy} says, the calls whose repetition changes nothing:
 * a registration WITH a key (the second try finds the timer the first one made), cancel,
 * get, touch, pending, ack. A registration without a key is never retried: if the first try
 * reached tickd and only its answer was lost, a retry would register a second timer.
 * Reschedule (a delay counts from when it arrives) and redrive are not retried either.
 *
 * <p>Thread-safe; share one client. {@link #close()} shuts the channel down if the client
 * made it.
 */
public final class TickdClient implements AutoCloseable {
    /** The channel this client made and closes; null when the caller's, or for a derived client. */
    private final ManagedChannel ownedChannel;
    /** The channel whose connect back-off retries and reconnects reset (null: the caller's channel). */
    private final ManagedChannel wakeableChannel;
    private final Channel channel;
    private final TimersGrpc.TimersBlockingStub blockingStub;
    private final TimersGrpc.TimersStub asyncStub;
    private final String namespace;
    private final Duration callDeadline;
    private final RetryPolicy retryPolicy;
    /** The streams' back-off between reconnects: never the call retry policy (which may be none()). */
    private final RetryPolicy reconnectPolicy;
    private final RetryingCaller caller;
    private final Sinks sinks;
    private final TracingHook tracing;

    TickdClient(ManagedChannel ownedChannel, Channel channel, List<ClientInterceptor> interceptors,
            String bearerToken, String namespace, Duration callDeadline, RetryPolicy retryPolicy,
            RetryPolicy reconnectPolicy, TracingHook tracing) {
        this(ownedChannel, ownedChannel, intercepted(channel, interceptors, bearerToken, tracing), namespace,
                callDeadline, retryPolicy, reconnectPolicy, tracing);
    }

    private TickdClient(ManagedChannel ownedChannel, ManagedChannel wakeableChannel, Channel channel,
            String namespace, Duration callDeadline, RetryPolicy retryPolicy, RetryPolicy reconnectPolicy,
            TracingHook tracing) {
        this.ownedChannel = ownedChannel;
        this.wakeableChannel = wakeableChannel;
        this.channel = channel;
        this.blockingStub = TimersGrpc.newBlockingStub(channel);
        this.asyncStub = TimersGrpc.newStub(channel);
        this.namespace = namespace;
        this.callDeadline = callDeadline;
        this.retryPolicy = retryPolicy;
        this.reconnectPolicy = reconnectPolicy;
        this.caller = new RetryingCaller(retryPolicy, wakeableChannel);
        this.sinks = new Sinks(channel, namespace, callDeadline, caller);
        this.tracing = tracing;
    }

    private static Channel intercepted(Channel channel, List<ClientInterceptor> interceptors, String bearerToken,
            TracingHook tracing) {
        List<ClientInterceptor> all = new ArrayList<>(interceptors);
        if (tracing != TracingHook.NONE) {
            all.add(new TraceContextInterceptor(tracing));
        }
        if (bearerToken != null) {
            all.add(new BearerTokenInterceptor(bearerToken));
        }
        return ClientInterceptors.intercept(channel, all);
    }

    /**
     * The same client (channel, token, retries) with another per-call deadline, e.g. a short
     * one for a latency-critical path. Closing the derived client leaves the channel open.
     */
    public TickdClient withCallDeadline(Duration deadline) {
        if (deadline.isNegative() || deadline.isZero()) {
            throw new IllegalArgumentException("the call deadline must be positive");
        }
        return new TickdClient(null, wakeableChannel, channel, namespace, deadline, retryPolicy, reconnectPolicy,
                tracing);
    }

    /** The same client in another default namespace. Closing the derived client leaves the channel open. */
    public TickdClient withNamespace(String otherNamespace) {
        return new TickdClient(null, wakeableChannel, channel, otherNamespace, callDeadline, retryPolicy,
                reconnectPolicy, tracing);
    }

    /** The same client with another retry policy. Closing the derived client leaves the channel open. */
    public TickdClient withRetryPolicy(RetryPolicy policy) {
        return new TickdClient(null, wakeableChannel, channel, namespace, callDeadline, policy, reconnectPolicy,
                tracing);
    }

    public static TickdClientBuilder builder() {
        return new TickdClientBuilder();
    }

    /** The namespace used where a request leaves it empty. */
    public String namespace() {
        return namespace;
    }

    public RetryPolicy retryPolicy() {
        return retryPolicy;
    }

    /** The back-off of the streams' reconnects (lease keepers, subscribers without their own). */
    public RetryPolicy reconnectPolicy() {
        return reconnectPolicy;
    }

    // ---- registering -------------------------------------------------------------------

    /**
     * Registers one timer. Retried on UNAVAILABLE only when it has a key (see the class doc);
     * a retry may then answer {@code created} false, the lost first try having created it.
     * The answer carries the timer without its payload; {@code created} is false when the key
     * already existed, {@code replaced} true when {@code replace} replaced it.
     */
    public NewTimeoutResponse register(TimerSpec spec) {
        TimerSpec withNamespace = withDefaultNamespace(spec);
        NewTimeoutRequest request = NewTimeoutRequest.newBuilder().setTimer(withNamespace).build();
        return call(!withNamespace.getKey().isEmpty(), () -> stub().newTimeout(request));
    }

    /**
     * Registers a batch; one result per spec, in order, each registered or failed alone.
     * Retried on UNAVAILABLE only when every spec has a key.
     */
    public List<BatchResult> registerAll(Collection<TimerSpec> specs) {
        NewTimeoutsRequest.Builder request = NewTimeoutsRequest.newBuilder();
        boolean everyItemKeyed = true;
        for (TimerSpec spec : specs) {
            TimerSpec withNamespace = withDefaultNamespace(spec);
            everyItemKeyed &= !withNamespace.getKey().isEmpty();
            request.addTimers(withNamespace);
        }
        NewTimeoutsRequest built = request.build();
        List<BatchResult> results = new ArrayList<>();
        for (NewTimeoutResult result : call(everyItemKeyed, () -> stub().newTimeouts(built)).getResultsList()) {
            results.add(result.hasRegistered()
                    ? new BatchResult(result.getRegistered(), null)
                    : new BatchResult(null, TickdException.fromItemError(result.getError())));
        }
        return results;
    }

    // ---- naming, reading, changing one timer -------------------------------------------

    /** A reference to a timer by the id tickd gave it, in the default namespace. */
    public TimerRef byId(String id) {
        return TimerRef.newBuilder().setNamespace(namespace).setId(id).build();
    }

    /** A reference to a timer by its key, in the default namespace. */
    public TimerRef byKey(String key) {
        return TimerRef.newBuilder().setNamespace(namespace).setKey(key).build();
    }

    /**
     * Cancels a timer; true if it was pending and is now cancelled, false if it had already
     * fired or been cancelled (by key, a timer no longer pending is NOT_FOUND instead).
     */
    public boolean cancel(TimerRef timer) {
        CancelRequest request = CancelRequest.newBuilder().setTimer(withDefaultNamespace(timer)).build();
        return call(true, () -> stub().cancel(request)).getCancelled();
    }

    /** A pending timer with its payload and time remaining; NOT_FOUND when not pending. */
    public Timer get(TimerRef timer) {
        GetRequest request = GetRequest.newBuilder().setTimer(withDefaultNamespace(timer)).build();
        return call(true, () -> stub().get(request)).getTimer();
    }

    /** One heartbeat: the lease's deadline becomes now + its ttl. */
    public Timer touch(TimerRef lease) {
        return touch(lease, null);
    }

    /** One heartbeat; a non-null {@code ttl} becomes the lease's ttl from now on. */
    public Timer touch(TimerRef lease, Duration ttl) {
        TouchRequest.Builder request = TouchRequest.newBuilder().setTimer(withDefaultNamespace(lease));
        if (ttl != null) {
            request.setTtl(ProtoTime.duration(ttl));
        }
        TouchRequest built = request.build();
        return call(true, () -> stub().touch(built)).getTimer();
    }

    /** Moves a pending timer's next firing to now + {@code delay}, keeping its payload. */
    public Timer reschedule(TimerRef timer, Duration delay) {
        return reschedule(timer, delay, null);
    }

    /** Moves a pending timer to now + {@code delay}; a non-null {@code payload} replaces its payload. */
    public Timer reschedule(TimerRef timer, Duration delay, byte[] payload) {
        return reschedule(rescheduleRequest(timer, payload).setDelay(ProtoTime.duration(delay)));
    }

    /** Moves a pending timer's next firing to {@code deadline}; a non-null {@code payload} replaces it. */
    public Timer rescheduleAt(TimerRef timer, Instant deadline, byte[] payload) {
        return reschedule(rescheduleRequest(timer, payload).setDeadline(ProtoTime.timestamp(deadline)));
    }

    private RescheduleRequest.Builder rescheduleRequest(TimerRef timer, byte[] payload) {
        RescheduleRequest.Builder request = RescheduleRequest.newBuilder().setTimer(withDefaultNamespace(timer));
        if (payload != null) {
            // An empty payload is a payload too: `optional bytes` tells it from "keep".
            request.setPayload(ByteString.copyFrom(payload));
        }
        return request;
    }

    private Timer reschedule(RescheduleRequest.Builder request) {
        RescheduleRequest built = request.build();
        return call(false, () -> stub().reschedule(built)).getTimer();
    }

    // ---- listing ----------------------------------------------------------------------

    /** One Pending call as it is (count, a page, its token, the dead expirations if asked). */
    public PendingResponse pendingPage(PendingRequest request) {
        PendingRequest built = request.getNamespace().isEmpty()
                ? request.toBuilder().setNamespace(namespace).build() : request;
        return call(true, () -> stub().pending(built));
    }

    /** How many timers are pending in the default namespace. */
    public long pendingCount() {
        return pendingPage(PendingRequest.newBuilder().build()).getCount();
    }

    /**
     * The default namespace's pending timers, fetched lazily {@code pageSize} at a time as
     * the iteration reaches them (each iterator starts its own listing).
     */
    public PendingTimers pending(int pageSize) {
        return pending(namespace, pageSize);
    }

    /** A namespace's pending timers, fetched lazily a page at a time. */
    public PendingTimers pending(String namespace, int pageSize) {
        return new PendingTimers(this, namespace, pageSize);
    }

    /** How many expirations of the default namespace ran out of delivery attempts. */
    public long deadCount() {
        return pendingPage(PendingRequest.newBuilder().build()).getDeadCount();
    }

    /** The default namespace's dead expirations, oldest first (their delivery ids go to redrive). */
    public List<Expiration> deadExpirations() {
        return pendingPage(PendingRequest.newBuilder().setIncludeDead(true).build()).getDeadExpirationsList();
    }

    /** Sends the given dead expirations (none: all of the namespace's) back to delivery. */
    public RedriveResponse redrive(Collection<String> deliveryIds) {
        RedriveRequest request = RedriveRequest.newBuilder().setNamespace(namespace).addAllDeliveryIds(deliveryIds).build();
        return call(false, () -> stub().redrive(request));
    }

    // ---- acknowledging, streams ---------------------------------------------------------

    /** Acknowledges deliveries of the default namespace. */
    public AckResponse ack(Collection<String> deliveryIds) {
        return ack(namespace, deliveryIds);
    }

    /** Acknowledges deliveries; ids not awaiting an ack come back in {@code unknown}. */
    public AckResponse ack(String namespace, Collection<String> deliveryIds) {
        AckRequest request = AckRequest.newBuilder().setNamespace(namespace).addAllDeliveryIds(deliveryIds).build();
        return call(true, () -> stub().ack(request));
    }

    /** A subscriber for the default namespace; configure it, then {@code start()}. */
    public Subscriber.Builder subscriber(ExpirationHandler handler) {
        return new Subscriber.Builder(this, handler).namespace(namespace);
    }

    /** A lease keeper over one KeepAlive stream, telling {@code listener} about lost leases. */
    public LeaseKeeper leaseKeeper(LeaseListener listener) {
        return new LeaseKeeper(this, listener);
    }

    /**
     * The push sinks of namespaces ({@code Sinks} service), with this client's channel, token,
     * default namespace, deadline and retries.
     */
    public Sinks sinks() {
        return sinks;
    }

    // ---- plumbing ---------------------------------------------------------------------

    /** How registrations and handlers are traced ({@link TracingHook#NONE}: not at all). */
    public TracingHook tracing() {
        return tracing;
    }

    /** The stub for streams (no deadline: streams live until closed). */
    TimersGrpc.TimersStub asyncStub() {
        return asyncStub;
    }

    /** Lets a reconnecting stream try at once rather than after the channel's own back-off. */
    void wakeChannel() {
        if (wakeableChannel != null) {
            wakeableChannel.resetConnectBackoff();
        }
    }

    private TimersGrpc.TimersBlockingStub stub() {
        return blockingStub.withDeadlineAfter(callDeadline.toNanos(), TimeUnit.NANOSECONDS);
    }

    private <T> T call(boolean idempotent, Supplier<T> attempt) {
        return caller.call(idempotent, attempt);
    }

    private TimerSpec withDefaultNamespace(TimerSpec spec) {
        return spec.getNamespace().isEmpty() ? spec.toBuilder().setNamespace(namespace).build() : spec;
    }

    TimerRef withDefaultNamespace(TimerRef ref) {
        return ref.getNamespace().isEmpty() ? ref.toBuilder().setNamespace(namespace).build() : ref;
    }

    /** Shuts down the channel if this client made it (not a derived one), waiting up to 5 s for calls to end. */
    @Override
    public void close() {
        if (ownedChannel != null) {
            ownedChannel.shutdown();
            try {
                if (!ownedChannel.awaitTermination(5, TimeUnit.SECONDS)) {
                    ownedChannel.shutdownNow();
                }
            } catch (InterruptedException interrupted) {
                ownedChannel.shutdownNow();
                Thread.currentThread().interrupt();
            }
        }
    }
}
