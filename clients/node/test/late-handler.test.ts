import assert from "node:assert/strict";
import { test } from "node:test";
import { Subscriber } from "@tickd/client";
import type { AckResponse, Expiration, ExpirationContext } from "@tickd/client";
import { clientFor, QUICK_RECONNECT } from "./support/clients";
import { TickdServer } from "./support/tickd-server";
import { Condition, Gate, pollUntil } from "./support/waiting";

/**
 * A handler still running when tickd is restarted (same data dir) finishes once the subscriber
 * has reconnected: its ack is not sent (`ackNotSent`, never `acked`), its expiration comes
 * again with attempt 2 or more, and no other expiration is settled in its place: those
 * registered after the restart, held in their handlers meanwhile, are each acknowledged by
 * their own ack.
 */
for (const signal of ["SIGTERM", "SIGKILL"] as const) {
  test(`a handler finishing after a ${signal} restart gets no ack, and its expiration comes again`, async () => {
    const server = await TickdServer.start(["--sync", "always"]);
    const client = clientFor(server);
    const namespace = `late-handler-${signal}`;
    const delivered: Array<{ expiration: Expiration; context: ExpirationContext }> = [];
    const acked: Array<{ expiration: Expiration; response: AckResponse }> = [];
    const notSent: Expiration[] = [];
    const progress = new Condition();
    const releaseHeld = new Gate();
    const releaseOthers = new Gate();
    const of = (key: string) => delivered.filter(({ expiration }) => expiration.timer!.key === key);
    const acksOf = (expiration: Expiration) => acked.filter((ack) => ack.expiration === expiration);
    const subscriber = new Subscriber(client, {
      namespace,
      maxInFlight: 8,
      ackTimeoutMs: 60_000,
      reconnect: QUICK_RECONNECT,
      handler: async (expiration, context) => {
        const firstOfHeld = expiration.timer!.key === "held" && of("held").length === 0;
        delivered.push({ expiration, context });
        progress.notify();
        await (firstOfHeld ? releaseHeld : releaseOthers).opened;
      },
    });
    subscriber.on("acked", (expiration, response) => {
      acked.push({ expiration, response });
      progress.notify();
    });
    subscriber.on("ackNotSent", (expiration) => {
      notSent.push(expiration);
      progress.notify();
    });
    await subscriber.start();
    try {
      await client.register({ namespace, key: "held", delayMs: 0 });
      await progress.until("the held handler to start", () => of("held").length === 1);
      const first = of("held")[0]!;
      assert.equal(first.expiration.attempt, 1);
      assert.equal(first.context.streamEnded, false);

      if (signal === "SIGKILL") await server.kill();
      await server.restart();
      const after = ["after-1", "after-2", "after-3"];
      await client.registerBatch(after.map((key) => ({ namespace, key, delayMs: 0 })));
      // The held expiration again (on the new stream: the subscriber reconnected) and the new
      // ones, all in their handlers, each awaiting its own ack.
      await progress.until("the held expiration again and every later one", () =>
        of("held").length >= 2 && after.every((key) => of(key).length > 0),
      );
      assert.equal(first.context.streamEnded, true);

      releaseHeld.open();
      await progress.until("the late handler's outcome", () => notSent.length > 0 || acksOf(first.expiration).length > 0);
      assert.deepEqual(acksOf(first.expiration), [], "the late handler's ack was sent");
      assert.deepEqual(notSent, [first.expiration]);

      releaseOthers.open();
      const others = [of("held")[1]!, ...after.map((key) => of(key)[0]!)];
      await progress.until("the acks of the held expiration's second delivery and of the later ones", () =>
        others.every(({ expiration }) => acksOf(expiration).length > 0),
      );
      for (const { expiration } of others) {
        assert.deepEqual(
          acksOf(expiration).map(({ response }) => response),
          [{ acknowledged: 1, unknown: [] }],
          `${expiration.timer!.key} (attempt ${expiration.attempt}) acknowledged by its own ack`,
        );
      }
      await pollUntil(
        "nothing pending or dead in the namespace",
        () => client.pendingCount(namespace),
        (count) => count.count === "0" && count.deadCount === "0",
      );
      const again = others[0]!.expiration;
      assert.ok(again.attempt >= 2, `attempts survive a ${signal} restart: the held expiration came again with attempt ${again.attempt}`);
      assert.notEqual(again.deliveryId, first.expiration.deliveryId, "a delivery id repeated across the restart");
    } finally {
      releaseHeld.open();
      releaseOthers.open();
      await subscriber.stop();
      client.close();
      await server.dispose();
    }
  });
}
