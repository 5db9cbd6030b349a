import type { ChannelOptions, ClientOptions } from "@grpc/grpc-js";
import type { BackoffOptions } from "./backoff";

/** TLS settings; PEM contents (Buffers or strings), not file names, so callers choose how to load them. */
export interface TlsOptions {
  /** The CA that signed tickd's certificate; omitted: the system's trusted roots. */
  ca?: Buffer | string;
  /** A client certificate and its key, for a tickd started with --tls-client-ca. */
  cert?: Buffer | string;
  key?: Buffer | string;
  /** The name to check tickd's certificate against, when it differs from the address's host. */
  serverName?: string;
}

/** Which calls are retried on UNAVAILABLE, and how patiently. */
export interface RetryOptions extends BackoffOptions {
  /** Attempts in all, the first included; 1 disables retries. Default 5. */
  maxAttempts?: number;
}

export interface TickdClientOptions {
  /** "host:port" of tickd, e.g. "127.0.0.1:50051". */
  address: string;
  /** The namespace used when a call does not name one. Default "" (tickd's "default"). */
  namespace?: string;
  /** Sent as `authorization: Bearer TOKEN` on every call (tickd's --auth-token-file). */
  token?: string;
  /** Connect with TLS; `true` trusts the system's roots. Omitted: plaintext. */
  tls?: TlsOptions | true;
  /**
   * Deadline of each unary call (ms), retries and their back-off included: each attempt gets
   * the time left, and none starts after it passed. Default 10000. Streams have none.
   */
  deadlineMs?: number;
  /** Retries of idempotent calls on UNAVAILABLE. */
  retry?: RetryOptions;
  /**
   * Passed to the grpc-js client as they are (after this package's defaults); grpc-js's
   * `interceptors` go here too (e.g. to log or count every attempt of a call).
   */
  channelOptions?: ClientOptions;
}

/** What each call may override. */
export interface CallOptions {
  /** This call's deadline (ms, retries included), instead of the client's `deadlineMs`. */
  deadlineMs?: number;
  /** An AbortSignal that cancels the call (and its retries). */
  signal?: AbortSignal;
}

/**
 * Channel defaults. grpc-js backs off reconnecting up to 120 s by default; after a tickd
 * restart that would keep a client away for minutes, so the cap here is a few seconds.
 */
export const DEFAULT_CHANNEL_OPTIONS: ChannelOptions = {
  "grpc.initial_reconnect_backoff_ms": 200,
  "grpc.max_reconnect_backoff_ms": 3000,
  // Registrations answer without payloads and pages stay under 4 MiB, but a Get of a timer
  // with a large payload (tickd accepts requests up to 16 MiB) must still be readable.
  "grpc.max_receive_message_length": 32 * 1024 * 1024,
  "grpc.max_send_message_length": 16 * 1024 * 1024,
  // HTTP/2 PINGs on a quiet connection, as tickd sends its own (30 s, answered within 20 s):
  // a Subscribe or KeepAlive stream over a connection that died silently (a peer gone without
  // a FIN) fails and reconnects instead of waiting forever.
  "grpc.keepalive_time_ms": 30_000,
  "grpc.keepalive_timeout_ms": 20_000,
};
