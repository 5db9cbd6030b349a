import assert from "node:assert/strict";
import { createServer } from "node:http";
import type { Server } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, describe, test } from "node:test";
import { SinkOrigin, Status, TickdClient, TickdError } from "@tickd/client";
import { clientFor } from "./support/clients";
import { TickdServer } from "./support/tickd-server";
import { Condition } from "./support/waiting";

/** One push as the receiver got it: the body is the expiration in proto3 JSON. */
interface Push {
  path: string;
  key: string;
  attempt: number;
}

/** A real HTTP server on 127.0.0.1 answering 200 to every push and recording it. */
class Receiver {
  readonly pushes: Push[] = [];
  readonly arrived = new Condition();
  private readonly server: Server;

  private constructor(server: Server) {
    this.server = server;
  }

  static async start(): Promise<Receiver> {
    const receiver: Receiver = new Receiver(
      createServer((request, response) => {
        const chunks: Buffer[] = [];
        request.on("data", (chunk: Buffer) => chunks.push(chunk));
        request.on("end", () => {
          const body = JSON.parse(Buffer.concat(chunks).toString("utf8")) as { timer: { key: string } };
          response.writeHead(200).end();
          receiver.pushes.push({ path: request.url ?? "", key: body.timer.key, attempt: Number(request.headers["tickd-attempt"]) });
          receiver.arrived.notify();
        });
      }),
    );
    await new Promise<void>((resolve) => receiver.server.listen(0, "127.0.0.1", resolve));
    return receiver;
  }

  get port(): number {
    return (this.server.address() as AddressInfo).port;
  }

  keys(path: string): string[] {
    return this.pushes.filter((push) => push.path === path).map((push) => push.key).sort();
  }

  waitFor(path: string, keys: readonly string[]): Promise<void> {
    return this.arrived.until(`pushes of ${keys.join(", ")} to ${path}`, () => {
      const pushed = new Set(this.keys(path));
      return keys.every((key) => pushed.has(key));
    });
  }

  close(): Promise<void> {
    this.server.closeAllConnections();
    return new Promise((resolve) => this.server.close(() => resolve()));
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

describe("push sinks against a real tickd and a real HTTP receiver", () => {
  let server: TickdServer;
  let receiver: Receiver;
  let client: TickdClient;

  before(async () => {
    server = await TickdServer.start(["--sink-allow", "127.0.0.1"]);
    receiver = await Receiver.start();
    client = clientFor(server, { namespace: "pushed" });
  });
  after(async () => {
    client?.close();
    await receiver?.close();
    await server?.dispose();
  });

  test("set, pushed to, listed masked, paused while another sink pushes, resumed, removed", async () => {
    const url = `http://user:secret@127.0.0.1:${receiver.port}/pushed`;
    const masked = `http://***@127.0.0.1:${receiver.port}/pushed`;
    const set = await client.setSink(url, { rate: "50/s,burst=10" });
    assert.equal(set.changed, true);
    assert.deepEqual(
      { namespace: set.sink.namespace, url: set.sink.url, rate: set.sink.rate, origin: set.sink.origin },
      { namespace: "pushed", url: masked, rate: "50/s,burst=10", origin: SinkOrigin.SINK_ORIGIN_API },
    );
    assert.equal((await client.setSink(url, { rate: "50/s,burst=10" })).changed, false); // what a retry meets
    await client.setSink(`http://127.0.0.1:${receiver.port}/control`, { namespace: "control" });

    for (const key of ["first", "second", "third"]) await client.register({ key, delayMs: 50 });
    await receiver.waitFor("/pushed", ["first", "second", "third"]);
    assert.deepEqual(receiver.keys("/pushed"), ["first", "second", "third"]);

    const listed = new Map((await client.listSinks()).map((sink) => [sink.namespace, sink]));
    assert.equal(listed.get("pushed")?.url, masked);
    assert.equal(listed.get("control")?.url, `http://127.0.0.1:${receiver.port}/control`);

    const paused = await client.pauseSink();
    assert.equal(paused.changed, true);
    assert.equal(paused.sink.paused, true);
    assert.equal((await client.pauseSink()).changed, false);
    assert.equal((await client.getSink()).paused, true);
    // Due before the control's timer: once that one is pushed, these have fired, and wait.
    for (const key of ["held-1", "held-2"]) await client.register({ key, delayMs: 50 });
    await client.register({ namespace: "control", key: "later", delayMs: 500 });
    await receiver.waitFor("/control", ["later"]);
    assert.deepEqual(receiver.keys("/pushed"), ["first", "second", "third"]);
    const [state, ...others] = await client.sinkStatus();
    assert.equal(others.length, 0);
    assert.equal(state?.sink?.paused, true);
    assert.equal(state?.delivered, "3");
    const everyNamespace = (await client.sinkStatus({ all: true })).map((each) => each.sink?.namespace);
    assert.ok(everyNamespace.includes("pushed") && everyNamespace.includes("control"), String(everyNamespace));

    const resumed = await client.resumeSink();
    assert.equal(resumed.changed, true);
    assert.equal(resumed.sink.paused, false);
    await receiver.waitFor("/pushed", ["held-1", "held-2"]);
    assert.deepEqual(receiver.keys("/pushed"), ["first", "held-1", "held-2", "second", "third"]);
    assert.ok(receiver.pushes.every((push) => push.attempt === 1), JSON.stringify(receiver.pushes));

    await client.removeSink();
    assert.equal((await rejection(client.getSink())).code, Status.NOT_FOUND);
    assert.ok(!(await client.listSinks()).some((sink) => sink.namespace === "pushed"));
  });

  test("secrets sign pushes until cleared, and a new rate keeps them", async () => {
    const url = "http://127.0.0.1:9/unused";
    const secrets = ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"];
    assert.equal((await client.setSink(url, { namespace: "signed", secrets })).sink.signed, true);
    assert.equal((await client.setSink(url, { namespace: "signed", rate: "5/s" })).sink.signed, true);
    assert.equal((await client.setSink(url, { namespace: "signed", clearSecrets: true })).sink.signed, false);
  });

  test("a rate tickd cannot read is INVALID_ARGUMENT naming rate", async () => {
    const error = await rejection(client.setSink("http://127.0.0.1:9/x", { namespace: "bad", rate: "fast" }));
    assert.equal(error.code, Status.INVALID_ARGUMENT);
    assert.match(error.details, /rate/);
  });
});
