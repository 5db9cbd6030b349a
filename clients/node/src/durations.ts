import type { Duration } from "./gen/google/protobuf/duration";

/**
 * Durations cross the client's API as milliseconds (plain numbers, as setTimeout takes them)
 * and cross the wire as google.protobuf.Duration, whose seconds are an int64 carried as a string.
 */
export function millisToDuration(milliseconds: number): Duration {
  if (!Number.isFinite(milliseconds) || milliseconds < 0) {
    throw new RangeError(`a duration must be a finite number of milliseconds >= 0, got ${milliseconds}`);
  }
  const wholeMilliseconds = Math.floor(milliseconds);
  const seconds = Math.floor(wholeMilliseconds / 1000);
  const nanos = Math.round((milliseconds - seconds * 1000) * 1_000_000);
  return { seconds: String(seconds), nanos };
}

/** The inverse of millisToDuration; undefined stays undefined (an unset field). */
export function durationToMillis(duration: Duration | undefined): number | undefined {
  if (duration === undefined) return undefined;
  return Number(duration.seconds) * 1000 + duration.nanos / 1_000_000;
}

/** For optional inputs: an unset duration stays unset on the wire. */
export function optionalDuration(milliseconds: number | undefined): Duration | undefined {
  return milliseconds === undefined ? undefined : millisToDuration(milliseconds);
}
