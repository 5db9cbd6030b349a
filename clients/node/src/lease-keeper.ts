import { EventEmitter } from "node:events";
import type { ClientDuplexStream } from "@grpc/grpc-js";
import type { BackoffOptions } from "./backoff";
import type { TickdClient } from "./client";
import { durationToMillis, optionalDuration } from "./durations";
import { Status, TickdError } from "./errors";
import type { KeepAliveRequest, KeepAliveResponse, TimerRef } from "./gen/tickd/v1/tickd";
import { ReconnectLoop, streamEnd } from "./reconnect-loop";
import type { StreamSession } from "./reconnect-loop";
import { describeTarget, toTimerRef, toTimerTarget } from "./timer-inputs";
import type { TimerTarget } from "./timer-inputs";

/** A lease the keeper heartbeats, as the caller sees it. */
export interface Lease {
  /** The timer, by id or key, with its namespace. */
  readonly reference: TimerRef;
  /**
   * The timer's id: as given, or the first one tickd answered with for a key. It never changes:
   * once known, heartbeats name the lease by this id, and an answer with another id means the
   * key now names someone else's timer (this lease was lost).
   */
  readonly id: string | undefined;
  /** The deadline after the last heartbeat answered (undefined before the first). */
  readonly deadline: Date | undefined;
}

export interface LeaseKeeperOptions {
  /** Heartbeat after this fraction of the time left to the deadline. Default 1/3. */
  heartbeatFraction?: number;
  /** Retry a heartbeat that failed with anything but NOT_FOUND after this long (ms). Default 1000. */
  heartbeatRetryMs?: number;
  /** Back-off between reconnects. */
  reconnect?: BackoffOptions;
}

/** The events a LeaseKeeper emits, with their arguments. */
export interface LeaseKeeperEvents {
  /** The KeepAlive stream is open (after start() and after every reconnect). */
  connected: [];
  /** The stream broke; a reconnect follows after a back-off, then every lease is heartbeaten at once. */
  disconnected: [error: TickdError];
  /** A permanent error (e.g. UNAUTHENTICATED): the keeper stopped. */
  failed: [error: TickdError];
  /** A heartbeat was answered; `lease.deadline` is the new deadline. */
  heartbeat: [lease: Lease];
  /**
   * tickd no longer knows the lease (NOT_FOUND: it expired, or is unknown after a reconnect, or
   * its key now names another timer, registered anew by someone else). No more heartbeats for it.
   */
  lost: [lease: Lease, error: TickdError];
  /** A heartbeat failed otherwise; it is retried after `heartbeatRetryMs`. */
  heartbeatError: [lease: Lease, error: TickdError];
}

/** The keeper's own record of a lease (mutable; callers see it as a read-only Lease). */
class KeptLease implements Lease {
  id: string | undefined;
  deadline: Date | undefined;
  nextHeartbeat: NodeJS.Timeout | undefined;
  /** The last interval between heartbeats (ms), once known. */
  intervalMs: number | undefined;
  /** The lease's ttl: as given to add(), or as tickd reports it (see learnTtl). */
  knownTtlMs: number | undefined;
  constructor(
    readonly reference: TimerRef,
    readonly ttlMs: number | undefined,
  ) {
    this.id = reference.id;
    this.knownTtlMs = ttlMs;
  }
}

const DEFAULT_HEARTBEAT_FRACTION = 1 / 3;
const DEFAULT_HEARTBEAT_RETRY_MS = 1000;
/** No heartbeat sooner than this after the previous one, whatever the ttl. */
const MINIMUM_HEARTBEAT_INTERVAL_MS = 20;

/**
 * Keeps a set of leases alive over ONE KeepAlive stream. Each lease is heartbeaten after a
 * third of the time left to its deadline (so about every ttl/3); leases can be added and
 * removed while it runs. When the stream breaks, the keeper reconnects with back-off and
 * heartbeats every lease at once. A lease tickd answers NOT_FOUND for is reported `lost` and
 * dropped: the keeper never re-creates it (the work it guarded may have been taken over).
 */
export class LeaseKeeper extends EventEmitter<LeaseKeeperEvents> {
  private readonly leasesByName = new Map<string, KeptLease>();
  private readonly heartbeatsInFlight = new Map<string, KeptLease>();
  private readonly loop: ReconnectLoop;
  private readonly heartbeatFraction: number;
  private readonly heartbeatRetryMs: number;
  private stream: ClientDuplexStream<KeepAliveRequest, KeepAliveResponse> | undefined;
  private sequence = 0n;

