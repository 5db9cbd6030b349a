//! A sink's pace, against a real tickd and a real HTTP sink: a rate set with `--sink-rate`
//! is never exceeded (measured at the receiver); a storm of 429s among hundreds of
//! expirations slows the sink as a whole (after the first 429, no push that was not
//! already in flight arrives within its hold), spends no attempt, and the sink recovers
//! to full speed after it; a rate set through SetSink changes at run time, is kept across
//! SIGKILL, and a bad one is INVALID_ARGUMENT naming `rate` that changes nothing.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::daemon::{tickd_command, Daemon};
use common::http_sink::{always, keys, HttpSink, Script};
use common::metrics::deliveries_settled;
use common::wait::eventually;
use common::*;
use tickd::proto::sinks_client::SinksClient;
use tickd::proto::timers_client::TimersClient;
use tickd::proto::{GetSinkRequest, SetSinkRequest, SinkStatusRequest};
use tonic::transport::{Channel, Endpoint};
use tonic::Code;

const NAMESPACE: &str = "paced";
const MAX_IN_FLIGHT: usize = 8;

fn lazy(addr: SocketAddr) -> Channel {
    Endpoint::from_shared(format!("http://{addr}"))
        .expect("endpoint")
        .connect_lazy()
}

fn start(data_dir: &Path, extra: &[&str]) -> Daemon {
    let mut command = tickd_command();
    command
        .arg("--data-dir")
        .arg(data_dir)
        .args(["--metrics-listen", "127.0.0.1:0"])
        .args(["--sink-max-in-flight", &MAX_IN_FLIGHT.to_string()])
        .args(extra);
    Daemon::start(command)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_set_with_the_flag_is_never_exceeded() {
    const RATE: f64 = 50.0;
    const BURST: usize = 5;
    const EXPIRATIONS: usize = 1_000;
    let data_dir = tempfile::tempdir().unwrap();
    let sink = HttpSink::start(always(200)).await;
    let daemon = start(
        data_dir.path(),
        &[
            "--sink",
            &format!("{NAMESPACE}={}", sink.url("/r")),
            "--sink-rate",
            &format!("{NAMESPACE}={RATE}/s,burst={BURST}"),
        ],
    );
    let mut client = TimersClient::new(lazy(daemon.addr));
    // All due at once: only the rate spaces them.
    register_all(&mut client, specs(NAMESPACE, EXPIRATIONS, 100)).await;
    sink.wait_for("every expiration", |pushes| {
        keys(pushes).len() == EXPIRATIONS
    })
    .await;
    deliveries_settled(daemon.metrics_addr()).await;
    let pushes = sink.pushes();
    assert_eq!(pushes.len(), EXPIRATIONS, "each pushed once");
    let elapsed = pushes[EXPIRATIONS - 1]
        .at
        .duration_since(pushes[0].at)
        .as_secs_f64();
    let measured = (EXPIRATIONS - BURST) as f64 / elapsed;
    eprintln!(
        "sink_rate set_per_second={RATE} measured_per_second={measured:.2} pushes={EXPIRATIONS} seconds={elapsed:.2}"
    );
    // A bound a slow machine cannot break (it only makes the pushes later): after the
    // burst, never faster than the rate; 5 % for the receiver's clock readings.
    assert!(
        measured <= RATE * 1.05,
        "{measured:.2} pushes a second past a rate of {RATE}"
    );
    // A push leaves only once the bucket has a token: at most the burst, then one each
    // 1/RATE, in every window of the run.
    for (index, push) in pushes.iter().enumerate().skip(BURST + 1) {
        let earliest = Duration::from_secs_f64((index - BURST - 1) as f64 / RATE * 0.95);
        assert!(
            push.at.duration_since(pushes[0].at) >= earliest,
            "push {index} arrived {:?} after the first",
            push.at.duration_since(pushes[0].at)
        );
    }
}

/// Answers 429 (no Retry-After: tickd holds the sink for a second) to the first `storm`
/// pushes, 200 to the rest; `answered_429_at` holds when the first 429 was answered.
fn storm_script(storm: usize, seen: Arc<AtomicUsize>) -> Script {
    Arc::new(move |_, _| {
        if seen.fetch_add(1, Ordering::SeqCst) < storm {
            (429, None)
        } else {
            (200, None)
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_storm_slows_the_sink_as_a_whole_spends_no_attempt_and_it_recovers() {
    const EXPIRATIONS: usize = 500;
    const STORM: usize = 20;
    let data_dir = tempfile::tempdir().unwrap();
    let seen = Arc::new(AtomicUsize::new(0));
    let sink = HttpSink::start(storm_script(STORM, seen.clone())).await;
    let daemon = start(
        data_dir.path(),
        &["--sink", &format!("{NAMESPACE}={}", sink.url("/s"))],
    );
    let mut client = TimersClient::new(lazy(daemon.addr));
    let mut sinks = SinksClient::new(lazy(daemon.addr));
    register_all(&mut client, specs(NAMESPACE, EXPIRATIONS, 100)).await;
    sink.wait_for("every expiration", |pushes| {
        keys(pushes).len() == EXPIRATIONS
    })
    .await;
    deliveries_settled(daemon.metrics_addr()).await;
    let pushes = sink.pushes();
    // A 429 is the sink's load, not the expiration's fault: each delivered as attempt 1.
    assert!(
        pushes.iter().all(|push| push.attempt == 1),
        "a 429 spent an attempt"
    );
    assert_eq!(
        pushes.len(),
        EXPIRATIONS + STORM,
        "each 429'd push went again once"
    );
    // The sink as a whole held for a second after the first 429: only pushes already in
    // flight may arrive in it (each push's arrival is recorded before it is answered).
    let first_429 = pushes[0].at;
    let within_the_hold = pushes
        .iter()
        .skip(1)
        .filter(|push| push.at.duration_since(first_429) < Duration::from_secs(1))
        .count();
    assert!(
        within_the_hold < MAX_IN_FLIGHT,
        "{within_the_hold} pushes arrived within the second after the first 429"
    );
    // Recovered: the slow-down is lifted once the sink answers, and SinkStatus counts the
    // 429s as slowed pushes, not retries.
    eventually(
        "the sink recovers from the storm",
        PATIENCE,
        Duration::from_millis(100),
        || async {
            let answer = sinks
                .clone()
                .sink_status(SinkStatusRequest {
                    namespace: NAMESPACE.into(),
                    all: false,
                })
                .await
                .map_err(|status| status.to_string())?
                .into_inner();
            let state = &answer.sinks[0];
            if state.slowed_to == 0.0 {
                Ok(())
            } else {
                Err(format!("{state:?}"))
            }
        },
        || async { String::new() },
    )
    .await;
    let state = sinks
        .sink_status(SinkStatusRequest {
            namespace: NAMESPACE.into(),
            all: false,
        })
        .await
        .unwrap()
        .into_inner()
        .sinks
        .remove(0);
    assert_eq!(state.slowed, STORM as u64, "{state:?}");
    assert_eq!(state.retry, 0, "{state:?}");
    assert_eq!(state.delivered, EXPIRATIONS as u64, "{state:?}");
    // Back at full speed: a second wave all due at once reaches the sink with no pause
    // between pushes longer than the hold a 429 would cause.
    let started = Instant::now();
    register_all(&mut client, specs(NAMESPACE, EXPIRATIONS, 1)).await;
    sink.wait_for("the second wave", |pushes| {
        keys(pushes).len() == 2 * EXPIRATIONS
    })
    .await;
    eprintln!(
        "sink_429_storm pushes={} storm={STORM} within_first_hold={within_the_hold} second_wave_ms={}",
        pushes.len(),
        started.elapsed().as_millis()
    );
    assert_eq!(seen.load(Ordering::SeqCst), 2 * EXPIRATIONS + STORM);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_set_through_the_api_changes_at_run_time_and_is_kept_across_sigkill() {
    let data_dir = tempfile::tempdir().unwrap();
    let sink = HttpSink::start(always(200)).await;
    let mut daemon = start(data_dir.path(), &[]);
    let mut sinks = SinksClient::new(lazy(daemon.addr));
    let url = sink.url("/api");
    let set = |rate: &str| SetSinkRequest {
        namespace: NAMESPACE.into(),
        url: url.clone(),
        rate: rate.into(),
        ..Default::default()
    };
    let first = sinks.set_sink(set("20/s")).await.unwrap().into_inner();
    assert!(first.changed);
    assert_eq!(first.sink.unwrap().rate, "20/s,burst=2");
    let again = sinks
        .set_sink(set("20/s,burst=2"))
        .await
        .unwrap()
        .into_inner();
    assert!(!again.changed, "the same rate");
    let faster = sinks
        .set_sink(set("5/s,burst=1"))
        .await
        .unwrap()
        .into_inner();
    assert!(faster.changed, "a new rate alone");
    for bad in ["fast", "0/s", "5/s,burst=0", "5/m"] {
        let refused = sinks.set_sink(set(bad)).await.expect_err(bad);
        assert_eq!(refused.code(), Code::InvalidArgument, "{bad}: {refused:?}");
        assert!(refused.message().starts_with("rate:"), "{refused:?}");
    }
    let get = |sinks: SinksClient<Channel>| async move {
        let mut sinks = sinks;
        sinks
            .get_sink(GetSinkRequest {
                namespace: NAMESPACE.into(),
            })
            .await
            .unwrap()
            .into_inner()
            .sink
            .unwrap()
    };
    assert_eq!(
        get(sinks.clone()).await.rate,
        "5/s,burst=1",
        "refusals changed it"
    );

    daemon.kill();
    let daemon = start(data_dir.path(), &[]);
    let sinks = SinksClient::new(lazy(daemon.addr));
    assert_eq!(
        get(sinks.clone()).await.rate,
        "5/s,burst=1",
        "kept across SIGKILL"
    );
    // The kept rate holds after the restart: 11 due at once take two seconds at 5/s.
    let mut client = TimersClient::new(lazy(daemon.addr));
    register_all(&mut client, specs(NAMESPACE, 11, 1)).await;
    sink.wait_for("the eleven", |pushes| keys(pushes).len() == 11)
        .await;
    let pushes = sink.pushes();
    let spread = pushes[10].at.duration_since(pushes[0].at);
    assert!(
        spread >= Duration::from_millis(1_900),
        "11 pushes in {spread:?} at 5/s, burst 1"
    );
    let mut sinks = sinks;
    let lifted = sinks.set_sink(set("")).await.unwrap().into_inner();
    assert!(lifted.changed && lifted.sink.unwrap().rate.is_empty());
}

#[test]
fn a_rate_for_a_namespace_without_a_flag_sink_stops_the_start_naming_it() {
    let mut command = tickd_command();
    command.args(["--sink-rate", "nowhere=5/s"]);
    let (status, log) = Daemon::refused(command, PATIENCE);
    assert!(!status.success());
    assert!(
        log.contains("--sink-rate") && log.contains("nowhere"),
        "{log}"
    );
    let mut command = tickd_command();
    command.args(["--sink-rate", "x=5"]);
    let (status, log) = Daemon::refused(command, PATIENCE);
    assert!(!status.success());
    assert!(log.contains("50/s,burst=10"), "{log}");
}
