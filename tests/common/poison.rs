//! A push sink's failure isolation, as an operator meets it: ten "poison" expirations the
//! sink answers 500 whatever the attempt (a handler raising on their payload, which most
//! web frameworks answer so), and, once each has failed, 200 healthy ones due over 2.5 s,
//! answered 200. The same scenario for one node and for replicas ([`run`]).
//!
//! What it asserts holds by rule, whatever the machine's speed: every healthy expiration
//! is pushed once, as attempt 1, and acknowledged; every poison one is pushed exactly
//! `max_attempts` times and ends dead; nothing else is dead. How late the healthy ones
//! were is printed (a figure, not a threshold: speed belongs in benchmarks).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tonic::transport::Channel;

use super::http_sink::{attempts_of, keys, HttpSink, Push, Script};
use super::rpc::{register_all, spec, wait_for_dead};
use tickd::proto::timers_client::TimersClient;

pub(crate) const POISON: usize = 10;
pub(crate) const HEALTHY: usize = 200;
/// How many retries of poison expirations the sink has failed (after their first pushes)
/// before the healthy ones are registered.
const FAILED_AGAIN_BEFORE_HEALTHY: usize = 2;
/// Over how long the healthy expirations fall due.
const HEALTHY_SPREAD: Duration = Duration::from_millis(2_500);
const POISON_PAYLOAD: &[u8] = b"poison";
/// [`POISON_PAYLOAD`] as the JSON body carries it (proto3 JSON: base64).
const POISON_IN_JSON: &str = "\"cG9pc29u\"";

/// Answers 500 to every push of a poison expiration, 200 to the rest.
pub(crate) fn script() -> Script {
    Arc::new(|push, _| (if is_poison(push) { 500 } else { 200 }, None))
}

fn is_poison(push: &Push) -> bool {
    std::str::from_utf8(&push.body).is_ok_and(|body| body.contains(POISON_IN_JSON))
}

/// The timer id an idempotency key (`NAMESPACE/TIMERID/FIRING`) names.
fn timer_of(push: &Push) -> &str {
    push.key.split('/').nth(1).unwrap_or_default()
}

/// How late the healthy expirations reached the sink.
#[derive(Debug)]
pub(crate) struct Lateness {
    pub median: Duration,
    pub max: Duration,
}

/// How many pushes of a poison expiration the sink may see before it is dead.
#[derive(Clone, Copy, Debug)]
pub(crate) enum PoisonPushes {
    /// One per attempt, `--max-attempts` of them: tickd ran throughout.
    Exactly(u32),
    /// Attempts in rising order, none past `--max-attempts`: tickd was killed meanwhile,
    /// and an attempt counted (logged) as it left may never have reached the sink.
    AtMost(u32),
}

/// Runs the scenario against a tickd pushing `namespace` to `sink` (with [`script`]) with
/// `--max-attempts max_attempts`, registering through `client`; asserts what holds by
/// rule and returns how late the healthy ones were.
pub(crate) async fn run(
    client: &mut TimersClient<Channel>,
    sink: &HttpSink,
    namespace: &str,
    max_attempts: u32,
) -> Lateness {
    let poison = fail_poison(client, sink, namespace).await;
    healthy_among_poison(
        client,
        sink,
        namespace,
        &poison,
        PoisonPushes::Exactly(max_attempts),
    )
    .await
}

/// The scenario's first half: registers the poison expirations and waits until each has
/// failed, and some have failed again. Their timer ids.
pub(crate) async fn fail_poison(
    client: &mut TimersClient<Channel>,
    sink: &HttpSink,
    namespace: &str,
) -> BTreeSet<String> {
    let poison_specs = (0..POISON)
        .map(|_| spec(namespace, 100, POISON_PAYLOAD))
        .collect();
    let poison = register_all(client, poison_specs)
        .await
        .into_iter()
        .collect();
    // Each failed, and then some failed again, as a second or so of them does: an open
    // circuit and probes that fail are what the healthy expirations then meet.
    sink.wait_for(
        "the poison expirations failed, then failed again",
        |pushes| {
            let poison_pushes = pushes.iter().filter(|push| is_poison(push));
            keys_of(pushes, is_poison).len() == POISON
                && poison_pushes.count() >= POISON + FAILED_AGAIN_BEFORE_HEALTHY
        },
    )
    .await;
    poison
}