  constructor(
    private readonly client: TickdClient,
    options: LeaseKeeperOptions = {},
  ) {
    super();
    this.heartbeatFraction = options.heartbeatFraction ?? DEFAULT_HEARTBEAT_FRACTION;
    this.heartbeatRetryMs = options.heartbeatRetryMs ?? DEFAULT_HEARTBEAT_RETRY_MS;
    this.loop = new ReconnectLoop((session) => this.runStream(session), options.reconnect ?? {}, {
      established: () => this.emit("connected"),
      disconnected: (error) => this.emit("disconnected", error),
      failed: (error) => this.emit("failed", error),
    });
  }

  /** The leases being kept. */
  get leases(): Lease[] {
    return [...this.leasesByName.values()];
  }

  /**
   * Starts keeping `target` alive (heartbeating it at once when connected). `ttlMs`, when
   * given, is sent with each heartbeat and becomes the lease's ttl; otherwise its own is used.
   */
  add(target: TimerTarget, ttlMs?: number): Lease {
    const reference = toTimerRef(target, this.client.namespace);
    const name = leaseName(reference);
    const existing = this.leasesByName.get(name);
    if (existing !== undefined) return existing;
    const lease = new KeptLease(reference, ttlMs);
    this.leasesByName.set(name, lease);
    if (ttlMs === undefined) void this.learnTtl(lease);
    this.heartbeat(lease);
    return lease;
  }

  /** Stops heartbeating `target` (it then expires after its ttl). False if it was not kept. */
  remove(target: TimerTarget): boolean {
    const name = leaseName(toTimerRef(target, this.client.namespace));
    const lease = this.leasesByName.get(name);
    if (lease === undefined) return false;
    clearTimeout(lease.nextHeartbeat);
    this.leasesByName.delete(name);
    return true;
  }

  /**
   * Opens the KeepAlive stream (reconnecting until stop()). Resolves once it is open (leases
   * added before are heartbeaten then); rejects on a permanent error such as UNAUTHENTICATED.
   */
  start(): Promise<void> {
    return this.loop.start();
  }

  /** Stops heartbeating, closes the stream; resolves once it is closed. The leases then run out. */
  async stop(): Promise<void> {
    for (const lease of this.leasesByName.values()) clearTimeout(lease.nextHeartbeat);
    await this.loop.stop();
  }

  private runStream(session: StreamSession): Promise<TickdError> {
    const stream = this.client.openKeepAliveStream();
    this.stream = stream;
    stream.on("metadata", () => session.established());
    stream.on("data", (answer: KeepAliveResponse) => this.onAnswer(answer));
    for (const lease of this.leasesByName.values()) this.heartbeat(lease);
    return streamEnd(stream, session.signal).then((error) => {
      this.stream = undefined;
      this.heartbeatsInFlight.clear();
      for (const lease of this.leasesByName.values()) clearTimeout(lease.nextHeartbeat);
      return error;
    });
  }

  /** Sends one heartbeat for `lease` if the stream is open; otherwise the next stream will. */
  private heartbeat(lease: KeptLease): void {
    clearTimeout(lease.nextHeartbeat);
    lease.nextHeartbeat = undefined;
    if (this.stream === undefined || this.loop.stopping || !this.isKept(lease)) return;
    this.sequence += 1n;
    const sequence = this.sequence.toString();
    this.heartbeatsInFlight.set(sequence, lease);
    this.stream.write({ timer: heartbeatTarget(lease), ttl: optionalDuration(lease.ttlMs), sequence });
    // Should the answer never come while the stream stays up, heartbeat again anyway (an
    // answer cancels this and schedules the next one from the new deadline).
    this.scheduleHeartbeat(lease, lease.intervalMs ?? this.heartbeatRetryMs);
  }

