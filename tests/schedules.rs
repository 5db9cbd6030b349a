//! Cron timers, Reschedule, replace and Redrive through the real server on 127.0.0.1:0:
//! refusals that name the field and change nothing, Reschedule racing the firing,
//! replace racing Cancel, Redrive delivering a dead expiration again with attempt 1,
//! and all of it across a restart with `--sync always`.

mod common;

use std::path::Path;

use common::*;
use tickd::local::store::SyncMode;
use tickd::proto::timers_client::TimersClient;
use tokio::task::JoinSet;
use tonic::transport::Channel;
use tonic::Code;

const NAMESPACE: &str = "schedules";

fn cron_spec(key: &str, cron: &str, zone: &str) -> TimerSpec {
    TimerSpec {
        namespace: NAMESPACE.into(),
        key: key.into(),
        cron: cron.into(),
        time_zone: zone.into(),
        ..TimerSpec::default()
    }
}

fn keyed(key: &str, delay_ms: u64, payload: &str) -> TimerSpec {
    TimerSpec {
        key: key.into(),
        ..spec(NAMESPACE, delay_ms, payload.as_bytes())
    }
}

async fn new_timeout(
    client: &mut TimersClient<Channel>,
    spec: TimerSpec,
) -> Result<NewTimeoutResponse, tonic::Status> {
    client
        .new_timeout(NewTimeoutRequest { timer: Some(spec) })
        .await
        .map(tonic::Response::into_inner)
}

