import type { ClientOptions, ClientDuplexStream, ClientReadableStream, Metadata } from "@grpc/grpc-js";
import { callMetadata, channelCredentials, tlsChannelOptions } from "./credentials";
import { optionalDuration } from "./durations";
import { Status, TickdError } from "./errors";
import {
  AckResponse,
  Expiration,
  KeepAliveRequest,
  KeepAliveResponse,
  NewTimeoutResponse,
  PendingResponse,
  RedriveResponse,
  SubscribeRequest,
  SubscribeResponse,
  Timer as WireTimer,
  TimersClient,
} from "./gen/tickd/v1/tickd";
import { SinksClient } from "./gen/tickd/v1/sinks";
import type { SinkState, SinkView } from "./gen/tickd/v1/sinks";
import { requireSink, toSinkChange } from "./sinks";
import type { SetSinkOptions, SinkChange, SinkStatusScope } from "./sinks";
import { DEFAULT_CHANNEL_OPTIONS } from "./options";
import type { CallOptions, RetryOptions, TickdClientOptions } from "./options";
import { callWithRetries } from "./retry";
import { toPayloadBytes, toTimerRef, toTimerSpec } from "./timer-inputs";
import type { TimerOptions, TimerTarget } from "./timer-inputs";
import { withMillis } from "./timer";
import type { Timer } from "./timer";
import { withTraceContext } from "./tracing";
import { callOnce } from "./unary-call";
import type { UnaryMethod } from "./unary-call";

/** A registration's answer: the timer (without its payload: tickd does not echo it) and what happened. */
export interface Registration {
  timer: Timer;
  /** False when the key already existed and that timer was returned (or replaced). */
  created: boolean;
  /** True when `replace` was asked and a pending timer under the key was replaced. */
  replaced: boolean;
}

/** One item of a batch: registered, or failed alone with its own code and message. */
export type BatchResult = { registration: Registration; error?: undefined } | { registration?: undefined; error: TickdError };

export interface RescheduleOptions {
  /** The new next firing, from now (exactly one of delayMs and deadline). */
  delayMs?: number;
  deadline?: Date;
  /** Replaces the payload; omitted keeps it (an empty payload is a payload too). */
  payload?: Uint8Array | string;
}

export interface PendingOptions {
  /** Default: the client's namespace; "" lists every namespace (Pending's convention). */
  namespace?: string;
  /** Timers per page (the server caps it). Default 100. */
  pageSize?: number;
}

const DEFAULT_DEADLINE_MS = 10_000;
const DEFAULT_PAGE_SIZE = 100;

/**
 * A tickd client: one channel, the whole Timers and Sinks API as Promises. Durations are milliseconds,
 * times are Dates, 64-bit counters are strings. Idempotent calls are retried on UNAVAILABLE
 * (see RetryOptions); registrations without a key are not, since a retry could register twice.
 */
export class TickdClient {
  /** The generated grpc-js client, for anything this class does not wrap. */
  readonly stub: TimersClient;
  /** The generated client of the Sinks service, on the same channel. */
  readonly sinksStub: SinksClient;
  /** The namespace used when a call names none. */
  readonly namespace: string;
  private readonly metadata: Metadata;
  private readonly deadlineMs: number;
  private readonly retry: RetryOptions;

  constructor(options: TickdClientOptions) {
    const channelOptions: ClientOptions = {
      ...DEFAULT_CHANNEL_OPTIONS,
      ...tlsChannelOptions(options.tls),
      ...options.channelOptions,
    };
    this.stub = new TimersClient(options.address, channelCredentials(options.tls), channelOptions);
    // One connection for both services: a second channel would double the connections, the
    // reconnects and the keepalive pings to one tickd.
    this.sinksStub = new SinksClient(options.address, channelCredentials(options.tls), {
      ...channelOptions,
      channelOverride: this.stub.getChannel(),
    });
    this.namespace = options.namespace ?? "";
    this.metadata = callMetadata(options.token);
    this.deadlineMs = options.deadlineMs ?? DEFAULT_DEADLINE_MS;
    this.retry = options.retry ?? {};
  }

  /** Closes the channel; calls in flight fail with CANCELLED. */
  close(): void {
    this.stub.close();
  }

  /** Registers one timer. Retried on UNAVAILABLE only when it has a key. */
  async register(timer: TimerOptions, options?: CallOptions): Promise<Registration> {
    const request = { timer: toTimerSpec(timer, this.namespace) };
    const response = await this.unary(this.stub.newTimeout.bind(this.stub), request, hasKey(timer), options, true);
    return toRegistration(response);
  }

