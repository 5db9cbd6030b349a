import { TickdClient } from "@tickd/client";
import type { TickdClientOptions } from "@tickd/client";
import type { TickdServer } from "./tickd-server";

/**
 * Retries patient enough to outlast a tickd restart in these tests (about 30 s in all),
 * with short delays so that a test does not idle once tickd is back.
 */
export const PATIENT_RETRIES = { maxAttempts: 60, initialDelayMs: 50, maxDelayMs: 500 } as const;

/** Reconnects quickly: the tests restart tickd and wait for the streams to come back. */
export const QUICK_RECONNECT = { initialDelayMs: 50, maxDelayMs: 500 } as const;

export function clientFor(server: TickdServer, options: Partial<TickdClientOptions> = {}): TickdClient {
  return new TickdClient({ address: server.address, retry: PATIENT_RETRIES, ...options });
}
