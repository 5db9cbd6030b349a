import type { SinkState, SinkView } from "./gen/tickd/v1/sinks";
import { Status, TickdError } from "./errors";

/** What SetSink is given beside the URL. */
export interface SetSinkOptions {
  /** Default: the client's namespace. */
  namespace?: string;
  /** The most pushes a second, "50/s" or "50/s,burst=10"; omitted or "" for no limit. */
  rate?: string;
  /**
   * Standard Webhooks secrets (`whsec_<base64>`, 1 to 4) every push is signed with. Omitted,
   * the sink keeps the secrets it was given before, so that a new rate does not stop signing.
   */
  secrets?: readonly string[];
  /** Forgets the secrets given before (tickd refuses it together with `secrets`). */
  clearSecrets?: boolean;
}

/** A sink after SetSink, PauseSink or ResumeSink. */
export interface SinkChange {
  sink: SinkView;
  /** False when the call found the sink as it asked already (as a retried call does). */
  changed: boolean;
}

/** SinkStatus's scope: one namespace (default: the client's), or every sink the token may see. */
export type SinkStatusScope = { namespace?: string; all?: false } | { namespace?: undefined; all: true };

export function requireSink(sink: SinkView | undefined): SinkView {
  if (sink === undefined) throw new TickdError(Status.INTERNAL, "tickd answered without the sink");
  return sink;
}

export function toSinkChange(response: { sink?: SinkView | undefined; changed: boolean }): SinkChange {
  return { sink: requireSink(response.sink), changed: response.changed };
}

export type { SinkState, SinkView };
