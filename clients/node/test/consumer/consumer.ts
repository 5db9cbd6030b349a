// Compiled by the check against the packed tarball with `tsc --strict --noEmit`: the package's
// types must be enough for a strict TypeScript program (never run).
import { LeaseKeeper, Status, Subscriber, TickdClient, TickdError } from "@tickd/client";
import { SinkCircuit } from "@tickd/client";
import type { Expiration, ExpirationContext, Lease, Registration, SinkChange, SinkView, Timer } from "@tickd/client";

async function main(): Promise<void> {
  const client = new TickdClient({ address: "127.0.0.1:50051", namespace: "orders", token: process.env.TICKD_TOKEN });

  const registration: Registration = await client.register({ key: "order-42", delayMs: 30 * 60_000, payload: "close 42" });
  const id: string = registration.timer.id;
  const lease = await client.register({ key: "worker-7", ttlMs: 30_000 });

  const subscriber = new Subscriber(client, {
    maxInFlight: 4,
    handler: async (expiration: Expiration, context: ExpirationContext) => {
      const timer: Timer | undefined = expiration.timer;
      console.log(timer?.key, timer?.payload.toString(), context.attempt);
    },
  });
  subscriber.on("acked", (expiration: Expiration, response) => console.log(expiration.deliveryId, response.acknowledged));
  await subscriber.start();

  const keeper = new LeaseKeeper(client);
  keeper.on("lost", (lost: Lease, error: TickdError) => console.error(lost.reference.key, error.code === Status.NOT_FOUND));
  keeper.add(lease.timer.id);
  await keeper.start();

  for await (const pending of client.pendingTimers({ pageSize: 50 })) console.log(pending.id, pending.deadline?.toISOString());
  try {
    await client.cancel(id);
  } catch (error) {
    if (error instanceof TickdError) console.error(error.codeName, error.details);
  }
  const set: SinkChange = await client.setSink("http://127.0.0.1:8080/timers", { rate: "50/s,burst=10" });
  const sinks: SinkView[] = await client.listSinks();
  console.log(set.changed, sinks.map((sink) => `${sink.namespace} ${sink.url} paused=${sink.paused}`));
  for (const state of await client.sinkStatus({ all: true })) console.log(state.circuit === SinkCircuit.SINK_CIRCUIT_OPEN, state.delivered);
  await keeper.stop();
  await subscriber.stop();
  client.close();
}

void main;
