//! `tickd-bench e2e`: the whole life of a timer, from registration to acknowledged delivery.
//!
//! S sharing subscribers (large `max_unacked`) subscribe to a fresh namespace; then timers are
//! registered at a steady R/s for T seconds — a NewTimeouts batch about every millisecond,
//! sized by how far the clock is from `start + issued / R` (paced against the start instant,
//! so sleep jitter never lowers the rate) — each due `--delay-ms` after registration. Every
//! subscriber stamps each expiration with the wall clock as it is received and hands its
//! delivery id to an acker task, which acknowledges in batches (every ~1 ms or 1,000 ids)
//! concurrently with receiving. Lateness = receipt wall time − the deadline the registration
//! response gave. After the last deadline plus `--grace-ms` (or once everything arrived) it
//! prints `e2e rate=.. registered=.. fired_per_s=.. p50_late_ms=.. p99_late_ms=..
//! max_late_ms=.. lost=.. duplicated=.. errors=.. background=..`, where lost = registered ids never
//! received and duplicated = ids received more than once. With `--late-windows-ms`, it also
//! prints to stderr where in the run the late deliveries fall (one line per window of
//! deadlines holding any), which is how a tail that comes back once a `--delay-ms` shows.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tickd::proto::timers_client::TimersClient;
use tickd::proto::{
    new_timeout_result, subscribe_request, AckRequest, NewTimeoutsRequest, SubscribeRequest,
    TimerSpec,
};
use tokio::sync::{mpsc, watch, Semaphore};
use tonic::transport::Channel;

use crate::client::{
    duration, fresh_namespace, quantile, registration, timestamp_nanos, wall_nanos, ClientArgs,
};

#[derive(Debug, clap::Args)]
pub(crate) struct E2eArgs {
    #[command(flatten)]
    client: ClientArgs,
    /// Timers registered per second.
    #[arg(long, default_value_t = 100_000)]
    rate: u64,
    /// Seconds of registration.
    #[arg(long, default_value_t = 10)]
    secs: u64,
    /// Each timer is due this long after it is registered.
    #[arg(long, default_value_t = 1_000)]
    delay_ms: u64,
    /// Sharing subscribers.
    #[arg(long, default_value_t = 4)]
    subscribers: usize,
    /// Unacknowledged deliveries each subscriber may hold.
    #[arg(long, default_value_t = 20_000)]
    max_unacked: u32,
    /// How long after the last deadline stragglers are still awaited.
    #[arg(long, default_value_t = 2_000)]
    grace_ms: u64,
    /// Registration calls in flight at most.
    #[arg(long, default_value_t = 32)]
    register_in_flight: usize,
    /// Payload bytes of each timer.
    #[arg(long, default_value_t = 16)]
    payload_bytes: usize,
    /// Timers registered before the measurement, in another namespace, due an hour later:
    /// the pending set the measured timers wait and fire beside.
    #[arg(long, default_value_t = 0)]
    background: u64,
    /// Also print, to stderr, one `e2e_late_window` line per window of this many
    /// milliseconds of deadlines (counted from the first) in which a delivery came later
    /// than `--late-over-ms`: when the late ones fall (0: no such lines).
    #[arg(long, default_value_t = 0)]
    late_windows_ms: u64,
    /// What counts as late for `--late-windows-ms`.
    #[arg(long, default_value_t = 6)]
    late_over_ms: u64,
    /// Receive the expirations as a push sink on this address instead of subscribing
    /// (tickd runs with `--sink NAMESPACE=http://ADDR/#protobuf`; see `push.rs`).
    #[arg(long)]
    push_listen: Option<std::net::SocketAddr>,
    /// Receive the expirations from the broker a push sink adds them to instead:
    /// `nats://HOST:PORT/SUBJECT` or `redis://HOST:PORT/STREAM` (tickd runs with
    /// `--sink NAMESPACE=URL#protobuf`; see `push.rs`).
    #[arg(long, conflicts_with = "push_listen")]
    push_from: Option<String>,
    /// The namespace to register in (default: a fresh one); a push sink needs it known.
    #[arg(long)]
    namespace: Option<String>,
}

/// Ids acknowledged per Ack call at most, and how long an acker gathers ids before sending.
const ACK_BATCH: usize = 1_000;
const ACK_GATHER: Duration = Duration::from_millis(1);
/// Ack calls in flight per subscriber.
const ACKS_IN_FLIGHT: usize = 4;
/// Items per registration call at most (tickd's default --max-batch is 10,000).
const MAX_REGISTER_BATCH: u64 = 5_000;