  /**
   * Registers a batch; one result per item in order, an invalid item failing alone. Retried on
   * UNAVAILABLE only when every item has a key.
   */
  async registerBatch(timers: readonly TimerOptions[], options?: CallOptions): Promise<BatchResult[]> {
    const request = { timers: timers.map((timer) => toTimerSpec(timer, this.namespace)) };
    const idempotent = timers.every(hasKey);
    const response = await this.unary(this.stub.newTimeouts.bind(this.stub), request, idempotent, options, true);
    return response.results.map((result): BatchResult => {
      if (result.registered !== undefined) return { registration: toRegistration(result.registered) };
      if (result.error !== undefined) return { error: TickdError.fromItemError(result.error) };
      return { error: new TickdError(Status.INTERNAL, "tickd answered a batch item with neither a timer nor an error") };
    });
  }

  /** Cancels a timer; true if it was still pending. By key, a timer no longer pending is NOT_FOUND. */
  async cancel(target: TimerTarget, options?: CallOptions): Promise<boolean> {
    const request = { timer: toTimerRef(target, this.namespace) };
    const response = await this.unary(this.stub.cancel.bind(this.stub), request, true, options);
    return response.cancelled;
  }

  /** A pending timer with its payload and time remaining; NOT_FOUND once it is done. */
  async get(target: TimerTarget, options?: CallOptions): Promise<Timer> {
    const request = { timer: toTimerRef(target, this.namespace) };
    const response = await this.unary(this.stub.get.bind(this.stub), request, true, options);
    return requireTimer(response.timer);
  }

  /** One heartbeat: the lease's deadline becomes now + its ttl (or `ttlMs`, which becomes its ttl). */
  async touch(target: TimerTarget, ttlMs?: number, options?: CallOptions): Promise<Timer> {
    const request = { timer: toTimerRef(target, this.namespace), ttl: optionalDuration(ttlMs) };
    const response = await this.unary(this.stub.touch.bind(this.stub), request, true, options);
    return requireTimer(response.timer);
  }

  /**
   * Moves a pending timer's next firing, optionally replacing its payload. Retried only with an
   * absolute `deadline` (a `delayMs` retried later would land later).
   */
  async reschedule(target: TimerTarget, reschedule: RescheduleOptions, options?: CallOptions): Promise<Timer> {
    const request = {
      timer: toTimerRef(target, this.namespace),
      delay: optionalDuration(reschedule.delayMs),
      deadline: reschedule.deadline,
      payload: reschedule.payload === undefined ? undefined : toPayloadBytes(reschedule.payload),
    };
    const idempotent = reschedule.deadline !== undefined;
    const response = await this.unary(this.stub.reschedule.bind(this.stub), request, idempotent, options, true);
    return requireTimer(response.timer);
  }

  /** Acknowledges delivered expirations (in the client's namespace unless one is given). */
  ack(deliveryIds: readonly string[], namespace?: string, options?: CallOptions): Promise<AckResponse> {
    const request = { namespace: namespace ?? this.namespace, deliveryIds: [...deliveryIds] };
    return this.unary(this.stub.ack.bind(this.stub), request, true, options);
  }

  /** One page of Pending as tickd answers it (count, timers, next page token, dead count). */
  pendingPage(
    page: PendingOptions & { pageToken?: string; includeDead?: boolean },
    options?: CallOptions,
  ): Promise<PendingResponse> {
    const request = {
      namespace: page.namespace ?? this.namespace,
      pageSize: page.pageSize ?? DEFAULT_PAGE_SIZE,
      pageToken: page.pageToken ?? "",
      includeDead: page.includeDead ?? false,
    };
    return this.unary(this.stub.pending.bind(this.stub), request, true, options);
  }

  /** How many timers are pending, and how many expirations are dead, in a namespace. */
  async pendingCount(namespace?: string, options?: CallOptions): Promise<{ count: string; deadCount: string }> {
    const page = await this.pendingPage({ namespace, pageSize: 0 }, options);
    return { count: page.count, deadCount: page.deadCount };
  }

  /**
   * The pending timers, fetched a page at a time as the loop asks for them (a page is requested
   * only when the previous one is used up), following page tokens until there are none.
   */
  async *pendingTimers(pending: PendingOptions = {}, options?: CallOptions): AsyncGenerator<Timer, void, undefined> {
    let pageToken = "";
    do {
      const page = await this.pendingPage({ ...pending, pageToken }, options);
      yield* page.timers.map(withMillis);
      pageToken = page.nextPageToken;
    } while (pageToken !== "");
  }

  /** The namespace's dead expirations (those out of delivery attempts), oldest first. */
  async deadExpirations(namespace?: string, options?: CallOptions): Promise<Expiration[]> {
    const page = await this.pendingPage({ namespace, pageSize: 0, includeDead: true }, options);
    return page.deadExpirations;
  }

  /** Sends dead expirations back to delivery: those named, or all of the namespace's. Not retried. */
  redrive(deliveryIds: readonly string[] = [], namespace?: string, options?: CallOptions): Promise<RedriveResponse> {
    const request = { namespace: namespace ?? this.namespace, deliveryIds: [...deliveryIds] };
    return this.unary(this.stub.redrive.bind(this.stub), request, false, options);
  }

