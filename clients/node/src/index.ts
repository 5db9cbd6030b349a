/**
 * @tickd/client: a TypeScript client for tickd over @grpc/grpc-js.
 *
 * TickdClient wraps every call of the Timers and the Sinks services; Subscriber consumes expirations;
 * LeaseKeeper heartbeats leases. The generated message types are re-exported as they are
 * (and the whole generated modules are importable as "@tickd/client/gen" and
 * "@tickd/client/gen/sinks").
 */
export { TickdClient } from "./client";
export type { Registration, BatchResult, RescheduleOptions, PendingOptions } from "./client";
export { Subscriber } from "./subscriber";
export type { SubscriberOptions, SubscriberEvents, ExpirationHandler, ExpirationContext } from "./subscriber";
export { LeaseKeeper } from "./lease-keeper";
export type { Lease, LeaseKeeperOptions, LeaseKeeperEvents } from "./lease-keeper";
export { TickdError, Status, statusName } from "./errors";
export type { TickdClientOptions, TlsOptions, RetryOptions, CallOptions } from "./options";
export type { BackoffOptions } from "./backoff";
export type { TimerOptions, TimerTarget } from "./timer-inputs";
export { millisToDuration, durationToMillis } from "./durations";
export type { Timer } from "./timer";
export type {
  Expiration,
  AckResponse,
  PendingResponse,
  RedriveResponse,
  TimerRef,
  TimerSpec,
  TraceContext,
} from "./gen/tickd/v1/tickd";
export type { SetSinkOptions, SinkChange, SinkStatusScope } from "./sinks";
export { SinkOrigin, SinkCircuit } from "./gen/tickd/v1/sinks";
export type { SinkView, SinkState } from "./gen/tickd/v1/sinks";
export type { Duration } from "./gen/google/protobuf/duration";
