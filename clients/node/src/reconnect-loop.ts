import type { StatusObject } from "@grpc/grpc-js";
import { Backoff, sleep } from "./backoff";
import type { BackoffOptions } from "./backoff";
import { Status, TickdError } from "./errors";

/**
 * Codes that a reconnect cannot cure (a wrong token, a forbidden namespace, a bad request):
 * retrying them forever would only hide the mistake, so the loop gives up and reports it.
 */
const PERMANENT_CODES: ReadonlySet<Status> = new Set([
  Status.UNAUTHENTICATED,
  Status.PERMISSION_DENIED,
  Status.INVALID_ARGUMENT,
  Status.UNIMPLEMENTED,
]);

export function isPermanentStreamError(error: TickdError): boolean {
  return PERMANENT_CODES.has(error.code);
}

/** What a session (one stream, from opening to its end) gets from the loop. */
export interface StreamSession {
  /** Call once the stream is known to work: resets the back-off, tells the owner. */
  established(): void;
  /** Aborted by stop(): the session must cancel its stream and resolve. */
  readonly signal: AbortSignal;
}

export interface ReconnectListener {
  established(): void;
  disconnected(error: TickdError): void;
  /** The loop stopped on a permanent error. */
  failed(error: TickdError): void;
}

/**
 * Runs one stream after another until stopped: when a stream ends, waits an exponential,
 * jittered back-off and opens the next. Shared by Subscriber and LeaseKeeper.
 */
export class ReconnectLoop {
  private readonly abortController = new AbortController();
  private loop: Promise<void> | undefined;
  private firstEstablishment: { resolve(): void; reject(error: TickdError): void } | undefined;

  constructor(
    private readonly runSession: (session: StreamSession) => Promise<TickdError>,
    private readonly backoffOptions: BackoffOptions,
    private readonly listener: ReconnectListener,
  ) {}

  get stopping(): boolean {
    return this.abortController.signal.aborted;
  }

  /**
   * Starts the loop. The promise resolves once the first stream is established (however many
   * reconnects that takes), or when stop() comes first; it rejects on a permanent error.
   */
  start(): Promise<void> {
    if (this.loop !== undefined) throw new Error("already started; a stopped stream is not started again");
    const firstEstablished = new Promise<void>((resolve, reject) => {
      this.firstEstablishment = { resolve, reject };
    });
    this.loop = this.run();
    return firstEstablished;
  }

  /** Aborts the session in progress (or the back-off wait) and resolves once the loop ended. */
  async stop(): Promise<void> {
    this.abortController.abort();
    this.firstEstablishment?.resolve();
    await this.loop;
  }

  private async run(): Promise<void> {
    const backoff = new Backoff(this.backoffOptions);
    const signal = this.abortController.signal;
    while (!signal.aborted) {
      const error = await this.runSession({
        established: () => {
          backoff.reset();
          this.firstEstablishment?.resolve();
          this.listener.established();
        },
        signal,
      });
      if (signal.aborted) return;
      if (isPermanentStreamError(error)) {
        this.firstEstablishment?.reject(error);
        this.listener.failed(error);
        return;
      }
      this.listener.disconnected(error);
      await sleep(backoff.nextDelayMs(), signal);
    }
  }
}

/** A stream's call object, as far as waiting for its end goes. */
interface EndingStream {
  on(event: "status", listener: (status: StatusObject) => void): unknown;
  on(event: "error", listener: (error: Error) => void): unknown;
  cancel(): void;
}

/**
 * Resolves with how the stream ended (never rejects): its error, or UNAVAILABLE when the
 * server closed it with OK (tickd does so when it shuts down). Cancels it when `signal` aborts.
 */
export function streamEnd(call: EndingStream, signal: AbortSignal): Promise<TickdError> {
  return new Promise((resolve) => {
    let settled = false;
    const settle = (error: TickdError): void => {
      if (settled) return;
      settled = true;
      signal.removeEventListener("abort", onAbort);
      resolve(error);
    };
    const onAbort = (): void => call.cancel();
    call.on("error", (error) => settle(TickdError.fromServiceError(error)));
    call.on("status", (status) => {
      if (status.code === Status.OK) settle(new TickdError(Status.UNAVAILABLE, "the stream was closed by the server"));
      else settle(new TickdError(status.code, status.details, status.metadata));
    });
    if (signal.aborted) call.cancel();
    else signal.addEventListener("abort", onAbort, { once: true });
  });
}
