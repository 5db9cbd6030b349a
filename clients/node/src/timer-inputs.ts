import { optionalDuration } from "./durations";
import type { TimerRef, TimerSpec } from "./gen/tickd/v1/tickd";

/** What to register: one timer. Durations are milliseconds. */
export interface TimerOptions {
  /** Default: the client's namespace. */
  namespace?: string;
  /**
   * Unique within the namespace: registering a known key returns the existing timer, which
   * makes the registration safe to retry (and the client does retry it on UNAVAILABLE).
   */
  key?: string;
  /** Fire after this delay. Exclusive with `deadline`. */
  delayMs?: number;
  /** Fire at this time (a time in the past fires at once). */
  deadline?: Date;
  /** Handed to subscribers with the expiration; a string is sent as UTF-8. */
  payload?: Uint8Array | string;
  /** Re-arm every `repeatMs` after each firing, counted from the previous deadline. */
  repeatMs?: number;
  /** Makes the timer a lease: touch() and the LeaseKeeper push its deadline to now + ttl. */
  ttlMs?: number;
  /** A calendar schedule ("0 9 * * MON-FRI", 6 fields with seconds, or @daily ...). Exclusive with `repeatMs`. */
  cron?: string;
  /** The IANA time zone `cron` is read in (default UTC), e.g. "Europe/Berlin". */
  timeZone?: string;
  /** With a `key`: replace a pending timer under that key instead of returning it. */
  replace?: boolean;
}

/** Names one timer: its id (a string), or `{ id }` / `{ key }` with an optional namespace. */
export type TimerTarget = string | { id: string; namespace?: string } | { key: string; namespace?: string };

export function toPayloadBytes(payload: Uint8Array | string): Buffer {
  return typeof payload === "string" ? Buffer.from(payload, "utf8") : Buffer.from(payload);
}

export function toTimerSpec(options: TimerOptions, defaultNamespace: string): TimerSpec {
  return {
    namespace: options.namespace ?? defaultNamespace,
    key: options.key ?? "",
    delay: optionalDuration(options.delayMs),
    deadline: options.deadline,
    payload: options.payload === undefined ? Buffer.alloc(0) : toPayloadBytes(options.payload),
    repeat: optionalDuration(options.repeatMs),
    ttl: optionalDuration(options.ttlMs),
    cron: options.cron ?? "",
    timeZone: options.timeZone ?? "",
    replace: options.replace ?? false,
  };
}

export function toTimerRef(target: TimerTarget, defaultNamespace: string): TimerRef {
  if (typeof target === "string") return { namespace: defaultNamespace, id: target, key: undefined };
  const namespace = target.namespace ?? defaultNamespace;
  if ("id" in target) return { namespace, id: target.id, key: undefined };
  return { namespace, id: undefined, key: target.key };
}

/** The inverse of toTimerRef. */
export function toTimerTarget(reference: TimerRef): TimerTarget {
  const namespace = reference.namespace;
  return reference.id !== undefined ? { namespace, id: reference.id } : { namespace, key: reference.key ?? "" };
}

/** A short description for errors and events: "id 00a1" or "key order-42". */
export function describeTarget(reference: TimerRef): string {
  return reference.id !== undefined ? `id ${reference.id}` : `key ${reference.key ?? ""}`;
}
