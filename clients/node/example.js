#!/usr/bin/env node
// tickd from Node.js (@grpc/grpc-js + @grpc/proto-loader): register timeouts, consume and
// acknowledge their expirations, keep a heartbeat lease alive with KeepAlive, and register a
// cron timer, replace it under its key, reschedule it and ask for dead expirations to be redriven.
//
//   cd clients/node && npm ci && TICKD_ADDR=127.0.0.1:50051 node example.js
//
// The service definition is loaded from proto/ when the program starts: nothing generated is
// kept. Ids are strings (tickd's ids are opaque, and int64 fields are read as strings), so
// nothing is lost above 2^53. Every step checks its result; the program exits non-zero,
// naming what went wrong, if an expiration does not arrive or arrives wrong.
'use strict';

const path = require('node:path');
const crypto = require('node:crypto');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const PROTO_DIR = process.env.TICKD_PROTO_DIR || path.join(__dirname, '..', '..', 'proto');
const ADDR = process.env.TICKD_ADDR || '127.0.0.1:50051';
// Deadline of each call, and how long to wait for an expiration before giving up: only so
// that a broken server fails the example instead of hanging it.
const PATIENCE_MS = 30_000;

class ExampleFailed extends Error {}

function check(condition, what) {
  if (!condition) throw new ExampleFailed(what);
}

function loadTimers() {
  const definition = protoLoader.loadSync('tickd/v1/tickd.proto', {
    includeDirs: [PROTO_DIR],
    keepCase: true, // field names as in the proto: delivery_ids, fired_at
    longs: String,
    enums: String,
    defaults: true,
    oneofs: true,
  });
  return grpc.loadPackageDefinition(definition).tickd.v1.Timers;
}

const millis = (ms) => ({ seconds: String(Math.floor(ms / 1000)), nanos: (ms % 1000) * 1e6 });
const nanos = (t) => BigInt(t.seconds) * 1_000_000_000n + BigInt(t.nanos);
const deadline = () => ({ deadline: new Date(Date.now() + PATIENCE_MS) });

/** Promisified unary call. */
function call(client, method, request) {
  return new Promise((resolve, reject) => {
    client[method](request, deadline(), (error, response) => (error ? reject(error) : resolve(response)));
  });
}

/** A sharing subscriber: expirations of the namespace, awaited one at a time. */
class Subscription {
  constructor(client, namespace) {
    this.items = [];
    this.waiters = [];
    this.stream = client.Subscribe({ namespace, mode: 'MODE_SHARED', ack_timeout: millis(30_000) });
    this.stream.on('data', (response) => this.push(response.expiration));
    this.stream.on('error', (error) => {
      if (error.code !== grpc.status.CANCELLED) this.push(error);
    });
  }

  push(item) {
    const waiter = this.waiters.shift();
    if (waiter) waiter(item);
    else this.items.push(item);
  }

  async next(what) {
    let timer;
    const item = this.items.length
      ? this.items.shift()
      : await new Promise((resolve, reject) => {
          this.waiters.push(resolve);
          timer = setTimeout(
            () => reject(new ExampleFailed(`no expiration within ${PATIENCE_MS / 1000}s: ${what}`)),
            PATIENCE_MS,
          );
        }).finally(() => clearTimeout(timer));
    if (item instanceof Error) throw new ExampleFailed(`subscription failed: ${item.message}`);
    return item;
  }

  close() {
    this.stream.cancel();
  }
}

async function timeouts(client, namespace, subscription) {
  const registered = {};
  // The doomed timer is cancelled long before it is due.
  for (const [name, delay] of [['first', 100], ['second', 200], ['third', 300], ['doomed', 3_600_000]]) {
    const answer = await call(client, 'NewTimeout', {
      timer: { namespace, key: `order-${name}`, delay: millis(delay), payload: Buffer.from(`close ${name}`) },
    });
    check(answer.created, `${name} was created`);
    registered[name] = answer.timer;
  }

  // Registering the same key again returns the existing timer (safe retries).
  const again = await call(client, 'NewTimeout', {
    timer: { namespace, key: 'order-doomed', delay: millis(3_600_000) },
  });
  check(!again.created && again.timer.id === registered.doomed.id, 'idempotent key');

  const cancel = await call(client, 'Cancel', { timer: { namespace, key: 'order-doomed' } });
  check(cancel.cancelled, 'the doomed timer was still pending when cancelled');

  // Expirations come in deadline order; the cancelled timer never comes.
  for (const name of ['first', 'second', 'third']) {
    const expiration = await subscription.next(name);
    const timer = registered[name];
    check(expiration.timer.id === timer.id,
      `expected ${name} (${timer.id}), got ${expiration.timer.key} (${expiration.timer.id})`);
    check(expiration.timer.payload.toString() === `close ${name}`, `${name}'s payload`);
    check(expiration.attempt === 1, `${name}: first delivery`);
    check(nanos(expiration.fired_at) >= nanos(timer.deadline), `${name} fired before its deadline`);
    const ack = await call(client, 'Ack', { namespace, delivery_ids: [expiration.delivery_id] });
    check(ack.acknowledged === 1 && ack.unknown.length === 0, `${name} acknowledged`);
    console.log(`fired ${name} (id ${timer.id}), acknowledged`);
  }

  const pending = await call(client, 'Pending', { namespace });
  check(pending.count === '0', `nothing left pending, found ${pending.count}`);
  console.log('timeouts ok: 3 fired in deadline order and were acknowledged; the cancelled one never fired');
}

