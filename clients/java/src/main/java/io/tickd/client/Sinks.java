package io.tickd.client;

import io.grpc.Channel;
import io.grpc.Status;
import io.tickd.v1.GetSinkRequest;
import io.tickd.v1.ListSinksRequest;
import io.tickd.v1.PauseSinkRequest;
import io.tickd.v1.PauseSinkResponse;
import io.tickd.v1.RemoveSinkRequest;
import io.tickd.v1.ResumeSinkRequest;
import io.tickd.v1.ResumeSinkResponse;
import io.tickd.v1.SetSinkRequest;
import io.tickd.v1.SetSinkResponse;
import io.tickd.v1.SinkState;
import io.tickd.v1.SinkStatusRequest;
import io.tickd.v1.SinkView;
import io.tickd.v1.SinksGrpc;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * tickd's {@code Sinks} service through a {@link TickdClient} ({@link TickdClient#sinks()}):
 * the push sinks of namespaces, set, read, paused, resumed and removed while tickd runs. It
 * shares the client's channel, token, default namespace, deadline and retry policy.
 *
 * <pre>{@code
 * tickd.sinks().set("https://hooks.example.com/timers", "50/s,burst=10");
 * tickd.sinks().pause();                 // what fires meanwhile waits in tickd
 * tickd.sinks().resume();
 * }</pre>
 *
 * <p><b>Retries.</b> Every call is retried on {@code UNAVAILABLE}: each sets a state rather than
 * adding to one, so a repeat after a lost first try changes nothing more. A retried set, pause
 * or resume may answer {@code changed} false; a retried remove, NOT_FOUND.
 */
public final class Sinks {
    private final SinksGrpc.SinksBlockingStub blockingStub;
    private final String namespace;
    private final Duration callDeadline;
    private final RetryingCaller caller;

    Sinks(Channel channel, String namespace, Duration callDeadline, RetryingCaller caller) {
        this.blockingStub = SinksGrpc.newBlockingStub(channel);
        this.namespace = namespace;
        this.callDeadline = callDeadline;
        this.caller = caller;
    }

    /**
     * Sets the default namespace's sink to {@code url} (as {@code --sink} takes it), with no rate
     * limit. Secrets given before are kept (see {@link #set(SetSinkRequest)}).
     */
    public SetSinkResponse set(String url) {
        return set(SetSinkRequest.newBuilder().setUrl(url).build());
    }

    /** Sets the default namespace's sink, pushed at most at {@code rate} ("50/s", "50/s,burst=10"). */
    public SetSinkResponse set(String url, String rate) {
        return set(SetSinkRequest.newBuilder().setUrl(url).setRate(rate).build());
    }

    /**
     * Sets a sink as the request says (an empty namespace: the default one). Secrets left out
     * keep those given before, so that a new rate or URL does not stop the signing; only
     * {@code clear_secrets} forgets them. The answer's URL shows {@code user:password@} as
     * {@code ***@}; {@code changed} is false when the sink already had this URL and rate.
     */
    public SetSinkResponse set(SetSinkRequest request) {
        SetSinkRequest built = request.getNamespace().isEmpty()
                ? request.toBuilder().setNamespace(namespace).build() : request;
        return caller.call(true, () -> stub().setSink(built));
    }

    /** The default namespace's sink; NOT_FOUND when it has none. */
    public SinkView get() {
        return get(namespace);
    }

    public SinkView get(String namespace) {
        GetSinkRequest request = GetSinkRequest.newBuilder().setNamespace(namespace).build();
        return caller.call(true, () -> stub().getSink(request)).getSink();
    }

    /** Every sink the token may see, {@code --sink}'s and the API's, by namespace. */
    public List<SinkView> list() {
        return caller.call(true, () -> stub().listSinks(ListSinksRequest.getDefaultInstance())).getSinksList();
    }

    /**
     * Pauses the default namespace's sink, durably: no push leaves until {@link #resume()}, and
     * what fires meanwhile waits in tickd, spending no attempt. Returns once the pushes already
     * under way have ended.
     */
    public PauseSinkResponse pause() {
        return pause(namespace);
    }

    public PauseSinkResponse pause(String namespace) {
        PauseSinkRequest request = PauseSinkRequest.newBuilder().setNamespace(namespace).build();
        return caller.call(true, () -> stub().pauseSink(request));
    }

    /** Lets the default namespace's paused sink push again, what waited included. */
    public ResumeSinkResponse resume() {
        return resume(namespace);
    }

    public ResumeSinkResponse resume(String namespace) {
        ResumeSinkRequest request = ResumeSinkRequest.newBuilder().setNamespace(namespace).build();
        return caller.call(true, () -> stub().resumeSink(request));
    }

    /** Removes the default namespace's sink set through the API: its expirations wait for subscribers again. */
    public void remove() {
        remove(namespace);
    }

    public void remove(String namespace) {
        RemoveSinkRequest request = RemoveSinkRequest.newBuilder().setNamespace(namespace).build();
        caller.call(true, () -> stub().removeSink(request));
    }

    /** How the default namespace's sink is doing (its circuit, its pushes since tickd started it). */
    public SinkState status() {
        return status(namespace);
    }

    public SinkState status(String namespace) {
        List<SinkState> states = status(SinkStatusRequest.newBuilder().setNamespace(namespace).build());
        if (states.size() != 1) {
            throw new TickdException(Status.Code.INTERNAL,
                    "tickd answered SinkStatus of one namespace with " + states.size() + " sinks", null);
        }
        return states.get(0);
    }

    /** How every sink the token may see is doing. */
    public List<SinkState> statusOfAll() {
        return status(SinkStatusRequest.newBuilder().setAll(true).build());
    }

    private List<SinkState> status(SinkStatusRequest request) {
        return caller.call(true, () -> stub().sinkStatus(request)).getSinksList();
    }

    private SinksGrpc.SinksBlockingStub stub() {
        return blockingStub.withDeadlineAfter(callDeadline.toNanos(), TimeUnit.NANOSECONDS);
    }
}
