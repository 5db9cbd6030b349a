import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Status, Subscriber, TickdClient, TickdError, durationToMillis } from "@tickd/client";
import type { Expiration, PendingOptions } from "@tickd/client";
import { clientFor, QUICK_RECONNECT } from "./support/clients";
import { TickdServer } from "./support/tickd-server";
import { Condition, pollUntil } from "./support/waiting";

const HOUR_MS = 3_600_000;

/** Counts the Pending pages requested, to show that pendingTimers() fetches lazily. */
class PageCountingClient extends TickdClient {
  pagesRequested = 0;
  override pendingPage(page: PendingOptions & { pageToken?: string; includeDead?: boolean }) {
    this.pagesRequested += 1;
    return super.pendingPage(page);
  }
}

async function rejection(promise: Promise<unknown>): Promise<TickdError> {
  try {
    await promise;
  } catch (error) {
    assert.ok(error instanceof TickdError, `expected a TickdError, got ${String(error)}`);
    return error;
  }
  assert.fail("expected the call to fail");
}

describe("the whole API against a real tickd", () => {
  let server: TickdServer;
  let client: TickdClient;

  before(async () => {
    // Two delivery attempts, so that an expiration whose handler fails goes dead quickly.
    server = await TickdServer.start(["--max-attempts", "2"]);
    client = clientFor(server, { namespace: "api" });
  });
  after(async () => {
    client?.close();
    await server?.dispose();
  });

  test("a batch with one invalid item: that item fails with code and message, the others register", async () => {
    const results = await client.registerBatch([
      { key: "batch-1", delayMs: HOUR_MS },
      { key: "batch-2", delayMs: HOUR_MS, cron: "not a cron" },
      { key: "batch-3", delayMs: HOUR_MS, payload: "three" },
    ]);
    assert.equal(results.length, 3);
    assert.equal(results[0]?.registration?.created, true);
    assert.equal(results[0]?.registration?.timer.key, "batch-1");
    const failure = results[1]?.error;
    assert.ok(failure instanceof TickdError);
    assert.equal(failure.code, Status.INVALID_ARGUMENT);
    assert.match(failure.details, /cron/);
    assert.equal(results[2]?.registration?.timer.key, "batch-3");
    // Registration answers carry no payload; Get does.
    assert.equal(results[2]?.registration?.timer.payload.length, 0);
    assert.equal((await client.get({ key: "batch-3" })).payload.toString(), "three");
  });

  test("a known key returns the existing timer; replace swaps it under the same id", async () => {
    const first = await client.register({ key: "replace-me", delayMs: HOUR_MS, payload: "v1" });
    const again = await client.register({ key: "replace-me", delayMs: 2 * HOUR_MS, payload: "ignored" });
    assert.equal(again.created, false);
    assert.equal(again.replaced, false);
    assert.equal(again.timer.id, first.timer.id);
    assert.deepEqual(again.timer.deadline, first.timer.deadline);
    const replaced = await client.register({ key: "replace-me", delayMs: 2 * HOUR_MS, payload: "v2", replace: true });
    assert.equal(replaced.created, false);
    assert.equal(replaced.replaced, true);
    assert.equal(replaced.timer.id, first.timer.id);
    assert.ok(replaced.timer.deadline! > first.timer.deadline!);
    assert.equal((await client.get(first.timer.id)).payload.toString(), "v2");
  });

  test("a cron timer in a time zone fires at the schedule's local time", async () => {
    const { timer } = await client.register({ key: "standup", cron: "0 9 * * MON-FRI", timeZone: "Europe/Berlin" });
    assert.equal(timer.cron, "0 9 * * MON-FRI");
    assert.equal(timer.timeZone, "Europe/Berlin");
    const local = new Intl.DateTimeFormat("en-GB", {
      timeZone: "Europe/Berlin",
      hour: "2-digit",
      minute: "2-digit",
      weekday: "short",
      hourCycle: "h23",
    }).format(timer.deadline);
    assert.match(local, /^(Mon|Tue|Wed|Thu|Fri) 09:00$/);
    const fetched = await client.get({ key: "standup" });
    assert.equal(fetched.timeZone, "Europe/Berlin");
    assert.equal(fetched.cron, "0 9 * * MON-FRI");
  });

  test("a bad request fails with INVALID_ARGUMENT naming the field; an unknown key with NOT_FOUND", async () => {
    const badCron = await rejection(client.register({ key: "bad-cron", cron: "61 * * * *" }));
    assert.equal(badCron.code, Status.INVALID_ARGUMENT);
    assert.equal(badCron.codeName, "INVALID_ARGUMENT");
    assert.match(badCron.message, /^INVALID_ARGUMENT: .*cron/);
    const badZone = await rejection(client.register({ cron: "@daily", timeZone: "Mars/Olympus_Mons" }));
    assert.equal(badZone.code, Status.INVALID_ARGUMENT);
    assert.match(badZone.details, /time_zone/);
    const missing = await rejection(client.get({ key: "no-such-key" }));
    assert.equal(missing.code, Status.NOT_FOUND);
  });

  test("a repeating timer fires again and again, counting its firings", async () => {
    const namespace = "api-repeat";
    const fired: Expiration[] = [];
    const firedTwice = new Condition();
    const subscriber = new Subscriber(client, {
      namespace,
      reconnect: QUICK_RECONNECT,
      handler: (expiration) => {
        fired.push(expiration);
        firedTwice.notify();
      },
    });
    await subscriber.start();
    try {
      const { timer } = await client.register({ namespace, key: "tick", delayMs: 50, repeatMs: 200 });
      assert.equal(durationToMillis(timer.repeat), 200);
      assert.equal(timer.repeatMs, 200);
      await firedTwice.until("two firings", () => fired.length >= 2);
      assert.ok(fired.every((expiration) => expiration.timer?.id === timer.id));
      assert.equal(await client.cancel({ namespace, key: "tick" }), true);
    } finally {
      await subscriber.stop();
    }
  });

  test("a lease (ttl): touch moves its deadline, and can change its ttl", async () => {
    const { timer } = await client.register({ key: "lease", ttlMs: HOUR_MS });
    assert.equal(durationToMillis(timer.ttl), HOUR_MS);
    const touched = await client.touch({ key: "lease" }, 2 * HOUR_MS);
    assert.equal(durationToMillis(touched.ttl), 2 * HOUR_MS);
    assert.equal(touched.ttlMs, 2 * HOUR_MS);
    assert.equal(touched.repeatMs, undefined);
    // Durations come in milliseconds, as the client's inputs go: a plain number.
    const got = await client.get({ key: "lease" });
    assert.equal(typeof got.remainingMs, "number");
    assert.ok(got.remainingMs! > HOUR_MS && got.remainingMs! <= 2 * HOUR_MS, `remainingMs ${got.remainingMs}`);
    assert.equal(got.remainingMs, durationToMillis(got.remaining));
    assert.ok(touched.deadline! > timer.deadline!);
    const touchedAgain = await client.touch(timer.id);
    assert.ok(touchedAgain.deadline! >= touched.deadline!);
  });

  test("reschedule moves the deadline, with a new payload or keeping the old one", async () => {
    const { timer } = await client.register({ key: "movable", delayMs: HOUR_MS, payload: "before" });
    const target = new Date(Date.now() + 5 * HOUR_MS);
    const moved = await client.reschedule({ key: "movable" }, { deadline: target, payload: "after" });
    assert.equal(moved.id, timer.id);
    assert.equal(moved.deadline?.getTime(), target.getTime());
    assert.equal((await client.get(timer.id)).payload.toString(), "after");
    const movedAgain = await client.reschedule(timer.id, { delayMs: 2 * HOUR_MS });
    assert.ok(movedAgain.deadline! < target);
    assert.equal((await client.get(timer.id)).payload.toString(), "after");
    const emptied = await client.reschedule(timer.id, { delayMs: 2 * HOUR_MS, payload: "" });
    assert.equal(emptied.id, timer.id);
    assert.equal((await client.get(timer.id)).payload.length, 0);
  });

  test("cancel by id and by key", async () => {
    const byId = await client.register({ delayMs: HOUR_MS });
    assert.equal(await client.cancel(byId.timer.id), true);
    assert.equal(await client.cancel(byId.timer.id), false);
    await client.register({ key: "cancel-me", delayMs: HOUR_MS });
    assert.equal(await client.cancel({ key: "cancel-me" }), true);
    assert.equal((await rejection(client.get({ key: "cancel-me" }))).code, Status.NOT_FOUND);
  });

  test("pending timers are iterated lazily, a page at a time, across several pages", async () => {
    const namespace = "api-pages";
    const paging = new PageCountingClient({ address: server.address, namespace });
    try {
      const registered = await paging.registerBatch(
        Array.from({ length: 7 }, (_, index) => ({ key: `page-${index}`, delayMs: HOUR_MS })),
      );
      const expectedIds = registered.map((result) => result.registration?.timer.id).sort();
      const iterator = paging.pendingTimers({ pageSize: 2 });
      const first = await iterator.next();
      assert.equal(first.done, false);
      assert.equal(paging.pagesRequested, 1, "only the first page is fetched for the first timer");
      const seen = [first.value!.id];
      for await (const timer of iterator) seen.push(timer.id);
      assert.deepEqual(seen.sort(), expectedIds);
      assert.ok(paging.pagesRequested >= 4, `7 timers in pages of 2 take at least 4 pages, took ${paging.pagesRequested}`);
      assert.deepEqual(await paging.pendingCount(), { count: "7", deadCount: "0" });
    } finally {
      paging.close();
    }
  });

  test("a handler that throws, with no handlerError listener, is reported on stderr", async () => {
    const namespace = "api-loud";
    const reported = new Condition();
    const lines: string[] = [];
    const consoleError = console.error;
    console.error = (...args: unknown[]) => {
      lines.push(args.map(String).join(" "));
      reported.notify();
    };
    const failing = new Subscriber(client, {
      namespace,
      reconnect: QUICK_RECONNECT,
      handler: () => {
        throw new Error("this handler fails loudly");
      },
    });
    try {
      await failing.start();
      const { timer } = await client.register({ namespace, delayMs: 0 });
      await reported.until("the failure on stderr", () => lines.length >= 1);
      assert.match(lines[0]!, new RegExp(`handler failed on timer ${timer.id} .*attempt 1`));
      assert.match(lines[0]!, /this handler fails loudly/);
    } finally {
      console.error = consoleError;
      await failing.stop();
    }
  });

  test("expirations that exhaust their attempts are listed dead and can be redriven", async () => {
    const namespace = "api-dead";
    const attempts: number[] = [];
    const attempted = new Condition();
    const failing = new Subscriber(client, {
      namespace,
      ackTimeoutMs: 200,
      reconnect: QUICK_RECONNECT,
      handler: (_expiration, context) => {
        attempts.push(context.attempt);
        attempted.notify();
        throw new Error("this handler always fails");
      },
    });
    failing.on("handlerError", () => undefined);
    await failing.start();
    const { timer } = await client.register({ namespace, key: "doomed", delayMs: 0, payload: "dead letter" });
    await attempted.until("two delivery attempts", () => attempts.length >= 2);
    await failing.stop();
    assert.deepEqual(attempts.slice(0, 2), [1, 2]);

    const dead = await pollUntil("the expiration to be dead", () => client.deadExpirations(namespace), (list) => list.length === 1);
    assert.equal(dead[0]?.timer?.id, timer.id);
    assert.equal(dead[0]?.timer?.payload.toString(), "dead letter");
    assert.equal((await client.pendingCount(namespace)).deadCount, "1");

    const notDead = await client.redrive(["no-such-delivery"], namespace);
    assert.equal(notDead.redriven, 0);
    assert.deepEqual(notDead.notDead, ["no-such-delivery"]);

    const handled: Expiration[] = [];
    const acked = new Condition();
    let acknowledged = 0;
    const healthy = new Subscriber(client, {
      namespace,
      reconnect: QUICK_RECONNECT,
      handler: (expiration) => {
        handled.push(expiration);
      },
    });
    healthy.on("acked", (_expiration, response) => {
      acknowledged += response.acknowledged;
      acked.notify();
    });
    await healthy.start();
    try {
      const redriven = await client.redrive([dead[0]!.deliveryId], namespace);
      assert.equal(redriven.redriven, 1);
      await acked.until("the redriven expiration to be acknowledged", () => acknowledged === 1);
      assert.equal(handled[0]?.timer?.id, timer.id);
      assert.equal(handled[0]?.attempt, 1, "a redriven expiration's attempts are counted afresh");
      assert.deepEqual(await client.pendingCount(namespace), { count: "0", deadCount: "0" });
    } finally {
      await healthy.stop();
    }
  });

  test("per-call options: a deadline already passed, an aborted signal", async () => {
    const { timer } = await client.register({ key: "per-call", delayMs: HOUR_MS });
    assert.equal((await rejection(client.get(timer.id, { deadlineMs: 0 }))).code, Status.DEADLINE_EXCEEDED);
    const aborted = new AbortController();
    aborted.abort();
    assert.equal((await rejection(client.get(timer.id, { signal: aborted.signal }))).code, Status.CANCELLED);
    assert.equal((await client.get(timer.id, { deadlineMs: 30_000 })).id, timer.id);
  });

  test("ack names the delivery ids tickd was not waiting for", async () => {
    const response = await client.ack(["0000000000000bad"]);
    assert.equal(response.acknowledged, 0);
    assert.deepEqual(response.unknown, ["0000000000000bad"]);
  });
});