/// The scenario's second half: registers the healthy expirations, waits for each and for
/// every `poison` one to be dead, and asserts what the sink received.
pub(crate) async fn healthy_among_poison(
    client: &mut TimersClient<Channel>,
    sink: &HttpSink,
    namespace: &str,
    poison: &BTreeSet<String>,
    poison_pushes: PoisonPushes,
) -> Lateness {
    let delays: Vec<u64> = (0..HEALTHY as u64)
        .map(|index| index * HEALTHY_SPREAD.as_millis() as u64 / HEALTHY as u64)
        .collect();
    let healthy_specs = delays
        .iter()
        .enumerate()
        .map(|(index, delay)| spec(namespace, *delay, format!("healthy-{index}").as_bytes()))
        .collect();
    let registered_at = Instant::now();
    let healthy_ids = register_all(client, healthy_specs).await;
    let due: BTreeMap<String, Instant> = healthy_ids
        .iter()
        .zip(&delays)
        .map(|(id, delay)| (id.clone(), registered_at + Duration::from_millis(*delay)))
        .collect();
    sink.wait_for("every healthy expiration", |pushes| {
        keys_of(pushes, |push| {
            !is_poison(push) && due.contains_key(timer_of(push))
        })
        .len()
            == HEALTHY
    })
    .await;
    let dead = wait_for_dead(&*client, namespace, POISON, || async {
        format!(
            "{:#?}",
            sink.pushes()
                .iter()
                .filter(|push| is_poison(push))
                .collect::<Vec<_>>()
        )
    })
    .await;

    let pushes = sink.pushes();
    let dead_ids: BTreeSet<String> = dead
        .dead_expirations
        .iter()
        .map(|expiration| expiration.timer.as_ref().expect("a timer").id.clone())
        .collect();
    assert_eq!(
        &dead_ids, poison,
        "the dead are the poison expirations, all of them"
    );
    for key in keys(&pushes) {
        let attempts = attempts_of(&pushes, &key);
        let timer = key.split('/').nth(1).unwrap_or_default();
        if poison.contains(timer) {
            check_poison_pushes(&key, &attempts, poison_pushes);
        } else {
            assert!(
                due.contains_key(timer),
                "a push of a timer never registered: {key}"
            );
            assert_eq!(attempts, [1], "a healthy expiration pushed once: {key}");
        }
    }
    let mut late: Vec<Duration> = pushes
        .iter()
        .filter(|push| !is_poison(push))
        .map(|push| push.at.saturating_duration_since(due[timer_of(push)]))
        .collect();
    late.sort();
    Lateness {
        median: late[late.len() / 2],
        max: late[late.len() - 1],
    }
}

fn check_poison_pushes(key: &str, attempts: &[u32], expected: PoisonPushes) {
    match expected {
        PoisonPushes::Exactly(max_attempts) => assert_eq!(
            attempts,
            (1..=max_attempts).collect::<Vec<_>>(),
            "a poison expiration is pushed until it is out of attempts, no more: {key}"
        ),
        PoisonPushes::AtMost(max_attempts) => {
            assert!(
            attempts.windows(2).all(|pair| pair[0] < pair[1])
                && attempts.iter().all(|attempt| (1..=max_attempts).contains(attempt)),
            "a poison expiration's attempts rise and stop at --max-attempts: {key} {attempts:?}"
        )
        }
    }
}

/// The idempotency keys of the pushes `filter` picks.
fn keys_of(pushes: &[Push], filter: impl Fn(&Push) -> bool) -> BTreeSet<&str> {
    pushes
        .iter()
        .filter(|push| filter(push))
        .map(|push| push.key.as_str())
        .collect()
}