/// Registers `count` timers due in an hour (so none fires during the run), in batches of
/// [`MAX_REGISTER_BATCH`] over every connection, and waits until all are acknowledged.
async fn register_background(
    channels: &[Channel],
    count: u64,
    payload_bytes: usize,
) -> Result<(), String> {
    let spec = TimerSpec {
        namespace: fresh_namespace("bench-e2e-background"),
        delay: Some(duration(Duration::from_secs(3600))),
        payload: Bytes::from(vec![0x5a; payload_bytes]),
        ..TimerSpec::default()
    };
    let mut calls = tokio::task::JoinSet::new();
    let mut issued = 0u64;
    for channel in channels.iter().cycle() {
        if issued >= count {
            break;
        }
        // A few calls in flight per connection: enough to keep the server busy.
        while calls.len() >= 2 * channels.len() {
            calls
                .join_next()
                .await
                .expect("a call in flight")
                .expect("a registration task")?;
        }
        let size = (count - issued).min(MAX_REGISTER_BATCH);
        let mut client = TimersClient::new(channel.clone());
        let request = registration(NewTimeoutsRequest {
            timers: vec![spec.clone(); size as usize],
        });
        calls.spawn(async move {
            let results = client
                .new_timeouts(request)
                .await
                .map_err(|status| format!("background registration: {status}"))?
                .into_inner()
                .results;
            match results.iter().find_map(|result| match &result.result {
                Some(new_timeout_result::Result::Error(error)) => Some(error.message.clone()),
                _ => None,
            }) {
                Some(message) => Err(format!("background registration: {message}")),
                None => Ok(()),
            }
        });
        issued += size;
    }
    while let Some(call) = calls.join_next().await {
        call.expect("a registration task")?;
    }
    Ok(())
}

/// One received expiration: timer id and receipt wall time (ns since the epoch).
type Receipt = (String, i64);

