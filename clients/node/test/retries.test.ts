import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Status, TickdClient, TickdError } from "@tickd/client";
import type { RetryOptions } from "@tickd/client";
import { AttemptRecorder } from "./support/attempts";
import { TickdServer } from "./support/tickd-server";
import { PATIENCE_MS } from "./support/waiting";

/**
 * What retries do while tickd is down, counted attempt by attempt (a client interceptor sees
 * each one leave): a tickd started once and stopped, so its address answers nothing.
 */
let server: TickdServer;

before(async () => {
  server = await TickdServer.start();
  await server.stop();
});
after(async () => {
  await server?.dispose();
});

function recordingClient(retry: RetryOptions): { client: TickdClient; recorder: AttemptRecorder } {
  const recorder = new AttemptRecorder();
  const client = new TickdClient({
    address: server.address,
    namespace: "retries",
    retry,
    channelOptions: { interceptors: [recorder.interceptor] },
  });
  return { client, recorder };
}

const isUnavailable = (error: unknown) => error instanceof TickdError && error.code === Status.UNAVAILABLE;

test("a keyless registration is attempted once; a keyed one until its attempts are used up", async () => {
  const { client, recorder } = recordingClient({ maxAttempts: 4, initialDelayMs: 10, maxDelayMs: 20 });
  try {
    await assert.rejects(client.register({ delayMs: 1_000 }), isUnavailable);
    assert.equal(recorder.of("NewTimeout").length, 1, "a keyless registration is never retried");

    await assert.rejects(client.register({ key: "keyed", delayMs: 1_000 }), isUnavailable);
    assert.equal(recorder.of("NewTimeout").length, 1 + 4, "a keyed registration is retried up to maxAttempts");

    await assert.rejects(client.registerBatch([{ key: "a", delayMs: 1_000 }, { delayMs: 1_000 }]), isUnavailable);
    assert.equal(recorder.of("NewTimeouts").length, 1, "a batch with a keyless item is not retried");
  } finally {
    client.close();
  }
});

test("a call's deadline bounds all its retries: every attempt shares it, none starts after it", { timeout: PATIENCE_MS }, async () => {
  // Attempts that would go on for hours: only the deadline can end this call.
  const { client, recorder } = recordingClient({ maxAttempts: 1_000_000, initialDelayMs: 10, maxDelayMs: 50 });
  try {
    const calledAt = Date.now();
    await assert.rejects(
      client.get({ key: "anything" }, { deadlineMs: 1_000 }),
      (error: unknown) => error instanceof TickdError && error.code === Status.DEADLINE_EXCEEDED,
    );
    const attempts = recorder.of("Get");
    assert.ok(attempts.length >= 1);
    const deadlines = new Set(attempts.map((attempt) => new Date(attempt.deadline!).getTime()));
    assert.equal(deadlines.size, 1, "every attempt has the call's one deadline, not a fresh one of its own");
    const [deadline] = [...deadlines];
    assert.ok(deadline! >= calledAt + 1_000, "the deadline is the call's deadlineMs from its start");
    const attemptsWhenRejected = attempts.length;
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(recorder.of("Get").length, attemptsWhenRejected, "no attempt after the call ended");
  } finally {
    client.close();
  }
});
