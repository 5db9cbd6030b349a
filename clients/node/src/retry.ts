import { Status, TickdError } from "./errors";
import { Backoff, sleep } from "./backoff";
import type { RetryOptions } from "./options";

/**
 * Runs `attempt` until it succeeds, fails with anything but UNAVAILABLE, the attempts are used
 * up, or the call's deadline passes. Only for idempotent calls: UNAVAILABLE can mean the request
 * reached tickd and the answer was lost, so a call that is not idempotent (a registration
 * without a key) could take effect twice. Such calls run once (`idempotent` false).
 *
 * `deadlineMs` bounds the whole call, retries and back-off included: each attempt gets the same
 * absolute deadline (the time left, as its gRPC deadline), the back-off never sleeps past it, and no attempt starts after it
 * passed (the call then rejects with DEADLINE_EXCEEDED, caused by the last attempt's error).
 */
export async function callWithRetries<T>(
  attempt: (deadline: Date) => Promise<T>,
  idempotent: boolean,
  options: RetryOptions,
  deadlineMs: number,
  signal?: AbortSignal,
): Promise<T> {
  const maxAttempts = idempotent ? Math.max(1, options.maxAttempts ?? 5) : 1;
  const backoff = new Backoff(options);
  const deadline = Date.now() + deadlineMs;
  for (let attemptNumber = 1; ; attemptNumber++) {
    try {
      return await attempt(new Date(deadline));
    } catch (error) {
      const tickdError = error instanceof TickdError ? error : TickdError.fromServiceError(error as Error);
      const retryable = tickdError.code === Status.UNAVAILABLE && attemptNumber < maxAttempts;
      if (!retryable || signal?.aborted) throw tickdError;
      const remainingMs = deadline - Date.now();
      if (remainingMs > 0) await sleep(Math.min(backoff.nextDelayMs(), remainingMs), signal);
      if (signal?.aborted) throw tickdError;
      if (Date.now() >= deadline) throw deadlineExceeded(deadlineMs, attemptNumber, tickdError);
    }
  }
}

function deadlineExceeded(deadlineMs: number, attempts: number, lastError: TickdError): TickdError {
  return new TickdError(
    Status.DEADLINE_EXCEEDED,
    `the call's deadline (${deadlineMs} ms) passed after ${attempts} attempt(s); the last failed with ${lastError.message}`,
    lastError.metadata,
    { cause: lastError },
  );
}