  // Push sinks (the Sinks service). Every call is retried on UNAVAILABLE: each sets a state
  // rather than adding to one, so a repeat after a lost first attempt changes nothing more.

  /**
   * Makes tickd push the namespace's expirations to `url` (as `--sink` takes it; a
   * `user:password@` in it is answered as `***@`). Durable once answered.
   */
  async setSink(url: string, sink: SetSinkOptions = {}, options?: CallOptions): Promise<SinkChange> {
    const request = {
      namespace: sink.namespace ?? this.namespace,
      url,
      rate: sink.rate ?? "",
      secrets: [...(sink.secrets ?? [])],
      clearSecrets: sink.clearSecrets ?? false,
    };
    return toSinkChange(await this.unary(this.sinksStub.setSink.bind(this.sinksStub), request, true, options));
  }

  /** The namespace's sink; NOT_FOUND when it has none. */
  async getSink(namespace?: string, options?: CallOptions): Promise<SinkView> {
    const request = { namespace: namespace ?? this.namespace };
    const response = await this.unary(this.sinksStub.getSink.bind(this.sinksStub), request, true, options);
    return requireSink(response.sink);
  }

  /** Every sink the token may see, `--sink`'s and the API's, by namespace. */
  async listSinks(options?: CallOptions): Promise<SinkView[]> {
    const response = await this.unary(this.sinksStub.listSinks.bind(this.sinksStub), {}, true, options);
    return response.sinks;
  }

  /**
   * Stops the namespace's pushes until resumeSink, across restarts; what fires meanwhile waits
   * in tickd, spending no attempt. Resolves once the pushes under way have ended.
   */
  async pauseSink(namespace?: string, options?: CallOptions): Promise<SinkChange> {
    const request = { namespace: namespace ?? this.namespace };
    return toSinkChange(await this.unary(this.sinksStub.pauseSink.bind(this.sinksStub), request, true, options));
  }

  /** Lets a paused sink push again, what waited included. */
  async resumeSink(namespace?: string, options?: CallOptions): Promise<SinkChange> {
    const request = { namespace: namespace ?? this.namespace };
    return toSinkChange(await this.unary(this.sinksStub.resumeSink.bind(this.sinksStub), request, true, options));
  }

  /**
   * Removes a sink set through this API: the namespace's expirations wait for subscribers
   * again. A retry whose lost first attempt removed it rejects with NOT_FOUND.
   */
  async removeSink(namespace?: string, options?: CallOptions): Promise<void> {
    const request = { namespace: namespace ?? this.namespace };
    await this.unary(this.sinksStub.removeSink.bind(this.sinksStub), request, true, options);
  }

  /** How a sink is doing (its circuit, its pushes since this tickd process started it). */
  async sinkStatus(scope: SinkStatusScope = {}, options?: CallOptions): Promise<SinkState[]> {
    const request = scope.all ? { namespace: "", all: true } : { namespace: scope.namespace ?? this.namespace, all: false };
    const response = await this.unary(this.sinksStub.sinkStatus.bind(this.sinksStub), request, true, options);
    return response.sinks;
  }

  /** Opens a Subscribe stream (used by Subscriber; no deadline, no retries). */
  openSubscribeStream(request: SubscribeRequest): ClientReadableStream<SubscribeResponse> {
    return this.stub.subscribe(request, this.metadata.clone());
  }

  /** Opens a KeepAlive stream (used by LeaseKeeper; no deadline, no retries). */
  openKeepAliveStream(): ClientDuplexStream<KeepAliveRequest, KeepAliveResponse> {
    return this.stub.keepAlive(this.metadata.clone());
  }

  private unary<Request, Response>(
    method: UnaryMethod<Request, Response>,
    request: Request,
    idempotent: boolean,
    options: CallOptions | undefined,
    traced = false,
  ): Promise<Response> {
    const deadlineMs = options?.deadlineMs ?? this.deadlineMs;
    const signal = options?.signal;
    // Registering calls carry the active span's trace context (read now, in the caller's context).
    const metadata = traced ? withTraceContext(this.metadata.clone()) : this.metadata;
    return callWithRetries(
      (deadline) => callOnce(method, request, metadata.clone(), deadline, signal),
      idempotent,
      this.retry,
      deadlineMs,
      signal,
    );
  }
}


function hasKey(timer: TimerOptions): boolean {
  return timer.key !== undefined && timer.key !== "";
}

function requireTimer(timer: WireTimer | undefined): Timer {
  if (timer === undefined) throw new TickdError(Status.INTERNAL, "tickd answered without the timer");
  return withMillis(timer);
}

function toRegistration(response: NewTimeoutResponse): Registration {
  return { timer: requireTimer(response.timer), created: response.created, replaced: response.replaced };
}
