import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Subscriber } from "@tickd/client";
import type { AckResponse, ExpirationContext, TickdClient } from "@tickd/client";
import { clientFor, QUICK_RECONNECT } from "./support/clients";
import { TickdServer } from "./support/tickd-server";
import { Condition, Gate, pollUntil } from "./support/waiting";

let server: TickdServer;
let client: TickdClient;

before(async () => {
  server = await TickdServer.start();
  client = clientFor(server);
});
after(async () => {
  client?.close();
  await server?.dispose();
});

test("no more handlers run at once than maxInFlight", async () => {
  const namespace = "concurrency";
  const limit = 3;
  const timers = 12;
  let running = 0;
  let mostAtOnce = 0;
  let acknowledged = 0;
  const progress = new Condition();
  // Each handler holds its slot until the limit is reached or every timer has arrived, so
  // that handlers overlap as much as the subscriber lets them.
  let received = 0;
  const subscriber = new Subscriber(client, {
    namespace,
    maxInFlight: limit,
    reconnect: QUICK_RECONNECT,
    handler: async () => {
      running += 1;
      received += 1;
      mostAtOnce = Math.max(mostAtOnce, running);
      progress.notify();
      await progress.until("the limit reached or every timer handed out", () => running >= limit || received >= timers);
      running -= 1;
    },
  });
  subscriber.on("acked", (_expiration, response) => {
    acknowledged += response.acknowledged;
    progress.notify();
  });
  await subscriber.start();
  try {
    await client.registerBatch(Array.from({ length: timers }, (_, index) => ({ namespace, key: `c-${index}`, delayMs: 0 })));
    await progress.until("every expiration acknowledged", () => acknowledged === timers);
    assert.ok(mostAtOnce <= limit, `at most ${limit} handlers at once, saw ${mostAtOnce}`);
    assert.equal(mostAtOnce, limit, "the handlers did overlap up to the limit");
  } finally {
    await subscriber.stop();
  }
  assert.deepEqual(await client.pendingCount(namespace), { count: "0", deadCount: "0" });
});

test("manual-ack mode leaves the ack to the handler; unacknowledged, the expiration comes again", async () => {
  const namespace = "manual-ack";
  const deliveries: ExpirationContext[] = [];
  const acks: AckResponse[] = [];
  const progress = new Condition();
  const subscriber = new Subscriber(client, {
    namespace,
    manualAck: true,
    ackTimeoutMs: 300,
    reconnect: QUICK_RECONNECT,
    handler: (_expiration, context) => {
      deliveries.push(context);
      progress.notify();
    },
  });
  subscriber.on("acked", (_expiration, response) => {
    acks.push(response);
    progress.notify();
  });
  await subscriber.start();
  try {
    const { timer } = await client.register({ namespace, key: "by-hand", delayMs: 0 });
    // The first delivery's handler returns without acking: tickd delivers it again.
    await progress.until("a second delivery", () => deliveries.length >= 2);
    assert.deepEqual(
      deliveries.slice(0, 2).map((delivery) => delivery.attempt),
      [1, 2],
    );
    assert.equal(acks.length, 0, "nothing is acknowledged automatically");
    const answer = await deliveries[1]!.ack();
    assert.equal(answer.acknowledged, 1);
    assert.deepEqual(answer.unknown, []);
    assert.equal(acks.length, 1);
    await pollUntil(
      "the expiration settled",
      () => client.pendingCount(namespace),
      (count) => count.count === "0" && count.deadCount === "0",
    );
    assert.equal((await client.cancel(timer.id)), false);
  } finally {
    await subscriber.stop();
  }
});

test("stop() waits for the handlers in flight and their acks, then the stream is closed", async () => {
  const namespace = "stopping";
  const handlerStarted = new Gate();
  const releaseHandler = new Gate();
  let handlerFinished = false;
  let acknowledged = 0;
  const subscriber = new Subscriber(client, {
    namespace,
    reconnect: QUICK_RECONNECT,
    handler: async () => {
      handlerStarted.open();
      await releaseHandler.opened;
      handlerFinished = true;
    },
  });
  subscriber.on("acked", (_expiration, response) => {
    acknowledged += response.acknowledged;
  });
  await subscriber.start();
  await client.register({ namespace, key: "slow", delayMs: 0 });
  await handlerStarted.opened;

  let stopped = false;
  const drainingFor: number[] = [];
  const drainingStarted = new Gate();
  subscriber.on("draining", (handlersInFlight) => {
    drainingFor.push(handlersInFlight);
    drainingStarted.open();
  });
  const stopping = subscriber.stop().then(() => {
    stopped = true;
  });
  // stop() began and is waiting for the held handler: it says so, and while the handler is
  // held it neither resolves nor acks, however many turns of the event loop pass.
  await drainingStarted.opened;
  assert.deepEqual(drainingFor, [1], "stop() waits for the one handler in flight");
  for (let turn = 0; turn < 20; turn++) await new Promise((resolve) => setImmediate(resolve));
  assert.equal(stopped, false, "stop() is still pending while the handler is held");
  assert.equal(subscriber.handlersInFlight, 1);
  assert.equal(acknowledged, 0, "nothing acknowledged while the handler is held");
  releaseHandler.open();
  await stopping;
  assert.equal(handlerFinished, true);
  assert.equal(acknowledged, 1, "the handler's expiration was acknowledged before stop() returned");
  assert.equal(subscriber.handlersInFlight, 0);

  // With the subscriber gone, a new expiration waits for the next subscriber.
  await client.register({ namespace, key: "later", delayMs: 0 });
  await pollUntil("the expiration to fire", () => client.pendingCount(namespace), (count) => count.count === "0");
  assert.equal(acknowledged, 1);
});
