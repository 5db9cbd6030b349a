import { EventEmitter } from "node:events";
import type { BackoffOptions } from "./backoff";
import type { TickdClient } from "./client";
import { optionalDuration } from "./durations";
import { TickdError } from "./errors";
import { SubscribeRequest_Mode } from "./gen/tickd/v1/tickd";
import type { AckResponse, Expiration } from "./gen/tickd/v1/tickd";
import { ReconnectLoop, streamEnd } from "./reconnect-loop";
import type { StreamSession } from "./reconnect-loop";
import { runInHandlerSpan } from "./tracing";

/** What a handler gets besides the expiration. */
export interface ExpirationContext {
  /** 1 on the first delivery, 2, 3, ... on redeliveries. */
  readonly attempt: number;
  readonly deliveryId: string;
  /**
   * Acknowledges this delivery now (needed in manual-ack mode; harmless otherwise, done once).
   * The ack is sent whatever became of the stream the delivery came on; the answer says
   * whether tickd took it: `acknowledged` 0 with the id in `unknown` when tickd no longer
   * awaited it (acknowledged already, its ack timeout passed, or its stream ended, a tickd
   * restart included: it is delivered again).
   */
  ack(): Promise<AckResponse>;
  /**
   * True once the stream this delivery came on has ended (it broke, tickd restarted, or the
   * subscriber stopped): tickd has taken the delivery back and delivers it again, so the
   * subscriber sends no ack for it when the handler returns (see the `ackNotSent` event).
   */
  readonly streamEnded: boolean;
}

/** Handles one expiration; the returned promise settling is "done" (rejecting: not acknowledged). */
export type ExpirationHandler = (expiration: Expiration, context: ExpirationContext) => Promise<void> | void;

export interface SubscriberOptions {
  /** Default: the client's namespace. */
  namespace?: string;
  handler: ExpirationHandler;
  /** Handlers running at once, at most. Default 8. */
  maxInFlight?: number;
  /** Leave acknowledging to the handler (context.ack()) instead of acking when it returns. */
  manualAck?: boolean;
  /** "observer" gets a copy of every expiration and never acknowledges. Default "shared". */
  mode?: "shared" | "observer";
  /** How long tickd waits for an ack before delivering again (ms; default: the server's). */
  ackTimeoutMs?: number;
  /** How many unacknowledged deliveries tickd lets this subscriber hold (default: the server's). */
  maxUnacked?: number;
  /** Back-off between reconnects. */
  reconnect?: BackoffOptions;
}

/** The events a Subscriber emits, with their arguments. */
export interface SubscriberEvents {
  /** The Subscribe stream is open (after start() and after every reconnect). */
  subscribed: [];
  /** The stream broke; a reconnect follows after a back-off. */
  disconnected: [error: TickdError];
  /** A permanent error (e.g. UNAUTHENTICATED): the subscriber stopped reconnecting. */
  failed: [error: TickdError];
  /** An ack was answered; `response.unknown` names ids tickd was not waiting for. */
  acked: [expiration: Expiration, response: AckResponse];
  /**
   * The handler returned after the stream its expiration came on had ended (the subscriber
   * reconnected meanwhile, e.g. across a tickd restart): no ack is sent, since tickd took the
   * delivery back when the stream ended; the expiration comes again with a higher attempt.
   */
  ackNotSent: [expiration: Expiration];
  /**
   * The handler threw or rejected; the expiration stays unacknowledged and will come again.
   * With no listener for this event, the error is written to stderr (console.error) instead.
   */
  handlerError: [error: unknown, expiration: Expiration];
  /** The ack call itself failed (after its retries). */
  ackError: [error: TickdError, expiration: Expiration];
  /**
   * stop() took no more expirations and now waits for this many handlers in flight (and their
   * acks) before it closes the stream.
   */
  draining: [handlersInFlight: number];
}

const DEFAULT_MAX_IN_FLIGHT = 8;

/** One Subscribe stream as its deliveries see it: `ended` once the stream has ended. */
interface StreamState {
  ended: boolean;
}

/** An expiration received, with the stream it came on. */
interface Received {
  readonly expiration: Expiration;
  readonly stream: StreamState;
}

/**
 * Consumes a namespace's expirations over one Subscribe stream, reconnecting with back-off,
 * running at most `maxInFlight` handlers at once and acknowledging each after its handler
 * returns. Delivery is at least once: an expiration whose ack is lost comes again, so handlers
 * must be idempotent. A handler that returns after its expiration's stream has ended gets no
 * ack (`ackNotSent`): tickd took the delivery back and delivers it again.
 */
export class Subscriber extends EventEmitter<SubscriberEvents> {
  private readonly namespace: string;
  private readonly maxInFlight: number;
  private readonly loop: ReconnectLoop;
  private readonly waiting: Received[] = [];
  private readonly inFlight = new Set<Promise<void>>();
  private pauseStream: (() => void) | undefined;
  private resumeStream: (() => void) | undefined;
  private stopRequested = false;