  private onAnswer(answer: KeepAliveResponse): void {
    const lease = this.heartbeatsInFlight.get(answer.sequence);
    this.heartbeatsInFlight.delete(answer.sequence);
    if (lease === undefined || !this.isKept(lease)) return;
    if (answer.error !== undefined && answer.error.code !== Status.OK) {
      const error = TickdError.fromItemError(answer.error);
      if (error.code === Status.NOT_FOUND) {
        this.loseLease(lease, error);
      } else {
        this.emit("heartbeatError", lease, error);
        this.scheduleHeartbeat(lease, this.heartbeatRetryMs);
      }
      return;
    }
    if (lease.id !== undefined && answer.id !== "" && answer.id !== lease.id) {
      // Only possible before the id was learned (heartbeats name the id afterwards), e.g. an
      // answer to a heartbeat by key sent before the first answer: never adopt another timer.
      this.loseLease(lease, anotherTimerError(lease, answer.id));
      return;
    }
    lease.id ??= answer.id || undefined;
    lease.deadline = answer.deadline;
    const timeLeftMs = (answer.deadline?.getTime() ?? Date.now()) - Date.now();
    lease.intervalMs = this.heartbeatFraction * heartbeatPeriod(timeLeftMs, lease.knownTtlMs, this.heartbeatRetryMs);
    this.scheduleHeartbeat(lease, lease.intervalMs);
    this.emit("heartbeat", lease);
  }

  /**
   * Asks tickd for the lease's ttl (one Get), so that heartbeats keep pace with the ttl even
   * when this machine's clock is behind tickd's (the time left to a deadline would then look
   * longer than it is). A failure is left to the heartbeats to report.
   */
  private async learnTtl(lease: KeptLease): Promise<void> {
    try {
      const timer = await this.client.get(toTimerTarget(lease.reference));
      lease.knownTtlMs ??= durationToMillis(timer.ttl);
      if (lease.id === undefined) lease.id = timer.id || undefined;
      else if (timer.id !== "" && timer.id !== lease.id && this.isKept(lease)) {
        this.loseLease(lease, anotherTimerError(lease, timer.id));
      }
    } catch {
      // NOT_FOUND comes back as a lost lease from the first heartbeat; anything else: the
      // keeper goes by the deadlines alone.
    }
  }

  /** Reports `lease` lost once, and stops heartbeating it. */
  private loseLease(lease: KeptLease, error: TickdError): void {
    clearTimeout(lease.nextHeartbeat);
    lease.nextHeartbeat = undefined;
    this.leasesByName.delete(leaseName(lease.reference));
    this.emit("lost", lease, error);
  }

  /** False once the lease was removed or lost (a timer or an answer may still name it). */
  private isKept(lease: KeptLease): boolean {
    return this.leasesByName.get(leaseName(lease.reference)) === lease;
  }

  private scheduleHeartbeat(lease: KeptLease, afterMs: number): void {
    clearTimeout(lease.nextHeartbeat);
    lease.nextHeartbeat = setTimeout(() => this.heartbeat(lease), Math.max(afterMs, MINIMUM_HEARTBEAT_INTERVAL_MS));
  }
}

/**
 * The time to spread heartbeats over: the time left to the deadline (the ttl, just after a
 * heartbeat), but never more than the ttl (a clock behind tickd's makes the time left look
 * longer); the ttl when the deadline looks past (a clock ahead); `fallbackMs` knowing neither.
 */
function heartbeatPeriod(timeLeftMs: number, ttlMs: number | undefined, fallbackMs: number): number {
  if (ttlMs === undefined || ttlMs <= 0) return timeLeftMs > 0 ? timeLeftMs : fallbackMs;
  return timeLeftMs > 0 ? Math.min(timeLeftMs, ttlMs) : ttlMs;
}

/**
 * What a heartbeat names: the lease's id once known, so that a key registered anew by another
 * holder (after this lease expired) is answered NOT_FOUND instead of having its timer kept alive.
 */
function heartbeatTarget(lease: KeptLease): TimerRef {
  return lease.id === undefined ? lease.reference : { namespace: lease.reference.namespace, id: lease.id };
}

function anotherTimerError(lease: KeptLease, otherId: string): TickdError {
  return new TickdError(
    Status.NOT_FOUND,
    `${describeTarget(lease.reference)} now names timer ${otherId}, not the lease's timer ${lease.id}: the lease was lost and the key registered anew`,
  );
}

/** One key per lease: its namespace and its id or key. */
function leaseName(reference: TimerRef): string {
  return `${reference.namespace}\u0000${describeTarget(reference)}`;
}
