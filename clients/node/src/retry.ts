import { Status, TickdError } from "./errors";
import { Backoff, sleep } from "./backoff";
import type { RetryOptions } from "./options";

/**
 * Runs `attempt` until it succeeds, fails with anything but UNAVAILABLE, or the attempts are
 * used up. Only for idempotent calls: UNAVAILABLE can mean the request reached tickd and the
 * answer was lost, so a call that is not idempotent (a registration without a key) could take
 * effect twice. Such calls run once (`idempotent` false).
 */
export async function callWithRetries<T>(
  attempt: () => Promise<T>,
  idempotent: boolean,
  options: RetryOptions,
  signal?: AbortSignal,
): Promise<T> {
  const maxAttempts = idempotent ? Math.max(1, options.maxAttempts ?? 5) : 1;
  const backoff = new Backoff(options);
  for (let attemptNumber = 1; ; attemptNumber++) {
    try {
      return await attempt();
    } catch (error) {
      const tickdError = error instanceof TickdError ? error : TickdError.fromServiceError(error as Error);
      const retryable = tickdError.code === Status.UNAVAILABLE && attemptNumber < maxAttempts;
      if (!retryable || signal?.aborted) throw tickdError;
      await sleep(backoff.nextDelayMs(), signal);
      if (signal?.aborted) throw tickdError;
    }
  }
}
