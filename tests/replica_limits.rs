//! Replicated mode keeps the single node's limits: `--max-namespaces`,
//! `--max-buffered-total`, `--max-dead-total`, and Redrive's per-call maximum, end to end
//! through real `tickd` replicas sharing a real PostgreSQL (and, for Redrive, one node).
//!
//! - the namespace cap is exact across replicas: registrations racing into new namespaces
//!   on two replicas admit exactly the cap, the rest are refused with RESOURCE_EXHAUSTED
//!   naming the flag and leave nothing behind, and a namespace that empties frees its place;
//! - expirations fired beyond the buffered total go to the dead list (never delivered), the
//!   dead beyond the dead total are dropped oldest first and counted, and a Redrive finds
//!   no room while the buffer is full;
//! - Redrive of a namespace holding more dead expirations than one call takes completes
//!   over several calls, and delivers each again exactly once;
//! - a replica charges its wheel and streams to its memory budget, and `--max-attempts`
//!   beyond what a delivery id carries is refused at start-up.
//!
//! Nothing waits for time to pass as a way of synchronising: tests await deliveries and
//! poll the database, the API or `/metrics` for states no event announces (an expiration
//! fired, the periodic trim done), each within a bounded patience.

mod common;

use std::collections::BTreeSet;

use common::metrics::scrape;
use common::postgres::explain;
use common::replica_set::{ReplicaSet, PATIENCE};
use common::tooling::skip_postgres;
use common::*;
use tickd::proto::timers_client::TimersClient;
use tonic::transport::Channel;
use tonic::Code;

/// What one Redrive call sends back at most (`MAX_REDRIVE` in the crate).
const MAX_REDRIVE: u32 = 1_000;

/// Long enough never to fire during a test.
const NEVER_MS: u64 = 3_600_000;

async fn try_register(
    client: &mut TimersClient<Channel>,
    namespace: &str,
) -> Result<Timer, tonic::Status> {
    let response = client
        .new_timeout(NewTimeoutRequest {
            timer: Some(spec(namespace, NEVER_MS, b"")),
        })
        .await?;
    Ok(response.into_inner().timer.expect("timer"))
}

fn assert_namespace_refused(result: Result<Timer, tonic::Status>, cap: usize) {
    let status = result.expect_err("a namespace beyond the cap must be refused");
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(
        status
            .message()
            .contains(&format!("--max-namespaces {cap}")),
        "{status:?}"
    );
}

async fn count(set: &ReplicaSet, statement: &str, namespace: &str) -> i64 {
    set.db
        .query_one(statement, &[&namespace])
        .await
        .unwrap_or_else(|error| panic!("{}", explain(&error)))
        .get(0)
}

/// The sum of `series` over the replicas' `/metrics`.
async fn summed(set: &ReplicaSet, ids: &[&str], series: &str) -> f64 {
    let mut total = 0.0;
    for id in ids {
        total += scrape(set.metrics_addr(id)).await.value(series);
    }
    total
}