async fn reschedule(
    client: &mut TimersClient<Channel>,
    key: &str,
    delay_ms: u64,
    payload: Option<&str>,
) -> Result<Timer, tonic::Status> {
    let answer = client
        .reschedule(RescheduleRequest {
            timer: by_key(NAMESPACE, key),
            delay: Some(millis(delay_ms)),
            deadline: None,
            payload: payload.map(|payload| payload.as_bytes().to_vec().into()),
        })
        .await?;
    Ok(answer.into_inner().timer.expect("timer"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_schedules_are_refused_naming_the_field_and_register_nothing() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let refusals = [
        (cron_spec("a", "0 0 32 * *", ""), "cron: field 3"),
        (cron_spec("b", "0 0 * *", ""), "cron:"),
        (cron_spec("c", "@reboot", ""), "cron:"),
        (
            cron_spec("d", "0 9 * * MON-FRI", "Europe/Atlantis"),
            "time_zone:",
        ),
        (
            TimerSpec {
                repeat: Some(millis(1_000)),
                ..cron_spec("e", "* * * * *", "")
            },
            "cron: give either cron or repeat",
        ),
        (
            TimerSpec {
                time_zone: "Europe/Berlin".into(),
                ..keyed("f", 1_000, "")
            },
            "time_zone:",
        ),
        (
            TimerSpec {
                replace: true,
                ..spec(NAMESPACE, 1_000, b"")
            },
            "replace: needs a key",
        ),
    ];
    for (spec, message) in refusals {
        let refused = new_timeout(&mut client, spec).await.expect_err("refused");
        assert_eq!(refused.code(), Code::InvalidArgument, "{refused:?}");
        assert!(
            refused.message().starts_with(message),
            "{:?} does not start with {message:?}",
            refused.message()
        );
    }
    let refused = reschedule(&mut client, "nowhere", 1_000, None)
        .await
        .expect_err("no such timer");
    assert_eq!(refused.code(), Code::NotFound);
    let both = client
        .reschedule(RescheduleRequest {
            timer: by_key(NAMESPACE, "x"),
            delay: Some(millis(1)),
            deadline: Some(prost_types::Timestamp::default()),
            payload: None,
        })
        .await
        .expect_err("delay and deadline");
    assert_eq!(both.code(), Code::InvalidArgument);
    assert_eq!(pending_count(&mut client, NAMESPACE).await, 0);
    server.stop().await;
}

/// Whichever wins on the worker thread: the timer fires at its old time and Reschedule
/// answers NOT_FOUND, or Reschedule answers and it fires at its new time; never both,
/// never neither.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reschedule_racing_the_firing_fires_once_at_the_time_it_answered() {
    const TIMERS: usize = 200;
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let mut stream = subscribe(&mut client, NAMESPACE, 0, TIMERS as u32).await;
    let mut old_deadlines = Vec::new();
    for index in 0..TIMERS {
        // Spread over 0-40 ms, so that some fire before their Reschedule arrives.
        let timer = register(
            &mut client,
            keyed(&format!("t{index}"), index as u64 / 5, ""),
        )
        .await;
        old_deadlines.push(unix_nanos(&timer.deadline.unwrap()));
    }
    let mut racing = JoinSet::new();
    for index in 0..TIMERS {
        let mut client = client.clone();
        racing.spawn(async move {
            let moved = reschedule(&mut client, &format!("t{index}"), 200, Some("moved")).await;
            (index, moved)
        });
    }
    let mut answered = vec![None; TIMERS];
    while let Some(joined) = racing.join_next().await {
        let (index, moved) = joined.unwrap();
        answered[index] = Some(match moved {
            Ok(timer) => Some(unix_nanos(&timer.deadline.unwrap())),
            Err(status) => {
                assert_eq!(status.code(), Code::NotFound, "{status:?}");
                None
            }
        });
    }
    let mut fired = vec![0; TIMERS];
    for _ in 0..TIMERS {
        let expiration = within(next_expiration(&mut stream)).await;
        let timer = expiration.timer.unwrap();
        let index: usize = timer.key[1..].parse().unwrap();
        fired[index] += 1;
        let deadline = unix_nanos(&timer.deadline.unwrap());
        match answered[index].unwrap() {
            Some(new_deadline) => {
                assert_eq!(deadline, new_deadline, "t{index} fired at its old time");
                assert_eq!(timer.payload, "moved");
            }
            None => assert_eq!(deadline, old_deadlines[index], "t{index} moved"),
        }
        ack(&mut client, NAMESPACE, vec![expiration.delivery_id]).await;
    }
    assert!(fired.iter().all(|&count| count == 1), "{fired:?}");
    assert_eq!(pending_count(&mut client, NAMESPACE).await, 0);
    server.stop().await;
}

/// Replace and Cancel of the same key at once: either Cancel took the old timer and
/// Replace made a new one (which stays), or Replace replaced it and Cancel took that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replace_racing_cancel_leaves_a_timer_exactly_when_replace_created_one() {
    const KEYS: usize = 200;
    let server = TestServer::start().await;
    let mut client = server.client().await;
    for index in 0..KEYS {
        register(&mut client, keyed(&format!("k{index}"), 60_000, "v1")).await;
    }
    let mut racing = JoinSet::new();
    for index in 0..KEYS {
        let key = format!("k{index}");
        let (mut replacer, mut canceller) = (client.clone(), client.clone());
        let replacement = TimerSpec {
            replace: true,
            ..keyed(&key, 60_000, "v2")
        };
        racing.spawn(async move {
            let (replaced, cancelled) = tokio::join!(
                new_timeout(&mut replacer, replacement),
                cancel(&mut canceller, by_key(NAMESPACE, &key)),
            );
            (key, replaced.expect("replace"), cancelled)
        });
    }
    while let Some(joined) = racing.join_next().await {
        let (key, replaced, cancelled) = joined.unwrap();
        assert!(cancelled, "{key}: the old timer was there to cancel");
        assert_ne!(replaced.created, replaced.replaced, "{key}: {replaced:?}");
        let left = get(&mut client, by_key(NAMESPACE, &key)).await;
        match replaced.created {
            true => assert_eq!(left.expect("the new timer").payload, "v2"),
            false => assert_eq!(
                left.expect_err("cancelled after it was replaced").code(),
                Code::NotFound,
                "{key}"
            ),
        }
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redriven_dead_expiration_is_delivered_again_with_attempt_one() {
    let server = TestServer::start_with(config(|c| c.max_attempts = 1)).await;
    let mut client = server.client().await;
    register(&mut client, keyed("dead", 0, "payload")).await;
    // A subscriber that never acks: after its one attempt the expiration is dead.
    let mut careless = subscribe(&mut client, NAMESPACE, 50, 10).await;
    let first = within(next_expiration(&mut careless)).await;
    assert_eq!(first.attempt, 1);
    drop(careless);
    let dead = within(async {
        loop {
            let pending = pending_with_dead(&mut client, NAMESPACE).await;
            if let Some(dead) = pending.dead_expirations.first() {
                break dead.clone();
            }
            tokio::task::yield_now().await;
        }
    })
    .await;
    assert!(!dead.delivery_id.is_empty(), "a dead expiration is named");

    let mut stream = subscribe(&mut client, NAMESPACE, 0, 10).await;
    let answer = client
        .redrive(RedriveRequest {
            namespace: NAMESPACE.into(),
            delivery_ids: vec![
                dead.delivery_id.clone(),
                "00000000000000ff".into(),
                "nope".into(),
            ],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(answer.redriven, 1);
    assert_eq!(answer.not_dead, ["nope", "00000000000000ff"]);
    let again = within(next_expiration(&mut stream)).await;
    assert_eq!(again.attempt, 1, "attempts counted afresh");
    assert_eq!(again.timer.unwrap().payload, "payload");
    assert_eq!(
        pending_with_dead(&mut client, NAMESPACE).await.dead_count,
        0
    );
    // Nothing dead: nothing redriven.
    let none = client
        .redrive(RedriveRequest {
            namespace: NAMESPACE.into(),
            delivery_ids: Vec::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(none.redriven, 0);
    server.stop().await;
}

async fn start_on(dir: &Path) -> (TestServer, TimersClient<Channel>) {
    let dir = dir.to_path_buf();
    let server = TestServer::start_with(config(|c| {
        c.data_dir = dir;
        c.sync = SyncMode::Always;
    }))
    .await;
    let client = server.client().await;
    (server, client)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedules_reschedules_and_replacements_survive_a_restart() {
    let data = tempfile::tempdir().unwrap();
    let (server, mut client) = start_on(data.path()).await;
    let cron = new_timeout(
        &mut client,
        cron_spec("cron", "0 0 9 * * MON-FRI", "Europe/Berlin"),
    )
    .await
    .unwrap()
    .timer
    .unwrap();
    register(&mut client, keyed("moved", 60_000, "v1")).await;
    let moved = reschedule(&mut client, "moved", 3_600_000, Some("v2"))
        .await
        .unwrap();
    register(&mut client, keyed("replaced", 60_000, "v1")).await;
    let replaced = new_timeout(
        &mut client,
        TimerSpec {
            replace: true,
            ..cron_spec("replaced", "@daily", "America/New_York")
        },
    )
    .await
    .unwrap();
    assert!(replaced.replaced && !replaced.created);
    server.stop().await;

    let (server, mut client) = start_on(data.path()).await;
    let after = get(&mut client, by_key(NAMESPACE, "cron")).await.unwrap();
    assert_eq!(
        (after.cron.as_str(), after.time_zone.as_str()),
        ("0 0 9 * * MON-FRI", "Europe/Berlin")
    );
    assert_eq!(after.deadline, cron.deadline);
    let after = get(&mut client, by_key(NAMESPACE, "moved")).await.unwrap();
    assert_eq!(after.deadline, moved.deadline);
    assert_eq!(after.payload, "v2");
    let after = get(&mut client, by_key(NAMESPACE, "replaced"))
        .await
        .unwrap();
    assert_eq!(after.id, replaced.timer.as_ref().unwrap().id);
    assert_eq!(
        (after.cron.as_str(), after.time_zone.as_str()),
        ("@daily", "America/New_York")
    );
    assert_eq!(after.deadline, replaced.timer.unwrap().deadline);
    assert_eq!(pending_count(&mut client, NAMESPACE).await, 3);
    server.stop().await;
    // Cron timers keep firing on their calendar after a restart: a whole-second schedule.
    let (server, mut client) = start_on(data.path()).await;
    let mut stream = subscribe(&mut client, NAMESPACE, 0, 10).await;
    new_timeout(
        &mut client,
        cron_spec("every-second", "*/1 * * * * *", "Europe/Berlin"),
    )
    .await
    .unwrap();
    let mut last = 0;
    for count in 1..=2 {
        let expiration = within(next_expiration(&mut stream)).await;
        let timer = expiration.timer.unwrap();
        assert_eq!(timer.key, "every-second");
        assert_eq!(timer.fired_count, count);
        let deadline = unix_nanos(&timer.deadline.unwrap());
        assert_eq!(deadline % 1_000_000_000, 0, "on a whole second");
        assert!(deadline > last);
        assert!(
            unix_nanos(&expiration.fired_at.unwrap()) >= deadline,
            "early"
        );
        last = deadline;
    }
    drop(stream);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rescheduled_lease_keeps_its_ttl_and_moves_its_deadline() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    // A lease: no delay, due one ttl after its last heartbeat.
    let lease = TimerSpec {
        delay: None,
        ttl: Some(millis(60_000)),
        ..keyed("lease", 0, "")
    };
    register(&mut client, lease).await;
    let moved = reschedule(&mut client, "lease", 3_600_000, None)
        .await
        .unwrap();
    assert_eq!(moved.ttl, Some(millis(60_000)), "the ttl is kept");
    let now = now_unix_nanos();
    let deadline = unix_nanos(&moved.deadline.unwrap());
    assert!(
        deadline > now + 3_000_000_000_000,
        "moved an hour ahead, not a ttl"
    );
    // The next heartbeat counts its ttl from then, as for any lease.
    let touched = client
        .touch(TouchRequest {
            timer: by_key(NAMESPACE, "lease"),
            ttl: None,
        })
        .await
        .unwrap()
        .into_inner()
        .timer
        .unwrap();
    assert!(unix_nanos(&touched.deadline.unwrap()) < deadline);
    server.stop().await;
}
