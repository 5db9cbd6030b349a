import assert from "node:assert/strict";
import { test } from "node:test";
import { context, propagation, SpanKind, SpanStatusCode, trace } from "@opentelemetry/api";
import type { SpanContext } from "@opentelemetry/api";
import { InMemorySpanExporter, NodeTracerProvider, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-node";
import type { ReadableSpan } from "@opentelemetry/sdk-trace-node";
import { Subscriber } from "@tickd/client";
import type { Expiration } from "@tickd/client";
import { clientFor, QUICK_RECONNECT } from "./support/clients";
import { TickdServer } from "./support/tickd-server";
import { Condition } from "./support/waiting";

// The SDK as an application installs it: the global tracer provider, AsyncLocalStorage
// context and the W3C trace context and baggage propagators (register()).
const exporter = new InMemorySpanExporter();
new NodeTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }).register();
const tracer = trace.getTracer("tickd-tests");

interface Handled {
  key: string;
  attempt: number;
  carried: boolean;
  span: SpanContext | undefined;
  order: string | undefined;
}

function handlerSpans(namespace: string, key: string): Map<number, ReadableSpan> {
  const spans = new Map<number, ReadableSpan>();
  for (const span of exporter.getFinishedSpans()) {
    if (span.name === `tickd.expiration ${namespace}` && span.attributes["tickd.timer.key"] === key) {
      spans.set(Number(span.attributes["tickd.attempt"]), span);
    }
  }
  return spans;
}

test("the handler span continues the registering trace across a SIGKILL restart; a redelivery links to it", async () => {
  const server = await TickdServer.start(["--sync", "always"]);
  const client = clientFor(server);
  const namespace = "tracing";
  const seen: Handled[] = [];
  const progress = new Condition();
  let subscriber: Subscriber | undefined;
  try {
    await client.register({ namespace, key: "untraced", delayMs: 1_000 }); // no active span: nothing sent
    const withBaggage = propagation.setBaggage(context.active(), propagation.createBaggage({ order: { value: "42" } }));
    const registered = await context.with(withBaggage, () =>
      tracer.startActiveSpan("register", async (span) => {
        await client.register({ namespace, key: "traced", delayMs: 1_000 });
        span.end();
        return span.spanContext();
      }),
    );
    await server.kill(); // before either fires
    await server.restart();

    const acknowledged = new Set<string>();
    subscriber = new Subscriber(client, {
      namespace,
      ackTimeoutMs: 1_000,
      reconnect: QUICK_RECONNECT,
      handler: (expiration: Expiration) => {
        seen.push({
          key: expiration.timer!.key,
          attempt: expiration.attempt,
          carried: expiration.traceContext !== undefined,
          span: trace.getActiveSpan()?.spanContext(),
          order: propagation.getActiveBaggage()?.getEntry("order")?.value,
        });
        progress.notify();
        if (expiration.timer!.key === "traced" && expiration.attempt === 1) throw new Error("fail attempt 1: it comes again");
      },
    });
    subscriber.on("handlerError", () => undefined);
    subscriber.on("acked", (expiration, response) => {
      if (response.acknowledged === 1) acknowledged.add(expiration.timer!.key);
      progress.notify();
    });
    await subscriber.start();
    await progress.until("the traced timer's attempt 2 and the untraced timer acknowledged", () =>
      acknowledged.has("traced") && acknowledged.has("untraced"),
    );
    await subscriber.stop();

    const traced = seen.filter((entry) => entry.key === "traced");
    assert.deepEqual(traced.map((entry) => [entry.attempt, entry.carried, entry.order]), [[1, true, "42"], [2, true, "42"]]);
    assert.deepEqual(seen.filter((entry) => entry.key === "untraced").map((entry) => entry.carried), [false]);

    const spans = handlerSpans(namespace, "traced");
    const first = spans.get(1)!;
    const second = spans.get(2)!;
    assert.equal(first.kind, SpanKind.CONSUMER);
    assert.equal(first.spanContext().traceId, registered.traceId, "attempt 1 is in the registering trace");
    assert.equal(first.parentSpanContext?.spanId, registered.spanId, "attempt 1 is a child of the registering span");
    assert.equal(first.status.code, SpanStatusCode.ERROR);
    assert.equal(traced[0]!.span?.spanId, first.spanContext().spanId, "the handler ran inside its span");
    assert.equal(first.attributes["tickd.namespace"], namespace);
    assert.equal(first.attributes["tickd.attempt"], 1);
    assert.ok(first.attributes["tickd.timer.id"] && first.attributes["tickd.delivery.id"]);

    assert.equal(second.parentSpanContext, undefined, "attempt 2 has no parent, only a link");
    assert.notEqual(second.spanContext().traceId, registered.traceId);
    assert.deepEqual(
      second.links.map((link) => [link.context.traceId, link.context.spanId]),
      [[registered.traceId, registered.spanId]],
    );
    const untraced = handlerSpans(namespace, "untraced").get(1)!;
    assert.equal(untraced.parentSpanContext, undefined);
    assert.deepEqual(untraced.links, []);
  } finally {
    await subscriber?.stop();
    client.close();
    await server.dispose();
  }
});