async fn redrive(
    client: &mut TimersClient<Channel>,
    namespace: &str,
    delivery_ids: Vec<String>,
) -> Result<RedriveResponse, tonic::Status> {
    let response = client
        .redrive(RedriveRequest {
            namespace: namespace.into(),
            delivery_ids,
        })
        .await?;
    Ok(response.into_inner())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_namespace_cap_holds_across_replicas() {
    if skip_postgres("the_namespace_cap_holds_across_replicas") {
        return;
    }
    const CAP: usize = 3;
    const RACERS: usize = 10;
    let ids = ["r1", "r2"];
    let set = ReplicaSet::start(&ids, &["--max-namespaces", &CAP.to_string()]).await;

    // Ten registrations into ten new namespaces, at once, half through each replica.
    let mut racing = tokio::task::JoinSet::new();
    for index in 0..RACERS {
        let mut client = set.client(ids[index % 2]);
        racing.spawn(async move {
            let namespace = format!("race-{index}");
            (
                namespace.clone(),
                try_register(&mut client, &namespace).await,
            )
        });
    }
    let mut admitted = BTreeSet::new();
    while let Some(joined) = racing.join_next().await {
        let (namespace, result) = joined.expect("racer");
        match result {
            Ok(_) => {
                admitted.insert(namespace);
            }
            Err(_) => assert_namespace_refused(result, CAP),
        }
    }
    assert_eq!(
        admitted.len(),
        CAP,
        "exactly the cap is admitted: {admitted:?}"
    );
    let holding: i64 = set
        .db
        .query_one("SELECT count(DISTINCT namespace) FROM tickd_timers", &[])
        .await
        .unwrap_or_else(|error| panic!("{}", explain(&error)))
        .get(0);
    assert_eq!(holding as usize, CAP, "a refused registration left a timer");

    // Registrations into live namespaces still go through, on either replica; a batch is
    // answered item by item.
    let live: Vec<&String> = admitted.iter().collect();
    let mut r2 = set.client("r2");
    try_register(&mut r2, live[0])
        .await
        .expect("a live namespace");
    let results = r2
        .new_timeouts(NewTimeoutsRequest {
            timers: vec![
                spec(live[1], NEVER_MS, b""),
                spec("batch-new", NEVER_MS, b""),
                spec(live[2], NEVER_MS, b""),
            ],
        })
        .await
        .expect("new_timeouts")
        .into_inner()
        .results;
    let outcome: Vec<Option<i32>> = results
        .iter()
        .map(|result| match &result.result {
            Some(new_timeout_result::Result::Registered(_)) => None,
            Some(new_timeout_result::Result::Error(error)) => Some(error.code),
            None => panic!("unanswered item"),
        })
        .collect();
    assert_eq!(
        outcome,
        [None, Some(Code::ResourceExhausted as i32), None],
        "{results:?}"
    );
    let refusals = summed(
        &set,
        &ids,
        "tickd_refusals_total{reason=\"max_namespaces\"}",
    )
    .await;
    assert_eq!(refusals as usize, RACERS - CAP + 1);

    // Emptied, a namespace stops counting once the trim forgets it; then a new one fits,
    // and the cap is full again.
    let emptied = live[1].clone();
    let mut r1 = set.client("r1");
    for id in list_pending(&mut r1, &emptied).await.into_keys() {
        assert!(cancel(&mut r1, by_id(&emptied, &id)).await);
    }
    set.eventually("an emptied namespace frees its place", || {
        let mut client = set.client("r1");
        async move {
            match try_register(&mut client, "late-comer").await {
                Ok(_) => Ok(()),
                Err(status) => Err(format!("{status:?}")),
            }
        }
    })
    .await;
    assert_namespace_refused(try_register(&mut r2, &emptied).await, CAP);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_buffered_and_dead_totals_hold_across_replicas() {
    if skip_postgres("the_buffered_and_dead_totals_hold_across_replicas") {
        return;
    }
    const BUFFERED_TOTAL: usize = 3;
    const DEAD_TOTAL: usize = 4;
    const TIMERS: usize = 10;
    let ids = ["r1", "r2"];
    let arguments = [
        "--max-buffered-total",
        &BUFFERED_TOTAL.to_string(),
        "--max-dead-total",
        &DEAD_TOTAL.to_string(),
    ]
    .map(String::from);
    let arguments: Vec<&str> = arguments.iter().map(String::as_str).collect();
    let set = ReplicaSet::start(&ids, &arguments).await;
    let namespaces = ["totals-a", "totals-b"];

    // One at a time, through both replicas into both namespaces, each fired before the
    // next is registered: which ones found room is then their order.
    let mut fired = Vec::new();
    for index in 0..TIMERS {
        let namespace = namespaces[index % 2];
        let mut client = set.client(ids[index % 2]);
        let timer = register(&mut client, spec(namespace, 50, b"")).await;
        let id = u64::from_str_radix(&timer.id, 16).expect("a hexadecimal id") as i64;
        set.eventually("the timer fired", || {
            let db = &set.db;
            async move {
                let left: i64 = db
                    .query_one("SELECT count(*) FROM tickd_timers WHERE id = $1", &[&id])
                    .await
                    .map_err(|error| explain(&error))?
                    .get(0);
                if left == 0 {
                    Ok(())
                } else {
                    Err("not fired yet".into())
                }
            }
        })
        .await;
        fired.push((namespace, timer.id));
    }

    // The first ones wait for a subscriber; the rest went to the dead list, of which the
    // trim keeps the newest `DEAD_TOTAL`, dropping (and counting) the oldest.
    let waiting: BTreeSet<String> = set
        .db
        .query(
            "SELECT timer_id FROM tickd_expirations WHERE attempts = 0 AND acked_at IS NULL",
            &[],
        )
        .await
        .unwrap_or_else(|error| panic!("{}", explain(&error)))
        .iter()
        .map(|row| format!("{:016x}", row.get::<_, i64>(0)))
        .collect();
    let first: BTreeSet<String> = fired[..BUFFERED_TOTAL]
        .iter()
        .map(|(_, id)| id.clone())
        .collect();
    assert_eq!(waiting, first);
    let mut client = set.client("r1");
    set.eventually("the dead beyond the total are dropped", || {
        let mut client = client.clone();
        async move {
            let page = pending_with_dead(&mut client, "").await;
            match page.dead_count as usize {
                DEAD_TOTAL => Ok(()),
                count => Err(format!("{count} dead")),
            }
        }
    })
    .await;
    let page = pending_with_dead(&mut client, "").await;
    let newest: Vec<String> = fired[TIMERS - DEAD_TOTAL..]
        .iter()
        .map(|(_, id)| id.clone())
        .collect();
    let dead: Vec<String> = page.dead_expirations.iter().map(timer_id).collect();
    assert_eq!(dead, newest, "the newest dead are kept, oldest first");
    assert!(
        page.dead_expirations.iter().all(|dead| dead.attempt == 0),
        "never delivered: {page:?}"
    );
    let overflowed = (TIMERS - BUFFERED_TOTAL) as f64;
    let dropped = (TIMERS - BUFFERED_TOTAL - DEAD_TOTAL) as f64;
    assert_eq!(
        summed(&set, &ids, "tickd_expirations_dead_total").await,
        overflowed
    );
    set.eventually("the dropped are counted", || async {
        match summed(&set, &ids, "tickd_expirations_dead_dropped_total").await {
            counted if counted == dropped => Ok(()),
            counted => Err(format!("{counted} counted")),
        }
    })
    .await;

    // The buffer is full, so a Redrive finds no room, as on one node.
    let outcome = redrive(&mut client, namespaces[1], Vec::new())
        .await
        .expect("redrive");
    assert_eq!(outcome.redriven, 0, "{outcome:?}");

    // Subscribers get exactly the buffered ones.
    for namespace in namespaces {
        let expected: BTreeSet<String> = fired[..BUFFERED_TOTAL]
            .iter()
            .filter(|(of, _)| *of == namespace)
            .map(|(_, id)| id.clone())
            .collect();
        let mut stream = subscribe(&mut set.client("r2"), namespace, 30_000, 10).await;
        let mut received = BTreeSet::new();
        while received.len() < expected.len() {
            let expiration = within(next_expiration(&mut stream)).await;
            assert_eq!(expiration.attempt, 1);
            ack(&mut client, namespace, vec![expiration.delivery_id.clone()]).await;
            received.insert(timer_id(&expiration));
        }
        assert_eq!(received, expected);
    }
    let unsettled = count(
        &set,
        "SELECT count(*) FROM tickd_expirations WHERE attempts = 0 AND acked_at IS NULL \
         AND namespace LIKE $1",
        "totals-%",
    )
    .await;
    assert_eq!(unsettled, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redrive_beyond_one_call_completes_over_several_each_once() {
    if skip_postgres("redrive_beyond_one_call_completes_over_several_each_once") {
        return;
    }
    const NAMESPACE: &str = "redrive-many";
    const TIMERS: usize = 2_345;
    let set = ReplicaSet::start(&["r1", "r2"], &["--max-attempts", "1"]).await;
    let mut r1 = set.client("r1");
    let mut r2 = set.client("r2");
    let mut registered = BTreeSet::new();
    for chunk in specs(NAMESPACE, TIMERS, 100).chunks(1_000) {
        registered.extend(register_all(&mut r1, chunk.to_vec()).await);
    }

    // One delivery each, never acknowledged; the subscriber leaves, so all are dead.
    {
        let mut stream = subscribe(&mut r2, NAMESPACE, 600_000, TIMERS as u32).await;
        for _ in 0..TIMERS {
            let expiration = within(next_expiration(&mut stream)).await;
            assert_eq!(expiration.attempt, 1);
        }
    }
    set.eventually("every expiration is dead", || {
        let mut client = r1.clone();
        async move {
            match pending_with_dead(&mut client, NAMESPACE).await.dead_count as usize {
                TIMERS => Ok(()),
                count => Err(format!("{count} dead")),
            }
        }
    })
    .await;

    // More ids than one call takes: refused as a whole, naming the field.
    let dead = pending_with_dead(&mut r1, NAMESPACE).await.dead_expirations;
    let too_many: Vec<String> = dead
        .iter()
        .take(MAX_REDRIVE as usize + 1)
        .map(|dead| dead.delivery_id.clone())
        .collect();
    let status = redrive(&mut r2, NAMESPACE, too_many)
        .await
        .expect_err("more ids than one call takes");
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(status.message().contains("delivery_ids"), "{status:?}");
    assert_eq!(
        pending_with_dead(&mut r1, NAMESPACE).await.dead_count as usize,
        TIMERS,
        "a refused Redrive changed nothing"
    );

    // "All of them", call after call (on either replica) until one redrives fewer than
    // the maximum.
    let mut calls = Vec::new();
    let clients = [r1.clone(), r2.clone()];
    for call in 0..10 {
        let mut client = clients[call % 2].clone();
        let outcome = redrive(&mut client, NAMESPACE, Vec::new())
            .await
            .expect("redrive");
        assert!(outcome.not_dead.is_empty(), "{outcome:?}");
        calls.push(outcome.redriven);
        if outcome.redriven < MAX_REDRIVE {
            break;
        }
    }
    assert_eq!(calls, [MAX_REDRIVE, MAX_REDRIVE, (TIMERS % 1_000) as u32]);
    assert_eq!(pending_with_dead(&mut r1, NAMESPACE).await.dead_count, 0);

    // Each comes back once, from its first attempt.
    let mut stream = subscribe(&mut r1, NAMESPACE, 600_000, 500).await;
    let mut again = BTreeSet::new();
    while again.len() < TIMERS {
        let expiration = within(next_expiration(&mut stream)).await;
        assert_eq!(expiration.attempt, 1, "{expiration:?}");
        let acked = ack(&mut r2, NAMESPACE, vec![expiration.delivery_id.clone()]).await;
        assert_eq!(acked.acknowledged, 1);
        assert!(
            again.insert(timer_id(&expiration)),
            "redriven twice: {expiration:?}"
        );
    }
    assert_eq!(again, registered);
    let left = count(
        &set,
        "SELECT count(*) FROM tickd_expirations WHERE namespace = $1",
        NAMESPACE,
    )
    .await;
    assert_eq!(left, 0, "nothing is left to deliver again");
}

/// One node answers "all of them" the same way: at most the maximum per call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_node_redrives_at_most_the_same_maximum_per_call() {
    const NAMESPACE: &str = "redrive-one-node";
    const TIMERS: usize = 1_500;
    let server = TestServer::start_with(config(|config| {
        config.max_attempts = 1;
    }))
    .await;
    let mut client = server.client().await;
    let registered: BTreeSet<String> = register_all(&mut client, specs(NAMESPACE, TIMERS, 50))
        .await
        .into_iter()
        .collect();
    {
        let mut stream = subscribe(&mut client, NAMESPACE, 600_000, TIMERS as u32).await;
        for _ in 0..TIMERS {
            within(next_expiration(&mut stream)).await;
        }
    }
    common::wait::eventually(
        "every expiration is dead",
        PATIENCE,
        std::time::Duration::from_millis(20),
        || {
            let mut client = client.clone();
            async move {
                match pending_with_dead(&mut client, NAMESPACE).await.dead_count as usize {
                    TIMERS => Ok(()),
                    count => Err(format!("{count} dead")),
                }
            }
        },
        || async { String::new() },
    )
    .await;
    let first = redrive(&mut client, NAMESPACE, Vec::new())
        .await
        .expect("redrive");
    let second = redrive(&mut client, NAMESPACE, Vec::new())
        .await
        .expect("redrive");
    assert_eq!(
        (first.redriven, second.redriven),
        (MAX_REDRIVE, (TIMERS - 1_000) as u32)
    );
    let mut stream = subscribe(&mut client, NAMESPACE, 600_000, 500).await;
    let mut again = BTreeSet::new();
    while again.len() < TIMERS {
        let expiration = within(next_expiration(&mut stream)).await;
        assert_eq!(expiration.attempt, 1);
        ack(&mut client, NAMESPACE, vec![expiration.delivery_id.clone()]).await;
        assert!(again.insert(timer_id(&expiration)), "redriven twice");
    }
    assert_eq!(again, registered);
}

/// A replica charges the timers its wheel holds to its memory budget: once the budget is
/// reached, registrations are refused naming it, and once the timers fire it takes them
/// again; with their deliveries taken from a stream (charged while they wait there),
/// everything it charged is given back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_at_its_memory_budget_refuses_registrations() {
    if skip_postgres("a_replica_at_its_memory_budget_refuses_registrations") {
        return;
    }
    const NAMESPACE: &str = "memory";
    const CHUNK: usize = 50;
    let set = ReplicaSet::start(&["r1"], &["--max-memory", "64KiB"]).await;
    let metrics = set.metrics_addr("r1");
    let mut client = set.client("r1");

    // Due within the load horizon, so loaded into the wheel as registered. The budget
    // refuses the batch's items, or the call whole (when earlier loads were charged
    // first): either is the refusal asked for, and neither may leave a timer.
    let mut accepted = 0;
    let mut refusal = None;
    for _ in 0..40 {
        let results = match client
            .new_timeouts(NewTimeoutsRequest {
                timers: specs(NAMESPACE, CHUNK, 4_500),
            })
            .await
        {
            Ok(response) => response.into_inner().results,
            Err(status) => {
                refusal = Some((status.code() as i32, status.message().to_string()));
                break;
            }
        };
        let refused: Vec<&Error> = results
            .iter()
            .filter_map(|result| match &result.result {
                Some(new_timeout_result::Result::Error(error)) => Some(error),
                _ => None,
            })
            .collect();
        if let Some(error) = refused.first() {
            assert_eq!(
                refused.len(),
                CHUNK,
                "a batch is refused whole: {results:?}"
            );
            refusal = Some((error.code, error.message.clone()));
            break;
        }
        accepted += CHUNK;
    }
    let (code, message) = refusal.expect("the memory budget was never reached");
    assert_eq!(code, Code::ResourceExhausted as i32, "{message}");
    assert!(
        message.contains("memory budget") && message.contains("--max-memory"),
        "{message}"
    );
    let stored = count(
        &set,
        "SELECT count(*) FROM tickd_timers WHERE namespace = $1",
        NAMESPACE,
    )
    .await;
    let fired = count(
        &set,
        "SELECT count(*) FROM tickd_expirations WHERE namespace = $1",
        NAMESPACE,
    )
    .await;
    assert_eq!(
        (stored + fired) as usize,
        accepted,
        "a refused batch left timers"
    );
    let scraped = scrape(metrics).await;
    assert!(scraped.value("tickd_refusals_total{reason=\"memory\"}") >= 1.0);

    // Fired, they leave the wheel: registrations are taken again; their deliveries pass
    // through a subscriber's stream; and what was charged is all given back.
    set.eventually("registrations are taken again", || {
        let mut client = client.clone();
        async move {
            try_register(&mut client, NAMESPACE)
                .await
                .map(drop)
                .map_err(|status| format!("{status:?}"))
        }
    })
    .await;
    let mut stream = subscribe(&mut client, NAMESPACE, 600_000, 100).await;
    let mut delivered = BTreeSet::new();
    while delivered.len() < accepted {
        let expiration = within(next_expiration(&mut stream)).await;
        ack(&mut client, NAMESPACE, vec![expiration.delivery_id.clone()]).await;
        assert!(delivered.insert(timer_id(&expiration)), "{expiration:?}");
    }
    set.eventually("the budget is all given back", || async {
        match scrape(metrics).await.value("tickd_memory_used_bytes") {
            0.0 => Ok(()),
            used => Err(format!("{used} bytes still charged")),
        }
    })
    .await;
}

/// An attempt count a delivery id cannot carry is refused at start-up, naming the flag.
#[test]
fn max_attempts_beyond_sixteen_bits_is_refused_at_start_up() {
    let mut command = common::daemon::tickd_command();
    let work_dir = tempfile::tempdir().expect("temp dir");
    command
        .args(["--store", "postgres://tickd@127.0.0.1:1/tickd"])
        .args(["--max-attempts", "65535", "--metrics-listen", "127.0.0.1:0"])
        .current_dir(work_dir.path());
    let (status, log) = common::daemon::Daemon::refused(command, PATIENCE);
    assert!(!status.success(), "{log}");
    assert!(log.contains("--max-attempts (65535)"), "{log}");
}
