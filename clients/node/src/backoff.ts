/**
 * Exponential back-off with full jitter, shared by call retries, the subscriber and the lease
 * keeper. Jitter spreads the reconnects of many clients after a server restart, so they do not
 * all knock at the same moment.
 */
export interface BackoffOptions {
  /** Delay before the first retry or reconnect (ms). Default 100. */
  initialDelayMs?: number;
  /** The cap on any one delay (ms). Default 5000. */
  maxDelayMs?: number;
  /** Growth per attempt. Default 2. */
  multiplier?: number;
  /** Fraction of each delay that is randomised, 0..1. Default 0.5 (delay * [0.5, 1]). */
  jitter?: number;
}

export class Backoff {
  private readonly initialDelayMs: number;
  private readonly maxDelayMs: number;
  private readonly multiplier: number;
  private readonly jitter: number;
  private attempt = 0;

  constructor(options: BackoffOptions = {}) {
    this.initialDelayMs = options.initialDelayMs ?? 100;
    this.maxDelayMs = options.maxDelayMs ?? 5000;
    this.multiplier = options.multiplier ?? 2;
    this.jitter = Math.min(Math.max(options.jitter ?? 0.5, 0), 1);
  }

  /** The delay before the next attempt; each call grows the next one, up to the cap. */
  nextDelayMs(): number {
    const exponential = this.initialDelayMs * Math.pow(this.multiplier, this.attempt);
    this.attempt += 1;
    const capped = Math.min(exponential, this.maxDelayMs);
    return capped * (1 - this.jitter * Math.random());
  }

  /** After a success: the next failure starts again from the initial delay. */
  reset(): void {
    this.attempt = 0;
  }
}

/** Resolves after `milliseconds`, or at once when `signal` is aborted (never rejects). */
export function sleep(milliseconds: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const onAbort = (): void => {
      clearTimeout(timer);
      resolve();
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, milliseconds);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
