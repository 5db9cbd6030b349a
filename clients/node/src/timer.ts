import { durationToMillis } from "./durations";
import type { Timer as WireTimer } from "./gen/tickd/v1/tickd";

/**
 * A timer as the client returns it: the message tickd sent, with its durations also in
 * milliseconds, as every duration of this client's API is (the raw google.protobuf.Duration
 * fields `remaining`, `ttl` and `repeat` stay beside them). The client's calls fill the
 * milliseconds in (`get`, `touch`, `reschedule`, `register`, `pendingTimers`); they are
 * optional so that an expiration's `timer` (the message as it came) is a Timer too.
 */
export interface Timer extends WireTimer {
  /** Time left until the deadline, in milliseconds (undefined where tickd sends none). */
  remainingMs?: number;
  /** A lease's ttl in milliseconds (undefined: not a lease). */
  ttlMs?: number;
  /** A repeating timer's interval in milliseconds (undefined: it does not repeat). */
  repeatMs?: number;
}

export function withMillis(timer: WireTimer): Timer {
  return {
    ...timer,
    remainingMs: durationToMillis(timer.remaining),
    ttlMs: durationToMillis(timer.ttl),
    repeatMs: durationToMillis(timer.repeat),
  };
}
