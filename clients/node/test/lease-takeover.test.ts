import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { InterceptingCall } from "@grpc/grpc-js";
import type { Interceptor } from "@grpc/grpc-js";
import { LeaseKeeper, Status, TickdError } from "@tickd/client";
import type { Lease, Registration, TickdClient } from "@tickd/client";
import { clientFor, QUICK_RECONNECT } from "./support/clients";
import { TickdServer } from "./support/tickd-server";
import { Condition, Gate, pollUntil, wallClockPasses } from "./support/waiting";

/**
 * A lease kept by KEY that expired while tickd was down, its key registered anew by another
 * holder before the keeper reconnects: the keeper must report its lease lost and must not keep
 * the new holder's timer alive.
 */
let server: TickdServer;
let keeperClient: TickdClient;
let otherHolder: TickdClient;
/** The keeper's KeepAlive streams open only once this resolves (see holdKeepAlive). */
let keepAliveMayOpen: Promise<void> = Promise.resolve();

/** Holds back the start of KeepAlive streams, so that the test decides when the keeper reconnects. */
const holdKeepAlive: Interceptor = (options, nextCall) => {
  if (options.method_definition.path !== "/tickd.v1.Timers/KeepAlive") return new InterceptingCall(nextCall(options));
  const mayOpen = keepAliveMayOpen;
  return new InterceptingCall(nextCall(options), {
    start: (metadata, listener, next) => {
      void mayOpen.then(() => next(metadata, listener));
    },
  });
};

before(async () => {
  server = await TickdServer.start(["--sync", "always"]);
  keeperClient = clientFor(server, { namespace: "takeover", channelOptions: { interceptors: [holdKeepAlive] } });
  otherHolder = clientFor(server, { namespace: "takeover" });
});
after(async () => {
  keeperClient?.close();
  otherHolder?.close();
  await server?.dispose();
});

test("a key lease lost while tickd was down is reported lost, and the key's new timer is not kept alive", async () => {
  const ttlMs = 1_000;
  const original = await otherHolder.register({ key: "job", ttlMs });
  const keeper = new LeaseKeeper(keeperClient, { reconnect: QUICK_RECONNECT });
  const heartbeats: Lease[] = [];
  const lost: Array<{ lease: Lease; error: TickdError }> = [];
  const events = new Condition();
  keeper.on("heartbeat", (lease) => {
    heartbeats.push({ ...lease });
    events.notify();
  });
  keeper.on("lost", (lease, error) => {
    lost.push({ lease, error });
    events.notify();
  });
  const lease = keeper.add({ key: "job" });
  await keeper.start();
  const reconnectGate = new Gate();
  try {
    await events.until("a heartbeat naming the lease's id", () => heartbeats.some((beat) => beat.id === original.timer.id));

    // tickd goes down; the keeper may not reconnect until the key has a new holder.
    keepAliveMayOpen = reconnectGate.opened;
    await server.stop();
    const stoppedAt = Date.now();
    await wallClockPasses(Math.max(lease.deadline!.getTime(), stoppedAt + ttlMs) + 500 - Date.now());
    await server.restart();

    // The old lease expired (tickd fires it once it is back); the key is then free for another holder.
    const newHolder: Registration = await pollUntil(
      "the key registered anew",
      () => otherHolder.register({ key: "job", ttlMs }),
      (registration) => registration.created,
    );
    assert.notEqual(newHolder.timer.id, original.timer.id);
    const heartbeatsBeforeReconnect = heartbeats.length;

    reconnectGate.open();
    await events.until("the lease reported lost", () => lost.length > 0);
    assert.equal(lost.length, 1);
    assert.equal(lost[0]!.lease.id, original.timer.id, "the lost lease keeps its own id");
    assert.equal(lost[0]!.error.code, Status.NOT_FOUND);
    assert.deepEqual(keeper.leases, [], "the lost lease is no longer kept");

    // The new holder's timer runs out on its own: the keeper never heartbeats it.
    await pollUntil(
      "the new holder's timer to expire (nobody keeps it alive)",
      () => otherHolder.get({ key: "job" }).then(
        (timer) => timer.id,
        (error: unknown) => (error instanceof TickdError && error.code === Status.NOT_FOUND ? "gone" : Promise.reject(error)),
      ),
      (answer) => answer !== newHolder.timer.id,
    );
    assert.ok(
      heartbeats.slice(heartbeatsBeforeReconnect).every((beat) => beat.id !== newHolder.timer.id),
      "no heartbeat answer adopted the new holder's timer",
    );
  } finally {
    reconnectGate.open();
    await keeper.stop();
  }
});
