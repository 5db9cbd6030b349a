/**
 * Tracing with OpenTelemetry, when the application has `@opentelemetry/api` installed (an
 * optional peer dependency, loaded at the first use); without it, both functions do nothing.
 *
 * The trace context travels through the global propagator of `@opentelemetry/api`: the SDK's
 * `NodeTracerProvider.register()` installs W3C trace context and baggage, which is what tickd
 * stores and returns.
 */
import type * as Otel from "@opentelemetry/api";
import type { Metadata } from "@grpc/grpc-js";
import type { Expiration } from "./gen/tickd/v1/tickd";

/** The instrumentation scope of the handler spans. */
export const TRACER_NAME = "tickd";
const KEYS = ["traceparent", "tracestate", "baggage"] as const;

let loaded: typeof Otel | null | undefined;

/** `@opentelemetry/api`, or null when the application does not have it. */
function otelApi(): typeof Otel | null {
  if (loaded === undefined) {
    try {
      loaded = require("@opentelemetry/api") as typeof Otel;
    } catch {
      loaded = null;
    }
  }
  return loaded;
}

/** The metadata with the active span's trace context added (the same, with none valid). */
export function withTraceContext(metadata: Metadata): Metadata {
  const otel = otelApi();
  if (otel === null) return metadata;
  const active = otel.context.active();
  const span = otel.trace.getSpanContext(active);
  if (span === undefined || !otel.trace.isSpanContextValid(span)) return metadata;
  const carrier: Record<string, string> = {};
  otel.propagation.inject(active, carrier);
  for (const key of KEYS) if (carrier[key]) metadata.set(key, carrier[key]);
  return metadata;
}

/**
 * Runs a handler inside the CONSUMER span `tickd.expiration <namespace>`: on attempt 1 a
 * child of the registering call's span (the expiration's `traceContext`), on later attempts
 * a span of the active context with a link to it. The carried baggage is active on every
 * attempt. A handler that throws marks the span failed.
 */
export function runInHandlerSpan<T>(expiration: Expiration, namespace: string, run: () => Promise<T>): Promise<T> {
  const otel = otelApi();
  if (otel === null) return run();
  const carried = expiration.traceContext;
  const registering = carried?.traceparent
    ? otel.propagation.extract(otel.ROOT_CONTEXT, {
        traceparent: carried.traceparent,
        tracestate: carried.tracestate,
        baggage: carried.baggage,
      })
    : undefined;
  const first = expiration.attempt <= 1;
  const parent =
    first && registering !== undefined
      ? registering
      : otel.propagation.extract(otel.context.active(), carried?.baggage ? { baggage: carried.baggage } : {});
  const linked = registering === undefined || first ? undefined : otel.trace.getSpanContext(registering);
  const links = linked !== undefined && otel.trace.isSpanContextValid(linked) ? [{ context: linked }] : [];
  const options: Otel.SpanOptions = {
    kind: otel.SpanKind.CONSUMER,
    links,
    attributes: {
      "messaging.system": "tickd",
      "tickd.namespace": namespace,
      "tickd.timer.id": expiration.timer?.id ?? "",
      "tickd.timer.key": expiration.timer?.key ?? "",
      "tickd.attempt": expiration.attempt,
      "tickd.delivery.id": expiration.deliveryId,
    },
  };
  const tracer = otel.trace.getTracer(TRACER_NAME);
  return tracer.startActiveSpan(`tickd.expiration ${namespace}`, options, parent, async (span) => {
    try {
      return await run();
    } catch (error) {
      span.recordException(error instanceof Error ? error : String(error));
      span.setStatus({ code: otel.SpanStatusCode.ERROR, message: error instanceof Error ? error.message : String(error) });
      throw error;
    } finally {
      span.end();
    }
  });
}
