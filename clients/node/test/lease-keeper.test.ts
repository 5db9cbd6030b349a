import assert from "node:assert/strict";
import { rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { LeaseKeeper, Status, Subscriber, TickdError } from "@tickd/client";
import type { Expiration, Lease, TickdClient } from "@tickd/client";
import { clientFor, QUICK_RECONNECT } from "./support/clients";
import { TickdServer, workDirectory } from "./support/tickd-server";
import { Condition } from "./support/waiting";

let server: TickdServer;
let client: TickdClient;

before(async () => {
  server = await TickdServer.start();
  client = clientFor(server, { namespace: "keeper" });
});
after(async () => {
  client?.close();
  await server?.dispose();
});

test("leases added and removed while the keeper runs: kept ones outlive their ttl, a removed one expires", async () => {
  const expired: Expiration[] = [];
  const heartbeats: Lease[] = [];
  const lost: Lease[] = [];
  const progress = new Condition();
  const supervisor = new Subscriber(client, {
    reconnect: QUICK_RECONNECT,
    handler: (expiration) => {
      expired.push(expiration);
      progress.notify();
    },
  });
  await supervisor.start();
  const keeper = new LeaseKeeper(client, { reconnect: QUICK_RECONNECT });
  keeper.on("heartbeat", (lease) => {
    heartbeats.push({ ...lease });
    progress.notify();
  });
  keeper.on("lost", (lease) => {
    lost.push(lease);
    progress.notify();
  });
  await keeper.start();
  try {
    // Heartbeats come about every ttl/3: a ttl of 1.5 s leaves room for a busy machine.
    const ttlMs = 1_500;
    const kept = await client.register({ key: "kept", ttlMs });
    const dropped = await client.register({ key: "dropped", ttlMs });
    const beatsOf = (key: string) => heartbeats.filter((beat) => beat.reference.key === key);

    keeper.add({ key: "kept" });
    keeper.add({ key: "dropped" });
    assert.equal(keeper.leases.length, 2);
    await progress.until("both leases heartbeaten", () => beatsOf("kept").length > 0 && beatsOf("dropped").length > 0);
    assert.equal(beatsOf("kept")[0]!.id, kept.timer.id, "the answer names the lease's id");

    assert.equal(keeper.remove({ key: "dropped" }), true);
    assert.equal(keeper.remove({ key: "dropped" }), false);
    await progress.until("the removed lease expiring", () => expired.some((expiration) => expiration.timer?.id === dropped.timer.id));
    const expiration = expired.find((candidate) => candidate.timer?.id === dropped.timer.id)!;
    assert.equal(expiration.lease, true, "an expired lease is marked as one");

    // The kept lease is still heartbeaten, well past two of its ttls since it was registered.
    const registeredDeadline = kept.timer.deadline!.getTime();
    await progress.until("the kept lease kept past two ttls", () =>
      beatsOf("kept").some((beat) => beat.deadline!.getTime() > registeredDeadline + 2 * ttlMs),
    );
    assert.equal((await client.get(kept.timer.id)).id, kept.timer.id);
    assert.equal(expired.some((candidate) => candidate.timer?.id === kept.timer.id), false);

    // A lease tickd does not know is lost at its first heartbeat.
    const unknown = keeper.add({ key: "never-registered" });
    await progress.until("the unknown lease reported lost", () => lost.includes(unknown as Lease));
    assert.deepEqual(keeper.leases.map((lease) => lease.reference.key), ["kept"]);
  } finally {
    await keeper.stop();
    await supervisor.stop();
  }
});

test("a keeper without a valid token fails instead of reconnecting forever", async () => {
  // tickd refuses a token file with no token in it, so it holds one this client never sends.
  const tokens = join(workDirectory(), `keeper-tokens-${process.pid}`);
  writeFileSync(tokens, "a-token-the-keeper-lacks *\n");
  const tokenServer = await TickdServer.start(["--auth-token-file", tokens]);
  rmSync(tokens, { force: true });
  const anonymous = clientFor(tokenServer);
  try {
    const keeper = new LeaseKeeper(anonymous, { reconnect: QUICK_RECONNECT });
    const failed = new Promise<TickdError>((resolve) => keeper.once("failed", resolve));
    keeper.add("anything");
    await assert.rejects(keeper.start(), (error: unknown) => error instanceof TickdError && error.code === Status.UNAUTHENTICATED);
    assert.equal((await failed).code, Status.UNAUTHENTICATED);
    await keeper.stop();
  } finally {
    anonymous.close();
    await tokenServer.dispose();
  }
});