  constructor(
    private readonly client: TickdClient,
    private readonly options: SubscriberOptions,
  ) {
    super();
    this.namespace = options.namespace ?? client.namespace;
    this.maxInFlight = Math.max(1, options.maxInFlight ?? DEFAULT_MAX_IN_FLIGHT);
    this.loop = new ReconnectLoop((session) => this.runStream(session), options.reconnect ?? {}, {
      established: () => this.emit("subscribed"),
      disconnected: (error) => this.emit("disconnected", error),
      failed: (error) => this.emit("failed", error),
    });
  }

  /** Handlers running now. */
  get handlersInFlight(): number {
    return this.inFlight.size;
  }

  /**
   * Starts consuming. Resolves once the first stream is open (reconnecting until it is);
   * rejects on a permanent error such as UNAUTHENTICATED.
   */
  start(): Promise<void> {
    return this.loop.start();
  }

  /**
   * Waits for the handlers in flight (and their acks), then closes the stream. Expirations
   * received but not yet handed to a handler are dropped: unacknowledged, tickd delivers them again.
   */
  async stop(): Promise<void> {
    this.stopRequested = true;
    this.waiting.length = 0;
    this.pauseStream?.();
    // The stream stays open until the handlers finished: tickd takes back a subscriber's
    // unacknowledged deliveries when its stream closes, so acks must land before that.
    this.emit("draining", this.inFlight.size);
    while (this.inFlight.size > 0) await Promise.allSettled([...this.inFlight]);
    await this.loop.stop();
  }

  private runStream(session: StreamSession): Promise<TickdError> {
    const call = this.client.openSubscribeStream({
      namespace: this.namespace,
      mode: this.options.mode === "observer" ? SubscribeRequest_Mode.MODE_OBSERVER : SubscribeRequest_Mode.MODE_SHARED,
      ackTimeout: optionalDuration(this.options.ackTimeoutMs),
      maxUnacked: this.options.maxUnacked ?? 0,
      autoAck: false,
    });
    const stream: StreamState = { ended: false };
    this.pauseStream = () => call.pause();
    this.resumeStream = () => call.resume();
    call.on("metadata", () => session.established());
    call.on("data", (response: { expiration?: Expiration }) => {
      if (response.expiration === undefined || this.stopRequested) return;
      this.waiting.push({ expiration: response.expiration, stream });
      this.startHandlers();
    });
    return streamEnd(call, session.signal).then((error) => {
      // tickd takes back the unacknowledged deliveries of a stream that ended: the ones not
      // yet handed to a handler are dropped (they come again), and acks of those in flight
      // are no longer sent. (An observer's copies are not sent again: it keeps them.)
      stream.ended = true;
      if (this.options.mode === "observer") return error;
      for (let index = this.waiting.length - 1; index >= 0; index -= 1) {
        if (this.waiting[index]!.stream === stream) this.waiting.splice(index, 1);
      }
      return error;
    });
  }

  /** Starts handlers for waiting expirations while below the limit; pauses the stream at it. */
  private startHandlers(): void {
    while (this.waiting.length > 0 && this.inFlight.size < this.maxInFlight) {
      const { expiration, stream } = this.waiting.shift() as Received;
      const task = this.handle(expiration, stream).finally(() => {
        this.inFlight.delete(task);
        this.startHandlers();
      });
      this.inFlight.add(task);
    }
    // Reading on while every handler is busy would only pile expirations up in memory.
    if (this.waiting.length > 0 || this.stopRequested) this.pauseStream?.();
    else this.resumeStream?.();
  }

  private async handle(expiration: Expiration, stream: StreamState): Promise<void> {
    let acknowledgement: Promise<AckResponse> | undefined;
    const context: ExpirationContext = {
      attempt: expiration.attempt,
      deliveryId: expiration.deliveryId,
      ack: () => (acknowledgement ??= this.acknowledge(expiration)),
      get streamEnded() {
        return stream.ended;
      },
    };
    try {
      await runInHandlerSpan(expiration, this.namespace, async () => this.options.handler(expiration, context));
    } catch (error) {
      if (this.listenerCount("handlerError") > 0) {
        this.emit("handlerError", error, expiration);
      } else {
        // Nobody listens: a failing handler must not go unnoticed.
        console.error(
          `tickd: the handler failed on timer ${expiration.timer?.id ?? "?"} (delivery ${expiration.deliveryId}, ` +
            `attempt ${expiration.attempt}); it stays unacknowledged and comes again:`,
          error,
        );
      }
      return;
    }
    const acksAutomatically = !this.options.manualAck && this.options.mode !== "observer";
    if (!acksAutomatically) return;
    if (acknowledgement === undefined && stream.ended) {
      // tickd took the delivery back when its stream ended (after a restart its id names
      // nothing; an older tickd, numbering deliveries from 1 at each start, would take it
      // for another): an ack now would mean nothing, so none is sent.
      this.emit("ackNotSent", expiration);
      return;
    }
    await context.ack().catch(() => undefined);
  }

  /** Acks one delivery (retried on UNAVAILABLE by the client); reports the answer or the failure. */
  private async acknowledge(expiration: Expiration): Promise<AckResponse> {
    try {
      const response = await this.client.ack([expiration.deliveryId], this.namespace);
      this.emit("acked", expiration, response);
      return response;
    } catch (error) {
      const tickdError = TickdError.fromServiceError(error as Error);
      this.emit("ackError", tickdError, expiration);
      throw tickdError;
    }
  }
}
