import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { LeaseKeeper, Status, Subscriber, TickdError } from "@tickd/client";
import type { Lease, TickdClient } from "@tickd/client";
import { clientFor, QUICK_RECONNECT } from "./support/clients";
import { TickdServer } from "./support/tickd-server";
import { Condition, pollUntil, wallClockPasses } from "./support/waiting";

/**
 * One durable tickd restarted once (SIGTERM, exit 0, started again on the same port and data
 * dir), with a subscriber, a lease keeper and calls in flight across it. The scenarios share
 * the restart, as they would in production.
 */
let server: TickdServer;
let client: TickdClient;

before(async () => {
  // A short ack timeout: deliveries whose ack was lost in the restart come again soon.
  server = await TickdServer.start(["--sync", "always", "--ack-timeout", "2s"]);
  client = clientFor(server);
});
after(async () => {
  client?.close();
  await server?.dispose();
});

test("subscriber, lease keeper and retries across a restart of a durable tickd", async () => {
  // --- The subscriber: every expiration handled and acknowledged, before and after. ---
  const expirationsNamespace = "restart-expirations";
  const handledTimerIds = new Set<string>();
  const acknowledgedTimerIds = new Set<string>();
  const progress = new Condition();
  const subscriber = new Subscriber(client, {
    namespace: expirationsNamespace,
    reconnect: QUICK_RECONNECT,
    handler: (expiration) => {
      handledTimerIds.add(expiration.timer!.id);
    },
  });
  subscriber.on("acked", (expiration, response) => {
    if (response.acknowledged === 1) acknowledgedTimerIds.add(expiration.timer!.id);
    progress.notify();
  });
  let resubscriptions = 0;
  subscriber.on("subscribed", () => {
    resubscriptions += 1;
    progress.notify();
  });
  await subscriber.start();

  // --- The lease keeper: one lease outlives the restart, one (1 s) expires while tickd is down. ---
  const leasesNamespace = "restart-leases";
  await client.register({ namespace: leasesNamespace, key: "long", ttlMs: 120_000 });
  await client.register({ namespace: leasesNamespace, key: "short", ttlMs: 1_000 });
  const keeper = new LeaseKeeper(client, { reconnect: QUICK_RECONNECT });
  const lost: Array<{ lease: Lease; error: TickdError }> = [];
  const heartbeats: Lease[] = [];
  const leaseEvents = new Condition();
  keeper.on("lost", (lease, error) => {
    lost.push({ lease, error });
    leaseEvents.notify();
  });
  keeper.on("heartbeat", (lease) => {
    heartbeats.push({ ...lease });
    leaseEvents.notify();
  });
  const longLease = keeper.add({ namespace: leasesNamespace, key: "long" });
  const shortLease = keeper.add({ namespace: leasesNamespace, key: "short" });
  await keeper.start();
  const heartbeatOf = (lease: Lease) => heartbeats.filter((beat) => beat.reference.key === lease.reference.key);
  await leaseEvents.until("first heartbeats of both leases", () => heartbeatOf(longLease).length > 0 && heartbeatOf(shortLease).length > 0);
  // The short lease is kept alive past its ttl by heartbeats (about every ttl/3).
  const shortFirstDeadline = heartbeatOf(shortLease)[0]!.deadline!;
  await leaseEvents.until("the short lease kept past its first deadline", () =>
    heartbeatOf(shortLease).some((beat) => beat.deadline! > new Date(shortFirstDeadline.getTime() + 1_000)),
  );

  const before = await client.registerBatch([
    { namespace: expirationsNamespace, key: "before-1", delayMs: 0 },
    { namespace: expirationsNamespace, key: "before-2", delayMs: 100 },
    { namespace: expirationsNamespace, key: "before-3", delayMs: 200 },
  ]);
  const dueAfterRestart = await client.registerBatch([
    { namespace: expirationsNamespace, key: "across-1", delayMs: 4_000 },
    { namespace: expirationsNamespace, key: "across-2", delayMs: 5_000 },
  ]);
  const idsOf = (results: typeof before) => results.map((result) => result.registration!.timer.id);
  await progress.until("the early expirations acknowledged", () =>
    idsOf(before).every((id) => acknowledgedTimerIds.has(id)),
  );

  // --- The restart. ---
  const longDeadlineBeforeRestart = longLease.deadline!;
  const subscriptionsBeforeRestart = resubscriptions;
  await server.stop();
  const stoppedAt = Date.now();

  // While tickd is down: a keyless registration is not retried and fails with UNAVAILABLE...
  await assert.rejects(
    client.register({ namespace: expirationsNamespace, delayMs: 0 }),
    (error: unknown) => error instanceof TickdError && error.code === Status.UNAVAILABLE,
  );
  // ...and a keyed one (and a get) is retried until tickd answers again.
  const keyedWhileDown = client.register({ namespace: expirationsNamespace, key: "while-down", delayMs: 0 });
  const getWhileDown = client.get({ namespace: leasesNamespace, key: "long" });

  // Past the short lease's last known deadline (a heartbeat sent just before the stop could have
  // moved it to at most the stop plus its ttl) before tickd comes back.
  const shortLeaseGoneBy = Math.max(shortLease.deadline!.getTime(), stoppedAt + 1_000) + 500;
  await wallClockPasses(shortLeaseGoneBy - Date.now());
  await server.restart();

  const registeredWhileDown = await keyedWhileDown;
  assert.equal(registeredWhileDown.created, true);
  assert.equal((await getWhileDown).key, "long");

  const afterRestart = await client.registerBatch([
    { namespace: expirationsNamespace, key: "after-1", delayMs: 0 },
    { namespace: expirationsNamespace, key: "after-2", delayMs: 300 },
  ]);

  // --- What must hold after the restart. ---
  const everyId = [...idsOf(before), ...idsOf(dueAfterRestart), registeredWhileDown.timer.id, ...idsOf(afterRestart)];
  await progress.until("every expiration handled and acknowledged", () =>
    everyId.every((id) => handledTimerIds.has(id) && acknowledgedTimerIds.has(id)),
  );
  assert.ok(resubscriptions > subscriptionsBeforeRestart, "the subscriber subscribed again");
  await pollUntil(
    "nothing pending, redelivered or dead in the namespace",
    () => client.pendingCount(expirationsNamespace),
    (count) => count.count === "0" && count.deadCount === "0",
  );

  await leaseEvents.until("the short lease reported lost", () => lost.length > 0);
  await leaseEvents.until("a heartbeat of the long lease after the restart", () =>
    heartbeatOf(longLease).some((beat) => beat.deadline! > longDeadlineBeforeRestart),
  );
  assert.deepEqual(
    lost.map(({ lease }) => lease.reference.key),
    ["short"],
    "only the short lease is lost",
  );
  assert.equal(lost[0]!.error.code, Status.NOT_FOUND);
  assert.deepEqual(
    keeper.leases.map((lease) => lease.reference.key),
    ["long"],
    "the lost lease is no longer kept",
  );
  const longAfter = await client.get({ namespace: leasesNamespace, key: "long" });
  assert.ok(longAfter.deadline! > longDeadlineBeforeRestart, "the long lease's deadline moved on");

  await keeper.stop();
  await subscriber.stop();
});
