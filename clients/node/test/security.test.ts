import assert from "node:assert/strict";
import { rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { Status, Subscriber, TickdClient, TickdError } from "@tickd/client";
import { makeCertificates } from "./support/certificates";
import type { TestCertificates } from "./support/certificates";
import { TickdServer, workDirectory } from "./support/tickd-server";

/** One attempt only: a refused connection must fail the call, not wait out retries. */
const NO_RETRIES = { retry: { maxAttempts: 1 }, deadlineMs: 20_000 } as const;

function failsWith(code: Status) {
  return (error: unknown): boolean => {
    assert.ok(error instanceof TickdError, `expected a TickdError, got ${String(error)}`);
    assert.equal(error.codeName, Status[code], error.message);
    return true;
  };
}

describe("bearer token", () => {
  let server: TickdServer;
  before(async () => {
    const tokens = join(workDirectory(), `tokens-${process.pid}`);
    writeFileSync(tokens, "s3cret-token secure,other\n");
    server = await TickdServer.start(["--auth-token-file", tokens]);
    rmSync(tokens, { force: true });
  });
  after(() => server?.dispose());

  test("without a token calls fail with UNAUTHENTICATED; with it they work", async () => {
    const anonymous = new TickdClient({ address: server.address, namespace: "secure", ...NO_RETRIES });
    const wrong = new TickdClient({ address: server.address, namespace: "secure", token: "guess", ...NO_RETRIES });
    const authorised = new TickdClient({ address: server.address, namespace: "secure", token: "s3cret-token" });
    try {
      await assert.rejects(anonymous.register({ key: "k", delayMs: 60_000 }), failsWith(Status.UNAUTHENTICATED));
      await assert.rejects(wrong.get({ key: "k" }), failsWith(Status.UNAUTHENTICATED));
      const { timer } = await authorised.register({ key: "k", delayMs: 60_000 });
      assert.equal((await authorised.get(timer.id)).key, "k");
      await assert.rejects(authorised.get({ namespace: "elsewhere", key: "k" }), failsWith(Status.PERMISSION_DENIED));

      // A subscriber without a token gives up instead of reconnecting forever.
      const refused = new Subscriber(anonymous, { handler: () => undefined });
      refused.on("failed", () => undefined);
      await assert.rejects(refused.start(), failsWith(Status.UNAUTHENTICATED));
      await refused.stop();
    } finally {
      anonymous.close();
      wrong.close();
      authorised.close();
    }
  });
});

describe("TLS", () => {
  let certificates: TestCertificates;
  before(() => {
    certificates = makeCertificates();
  });
  after(() => rmSync(certificates.directory, { recursive: true, force: true }));

  test("a client trusting the CA talks to a TLS tickd; a plaintext one cannot", async () => {
    const server = await TickdServer.start(["--tls-cert", certificates.serverCertFile, "--tls-key", certificates.serverKeyFile]);
    const secure = new TickdClient({ address: server.address, tls: { ca: certificates.ca }, ...NO_RETRIES });
    const byName = new TickdClient({
      address: server.address,
      tls: { ca: certificates.ca, serverName: "localhost" },
      ...NO_RETRIES,
    });
    const plaintext = new TickdClient({ address: server.address, ...NO_RETRIES });
    try {
      const { timer } = await secure.register({ key: "tls", delayMs: 60_000 });
      assert.equal((await byName.get(timer.id)).key, "tls");
      await assert.rejects(plaintext.get(timer.id), failsWith(Status.UNAVAILABLE));
    } finally {
      secure.close();
      byName.close();
      plaintext.close();
      await server.dispose();
    }
  });

  test("a tickd that asks for a client certificate accepts one signed by its CA, and refuses a client without", async () => {
    const server = await TickdServer.start([
      "--tls-cert", certificates.serverCertFile,
      "--tls-key", certificates.serverKeyFile,
      "--tls-client-ca", certificates.caCertFile,
    ]);
    const withCertificate = new TickdClient({
      address: server.address,
      tls: { ca: certificates.ca, cert: certificates.clientCert, key: certificates.clientKey },
      ...NO_RETRIES,
    });
    const withoutCertificate = new TickdClient({ address: server.address, tls: { ca: certificates.ca }, ...NO_RETRIES });
    try {
      const { timer } = await withCertificate.register({ key: "mtls", delayMs: 60_000 });
      assert.equal((await withCertificate.get(timer.id)).key, "mtls");
      await assert.rejects(withoutCertificate.get(timer.id), failsWith(Status.UNAVAILABLE));
    } finally {
      withCertificate.close();
      withoutCertificate.close();
      await server.dispose();
    }
  });
});