pub(crate) fn run(args: E2eArgs) {
    let E2eArgs {
        client,
        rate,
        secs,
        delay_ms,
        subscribers,
        max_unacked,
        grace_ms,
        register_in_flight,
        payload_bytes,
        background,
        late_windows_ms,
        late_over_ms,
        push_listen,
        push_from,
        namespace,
    } = args;
    client.run(|channels| async move {
        register_background(&channels, background, payload_bytes).await?;
        let namespace = namespace.unwrap_or_else(|| fresh_namespace("bench-e2e"));
        let received = Arc::new(AtomicU64::new(0));
        let (stop, stopped) = watch::channel(false);
        let mut subscriber_tasks = Vec::new();
        if let Some(listen) = push_listen {
            subscriber_tasks
                .push(crate::push::receive(listen, received.clone(), stopped.clone()).await?);
        }
        if let Some(url) = &push_from {
            subscriber_tasks.push(
                crate::push::receive_from_broker(url, received.clone(), stopped.clone()).await?,
            );
        }
        let pushed = push_listen.is_some() || push_from.is_some();
        for index in 0..subscribers.max(1) * usize::from(!pushed) {
            let client = TimersClient::new(channels[index % channels.len()].clone());
            subscriber_tasks.push(
                subscribe(
                    client,
                    namespace.clone(),
                    max_unacked,
                    received.clone(),
                    stopped.clone(),
                )
                .await?,
            );
        }

        // Registration, paced against the start instant.
        let spec = TimerSpec {
            namespace: namespace.clone(),
            delay: Some(duration(Duration::from_millis(delay_ms))),
            payload: Bytes::from(vec![0x5a; payload_bytes]),
            ..TimerSpec::default()
        };
        let total = rate * secs;
        let in_flight = Arc::new(Semaphore::new(register_in_flight.max(1)));
        let mut calls = Vec::new();
        let start = Instant::now();
        let mut issued = 0u64;
        let mut tick = tokio::time::interval(Duration::from_millis(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        while issued < total {
            tick.tick().await;
            let due = ((start.elapsed().as_secs_f64() * rate as f64) as u64).min(total);
            while issued < due {
                let count = (due - issued).min(MAX_REGISTER_BATCH);
                let permit = in_flight.clone().acquire_owned().await.expect("semaphore");
                let mut client = TimersClient::new(channels[calls.len() % channels.len()].clone());
                let request = registration(NewTimeoutsRequest {
                    timers: vec![spec.clone(); count as usize],
                });
                calls.push(tokio::spawn(async move {
                    let answer = client.new_timeouts(request).await;
                    drop(permit);
                    answer
                }));
                issued += count;
            }
        }
        let registering_secs = start.elapsed().as_secs_f64();
        let mut deadlines: HashMap<String, (i64, u32, i64)> =
            HashMap::with_capacity(total as usize);
        let mut errors = 0u64;
        let mut first_error = None;
        for call in calls {
            match call.await.expect("registration task") {
                Ok(response) => {
                    for result in response.into_inner().results {
                        match result.result {
                            Some(new_timeout_result::Result::Registered(registered)) => {
                                let timer = registered.timer.unwrap_or_default();
                                let deadline =
                                    timer.deadline.as_ref().map(timestamp_nanos).unwrap_or(0);
                                deadlines.insert(timer.id, (deadline, 0, 0));
                            }
                            Some(new_timeout_result::Result::Error(error)) => {
                                errors += 1;
                                first_error.get_or_insert(error.message);
                            }
                            None => errors += 1,
                        }
                    }
                }
                Err(status) => {
                    errors += 1;
                    first_error.get_or_insert(status.to_string());
                }
            }
        }
        if let Some(message) = &first_error {
            eprintln!("tickd-bench: {errors} registration errors, first: {message}");
        }
        let registered = deadlines.len() as u64;
        let last_deadline = deadlines.values().map(|entry| entry.0).max().unwrap_or(0);

        // Wait for everything, or for the last deadline plus the grace.
        let give_up = last_deadline + grace_ms as i64 * 1_000_000;
        loop {
            let now = wall_nanos();
            if now >= give_up {
                break;
            }
            if received.load(Ordering::Relaxed) >= registered && now >= last_deadline {
                // Everything is in; a moment more shows duplicates, if any.
                tokio::time::sleep(Duration::from_millis(200)).await;
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let _ = stop.send(true);
        let mut receipts = Vec::new();
        for task in subscriber_tasks {
            let (mine, subscriber_errors) = task.await.expect("subscriber task");
            receipts.extend(mine);
            errors += subscriber_errors;
        }

        // Join receipts with registrations.
        let mut unexpected = 0u64;
        let (mut first_receipt, mut last_receipt) = (i64::MAX, i64::MIN);
        for (id, at) in receipts {
            match deadlines.get_mut(&id) {
                Some(entry) => {
                    if entry.1 == 0 {
                        entry.2 = at;
                        first_receipt = first_receipt.min(at);
                        last_receipt = last_receipt.max(at);
                    }
                    entry.1 += 1;
                }
                None => unexpected += 1,
            }
        }
        if unexpected > 0 {
            eprintln!("tickd-bench: {unexpected} expirations of timers this run did not register");
        }
        let mut lateness: Vec<i64> = Vec::with_capacity(deadlines.len());
        let (mut lost, mut duplicated) = (0u64, 0u64);
        for (deadline, count, at) in deadlines.values() {
            match count {
                0 => lost += 1,
                _ => {
                    lateness.push(at - deadline);
                    if *count > 1 {
                        duplicated += 1;
                    }
                }
            }
        }
        if late_windows_ms > 0 {
            print_late_windows(deadlines.values(), late_windows_ms, late_over_ms);
        }
        lateness.sort_unstable();
        let delivered = lateness.len() as f64;
        let span = (last_receipt - first_receipt).max(1) as f64 / 1e9;
        // Shifted so that the unsigned quantile helper sorts signed values right.
        let shifted: Vec<u64> = lateness
            .iter()
            .map(|late| (*late as i128 - i64::MIN as i128) as u64)
            .collect();
        let late_ms = |q: f64| {
            if shifted.is_empty() {
                return "nan".to_string();
            }
            let value = (quantile(&shifted, q) as i128 + i64::MIN as i128) as f64 / 1e6;
            format!("{value:.3}")
        };
        Ok(format!(
            "e2e rate={rate} registered={registered} registered_per_s={:.0} fired_per_s={:.0} \
             p50_late_ms={} p99_late_ms={} max_late_ms={} lost={lost} duplicated={duplicated} \
             errors={errors} background={background}",
            registered as f64 / registering_secs,
            if delivered > 0.0 {
                delivered / span
            } else {
                0.0
            },
            late_ms(0.50),
            late_ms(0.99),
            late_ms(1.0),
        ))
    });
}

/// The `--late-windows-ms` lines: `e2e_late_window start_ms=.. late=.. max_late_ms=..` for
/// each window of deadlines, `window_ms` long, that holds deliveries later than `over_ms`
/// (`late` of them). `entries`: each timer's (deadline, deliveries, first receipt).
fn print_late_windows<'a>(
    entries: impl Iterator<Item = &'a (i64, u32, i64)> + Clone,
    window_ms: u64,
    over_ms: u64,
) {
    let first = entries.clone().map(|entry| entry.0).min().unwrap_or(0);
    let (window, over) = (window_ms as i64 * 1_000_000, over_ms as i64 * 1_000_000);
    let mut windows = std::collections::BTreeMap::<i64, (u64, i64)>::new();
    for (deadline, count, at) in entries {
        let late = at - deadline;
        if *count > 0 && late > over {
            let entry = windows.entry((deadline - first) / window).or_default();
            entry.0 += 1;
            entry.1 = entry.1.max(late);
        }
    }
    for (index, (late, max_late)) in windows {
        eprintln!(
            "e2e_late_window start_ms={} late={late} max_late_ms={:.3}",
            index * window_ms as i64,
            max_late as f64 / 1e6
        );
    }
}

/// Opens one sharing subscription and spawns its receiver (which stamps receipts) and its
/// acker. The task answers the receipts and the number of errors once `stopped` turns true.
async fn subscribe(
    mut client: TimersClient<Channel>,
    namespace: String,
    max_unacked: u32,
    received: Arc<AtomicU64>,
    mut stopped: watch::Receiver<bool>,
) -> Result<tokio::task::JoinHandle<(Vec<Receipt>, u64)>, String> {
    let request = SubscribeRequest {
        namespace: namespace.clone(),
        mode: subscribe_request::Mode::Shared as i32,
        ack_timeout: Some(duration(Duration::from_secs(30))),
        max_unacked,
        auto_ack: false,
    };
    let mut stream = client
        .subscribe(request)
        .await
        .map_err(|status| format!("subscribing: {status}"))?
        .into_inner();
    let (to_ack, pending_acks) = mpsc::unbounded_channel();
    let acker = tokio::spawn(acker(client, namespace, pending_acks));
    Ok(tokio::spawn(async move {
        let mut receipts = Vec::new();
        let mut errors = 0u64;
        loop {
            tokio::select! {
                message = stream.message() => match message {
                    Ok(Some(message)) => {
                        let at = wall_nanos();
                        let Some(expiration) = message.expiration else { continue };
                        let id = expiration.timer.map(|timer| timer.id).unwrap_or_default();
                        receipts.push((id, at));
                        received.fetch_add(1, Ordering::Relaxed);
                        let _ = to_ack.send(expiration.delivery_id);
                    }
                    Ok(None) => break,
                    Err(status) => {
                        eprintln!("tickd-bench: subscription failed: {status}");
                        errors += 1;
                        break;
                    }
                },
                _ = stopped.wait_for(|stop| *stop) => break,
            }
        }
        drop(to_ack);
        errors += acker.await.expect("acker task");
        (receipts, errors)
    }))
}

/// Acknowledges delivery ids as they come, in batches of up to ACK_BATCH gathered for about
/// ACK_GATHER, with up to ACKS_IN_FLIGHT Ack calls outstanding. Answers the failed calls.
async fn acker(
    client: TimersClient<Channel>,
    namespace: String,
    mut ids: mpsc::UnboundedReceiver<String>,
) -> u64 {
    let in_flight = Arc::new(Semaphore::new(ACKS_IN_FLIGHT));
    let mut calls = Vec::new();
    let mut batch = Vec::with_capacity(ACK_BATCH);
    let mut open = true;
    while open {
        if ids.recv_many(&mut batch, ACK_BATCH).await == 0 {
            break;
        }
        let gather_until = tokio::time::Instant::now() + ACK_GATHER;
        while batch.len() < ACK_BATCH {
            let room = ACK_BATCH - batch.len();
            match tokio::time::timeout_at(gather_until, ids.recv_many(&mut batch, room)).await {
                Ok(0) => {
                    open = false;
                    break;
                }
                Ok(_) => {}
                Err(_) => break,
            }
        }
        let permit = in_flight.clone().acquire_owned().await.expect("semaphore");
        let mut client = client.clone();
        let request = AckRequest {
            namespace: namespace.clone(),
            delivery_ids: std::mem::replace(&mut batch, Vec::with_capacity(ACK_BATCH)),
        };
        calls.push(tokio::spawn(async move {
            let answer = client.ack(request).await;
            drop(permit);
            answer
        }));
    }
    let mut failed = 0;
    for call in calls {
        if let Err(status) = call.await.expect("ack task") {
            if failed == 0 {
                eprintln!("tickd-bench: ack failed: {status}");
            }
            failed += 1;
        }
    }
    failed
}