/** A worker's lease: heartbeats over KeepAlive well within its ttl; once they stop, it expires. */
async function lease(client, namespace, subscription) {
  const ttlMs = 2000;
  const { timer: leaseTimer } = await call(client, 'NewTimeout', {
    timer: { namespace, key: 'worker-1', ttl: millis(ttlMs), payload: Buffer.from('worker-1') },
  });

  const stream = client.KeepAlive(deadline());
  const answers = [];
  const waiting = [];
  stream.on('data', (answer) => (waiting.length ? waiting.shift()(answer) : answers.push(answer)));
  stream.on('error', (error) => waiting.splice(0).forEach((resolve) => resolve(error)));
  const ended = new Promise((resolve) => stream.on('end', resolve));
  const nextAnswer = () => (answers.length ? Promise.resolve(answers.shift())
    : new Promise((resolve) => waiting.push(resolve)));

  let lastDeadline = nanos(leaseTimer.deadline);
  const beats = 3;
  for (let sequence = 1; sequence <= beats; sequence++) {
    stream.write({ timer: { namespace, id: leaseTimer.id }, sequence: String(sequence) });
    const answer = await nextAnswer();
    check(!(answer instanceof Error), `KeepAlive failed: ${answer.message}`);
    check(!answer.error, `heartbeat ${sequence} refused: ${answer.error && answer.error.message}`);
    check(answer.sequence === String(sequence) && answer.id === leaseTimer.id, 'answer matches heartbeat');
    check(nanos(answer.deadline) >= lastDeadline, 'each heartbeat pushes the deadline on');
    lastDeadline = nanos(answer.deadline);
    await new Promise((resolve) => setTimeout(resolve, ttlMs / 10)); // the heartbeat cadence
  }
  stream.end(); // no more heartbeats
  await ended;

  // The supervisor's side: the lease's expiration, once the ttl passes without heartbeats.
  const expiration = await subscription.next('the lease after its heartbeats stopped');
  check(expiration.timer.id === leaseTimer.id, `expected the lease, got ${expiration.timer.id}`);
  check(expiration.lease, 'marked as a lease expiration');
  check(nanos(expiration.fired_at) >= lastDeadline, "not before the last heartbeat's deadline");
  const ack = await call(client, 'Ack', { namespace, delivery_ids: [expiration.delivery_id] });
  check(ack.acknowledged === 1, 'lease expiration acknowledged');
  console.log(`lease ok: ${beats} heartbeats kept it alive; it expired once they stopped`);
}

/**
 * A cron timer (09:00 on weekdays in Berlin), replaced under its key, then rescheduled; and
 * Redrive, which finds nothing dead in a fresh namespace.
 */
async function schedules(client, namespace) {
  const created = await call(client, 'NewTimeout', {
    timer: { namespace, key: 'standup', cron: '0 9 * * MON-FRI', time_zone: 'Europe/Berlin', payload: Buffer.from('standup') },
  });
  const cronTimer = created.timer;
  check(created.created && cronTimer.cron === '0 9 * * MON-FRI' && cronTimer.time_zone === 'Europe/Berlin',
    'the cron timer shows its schedule');
  check(nanos(cronTimer.deadline) > BigInt(Date.now()) * 1_000_000n, 'its next firing is ahead');

  // replace: true with the key: the pending timer is replaced whole, keeping its id.
  const replaced = await call(client, 'NewTimeout', {
    timer: { namespace, key: 'standup', cron: '30 9 * * MON-FRI', time_zone: 'Europe/Berlin', replace: true },
  });
  check(!replaced.created && replaced.replaced && replaced.timer.id === cronTimer.id, 'replaced under its key');
  check(replaced.timer.cron === '30 9 * * MON-FRI', 'the new schedule');

  // Reschedule moves this firing (the schedule carries on after it), with a new payload.
  const newDeadline = { seconds: '1893488400', nanos: 0 }; // 2030-01-01T09:00:00Z
  const { timer: moved } = await call(client, 'Reschedule', {
    timer: { namespace, key: 'standup' }, deadline: newDeadline, payload: Buffer.from('moved'),
  });
  check(moved.deadline.seconds === newDeadline.seconds, 'rescheduled to the new deadline');
  const { timer: got } = await call(client, 'Get', { timer: { namespace, id: moved.id } });
  check(got.payload.toString() === 'moved', 'the new payload');
  await call(client, 'Cancel', { timer: { namespace, id: moved.id } });

  // Redrive: no ids means every dead expiration of the namespace (none here); ids that are not
  // dead expirations come back in not_dead.
  const all = await call(client, 'Redrive', { namespace });
  check(all.redriven === 0 && all.not_dead.length === 0, 'nothing dead to redrive');
  const named = await call(client, 'Redrive', { namespace, delivery_ids: ['00000000000000ff'] });
  check(named.not_dead.length === 1 && named.not_dead[0] === '00000000000000ff', 'an unknown id is not dead');
  console.log('schedules ok: a cron timer was registered, replaced and rescheduled; redrive found nothing dead');
}

async function main() {
  const Timers = loadTimers();
  const client = new Timers(ADDR, grpc.credentials.createInsecure(), { 'grpc.enable_http_proxy': 0 });
  await new Promise((resolve, reject) => client.waitForReady(Date.now() + PATIENCE_MS,
    (error) => (error ? reject(new ExampleFailed(`cannot reach tickd at ${ADDR}: ${error.message}`)) : resolve())));
  const namespace = `node-example-${crypto.randomBytes(4).toString('hex')}`;
  const subscription = new Subscription(client, namespace);
  try {
    await timeouts(client, namespace, subscription);
    await lease(client, namespace, subscription);
    await schedules(client, namespace);
  } finally {
    subscription.close();
    client.close();
  }
  console.log('all ok');
}

main().catch((error) => {
  const message = error instanceof ExampleFailed ? error.message
    : error.code !== undefined ? `${grpc.status[error.code]}: ${error.details}` : error.stack;
  console.error(`FAILED: ${message}`);
  process.exit(1);
});
