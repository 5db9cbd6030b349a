//! A paused sink (PauseSink, `tickctl sink pause`), against a real tickd and real HTTP
//! sinks: while paused no push leaves, its expirations wait in the namespace's buffer and
//! spend no attempt, whatever the healthy sink beside it does; the pause holds across a
//! SIGKILL or SIGTERM, for a sink set through the API and for one of `--sink`; resumed,
//! every expiration is pushed as its first attempt and acknowledged. A pause of a namespace
//! with no sink is NOT_FOUND and changes nothing. A pause that lands while pushes wait for
//! the sink's pace spends no attempt on them, even with a SIGKILL right after its answer.
//! On two replicas of one database, a pause through one holds on both, and a resume
//! through the other frees both; a pause through one right after a new rate through the
//! other keeps the rate.

mod common;

use std::net::SocketAddr;
use std::path::Path;

use common::daemon::{tickd_command, Daemon};
use common::http_sink::{always, keys, HttpSink};
use common::metrics::{deliveries_settled, scrape_until};
use common::replica_set::ReplicaSet;
use common::tooling::skip_postgres;
use common::*;
use tickd::proto::sinks_client::SinksClient;
use tickd::proto::timers_client::TimersClient;
use tickd::proto::{
    PauseSinkRequest, ResumeSinkRequest, SetSinkRequest, SinkStatusRequest, SinkView,
};
use tonic::transport::{Channel, Endpoint};
use tonic::Code;

/// Given its sink by `--sink`.
const FLAGGED: &str = "flagged";
/// Given its sink through SetSink.
const SET: &str = "set";
/// Never paused: its pushes show that time passed and the pushers ran.
const CONTROL: &str = "control";
/// Expirations in each paused namespace.
const PAUSED_EXPIRATIONS: usize = 300;
/// Expirations in the control namespace, per round.
const CONTROL_EXPIRATIONS: usize = 100;

fn lazy(addr: SocketAddr) -> Channel {
    Endpoint::from_shared(format!("http://{addr}"))
        .expect("endpoint")
        .connect_lazy()
}

fn start(data_dir: &Path, flagged: &HttpSink, control: &HttpSink) -> Daemon {
    let mut command = tickd_command();
    command
        .arg("--data-dir")
        .arg(data_dir)
        .args(["--sink", &format!("{FLAGGED}={}", flagged.url("/f"))])
        .args(["--sink", &format!("{CONTROL}={}", control.url("/c"))])
        .args(["--metrics-listen", "127.0.0.1:0"]);
    Daemon::start(command)
}

async fn pause(sinks: &mut SinksClient<Channel>, namespace: &str) -> (SinkView, bool) {
    let answer = sinks
        .pause_sink(PauseSinkRequest {
            namespace: namespace.into(),
        })
        .await
        .expect("PauseSink")
        .into_inner();
    (answer.sink.expect("a sink"), answer.changed)
}

async fn resume(sinks: &mut SinksClient<Channel>, namespace: &str) -> (SinkView, bool) {
    let answer = sinks
        .resume_sink(ResumeSinkRequest {
            namespace: namespace.into(),
        })
        .await
        .expect("ResumeSink")
        .into_inner();
    (answer.sink.expect("a sink"), answer.changed)
}

/// Each namespace's `paused`, as SinkStatus shows it.
async fn paused_in_status(sinks: &mut SinksClient<Channel>) -> Vec<(String, bool)> {
    let answer = sinks
        .sink_status(SinkStatusRequest {
            namespace: String::new(),
            all: true,
        })
        .await
        .expect("SinkStatus")
        .into_inner();
    answer
        .sinks
        .into_iter()
        .map(|state| {
            let sink = state.sink.expect("a sink");
            (sink.namespace, sink.paused)
        })
        .collect()
}

/// Each namespace's `waiting`, as SinkStatus shows it.
async fn waiting_in_status(sinks: &mut SinksClient<Channel>) -> Vec<(String, Option<u64>)> {
    let answer = sinks
        .sink_status(SinkStatusRequest {
            namespace: String::new(),
            all: true,
        })
        .await
        .expect("SinkStatus")
        .into_inner();
    answer
        .sinks
        .into_iter()
        .map(|state| (state.sink.expect("a sink").namespace, state.waiting))
        .collect()
}

fn expected_status() -> Vec<(String, bool)> {
    vec![
        (CONTROL.to_owned(), false),
        (FLAGGED.to_owned(), true),
        (SET.to_owned(), true),
    ]
}

/// Registers a round of control timers due after everything registered before, and waits
/// until the control sink has them all (`seen_before` + this round): the event that shows
/// the paused ones' deadlines passed while the pushers ran.
async fn control_round(
    client: &mut TimersClient<Channel>,
    control: &HttpSink,
    seen_before: usize,
    delay_ms: u64,
) {
    register_all(client, specs(CONTROL, CONTROL_EXPIRATIONS, delay_ms)).await;
    let wanted = seen_before + CONTROL_EXPIRATIONS;
    control
        .wait_for("the control namespace's expirations", |pushes| {
            keys(pushes).len() == wanted
        })
        .await;
}

async fn a_pause_holds_across_a_restart(signal: &str) {
    let data_dir = tempfile::tempdir().unwrap();
    let flagged = HttpSink::start(always(200)).await;
    let set_sink = HttpSink::start(always(200)).await;
    let control = HttpSink::start(always(200)).await;
    let mut daemon = start(data_dir.path(), &flagged, &control);
    let mut sinks = SinksClient::new(lazy(daemon.addr));
    let mut client = TimersClient::new(lazy(daemon.addr));
    sinks
        .set_sink(SetSinkRequest {
            namespace: SET.into(),
            url: set_sink.url("/s"),
            ..Default::default()
        })
        .await
        .expect("SetSink");

    // Refused, and nothing changes: no sink, no pause kept.
    let refused = sinks
        .pause_sink(PauseSinkRequest {
            namespace: "nowhere".into(),
        })
        .await
        .expect_err("a namespace with no sink");
    assert_eq!(refused.code(), Code::NotFound, "{refused:?}");
    assert!(refused.message().contains("nowhere"), "{refused:?}");

    for namespace in [FLAGGED, SET] {
        let (sink, changed) = pause(&mut sinks, namespace).await;
        assert!(sink.paused && changed, "{sink:?}");
        let (sink, changed) = pause(&mut sinks, namespace).await;
        assert!(sink.paused && !changed, "paused already: {sink:?}");
    }
    assert_eq!(paused_in_status(&mut sinks).await, expected_status());

    for namespace in [FLAGGED, SET] {
        register_all(&mut client, specs(namespace, PAUSED_EXPIRATIONS, 100)).await;
    }
    control_round(&mut client, &control, 0, 600).await;
    let waiting = scrape_until(daemon.metrics_addr(), |scrape| {
        scrape.value("tickd_delivery_buffered") == (2 * PAUSED_EXPIRATIONS) as f64
    })
    .await;
    assert_eq!(
        waiting.value("tickd_delivery_buffered"),
        (2 * PAUSED_EXPIRATIONS) as f64,
        "every paused expiration waits in its buffer"
    );
    assert!(flagged.pushes().is_empty() && set_sink.pushes().is_empty());
    let each_waiting = |control: u64| {
        vec![
            (CONTROL.to_owned(), Some(control)),
            (FLAGGED.to_owned(), Some(PAUSED_EXPIRATIONS as u64)),
            (SET.to_owned(), Some(PAUSED_EXPIRATIONS as u64)),
        ]
    };
    assert_eq!(waiting_in_status(&mut sinks).await, each_waiting(0));

    daemon.stop_with(signal);
    let daemon = start(data_dir.path(), &flagged, &control);
    // The clients outlive the restart; the new process listens elsewhere.
    let mut sinks = SinksClient::new(lazy(daemon.addr));
    let mut client = TimersClient::new(lazy(daemon.addr));
    assert_eq!(paused_in_status(&mut sinks).await, expected_status());
    control_round(&mut client, &control, CONTROL_EXPIRATIONS, 100).await;
    assert!(
        flagged.pushes().is_empty() && set_sink.pushes().is_empty(),
        "a push left a paused sink after the restart"
    );
    assert_eq!(waiting_in_status(&mut sinks).await, each_waiting(0));

    for (namespace, sink) in [(FLAGGED, &flagged), (SET, &set_sink)] {
        let (view, changed) = resume(&mut sinks, namespace).await;
        assert!(!view.paused && changed, "{view:?}");
        let (view, changed) = resume(&mut sinks, namespace).await;
        assert!(!view.paused && !changed, "not paused: {view:?}");
        sink.wait_for("every paused expiration, once resumed", |pushes| {
            keys(pushes).len() == PAUSED_EXPIRATIONS
        })
        .await;
    }
    deliveries_settled(daemon.metrics_addr()).await;
    for sink in [&flagged, &set_sink] {
        let pushes = sink.pushes();
        assert_eq!(keys(&pushes).len(), PAUSED_EXPIRATIONS);
        // Waiting spent no attempt: each was pushed once, as its first.
        assert_eq!(pushes.len(), PAUSED_EXPIRATIONS, "pushed again");
        assert!(
            pushes.iter().all(|push| push.attempt == 1),
            "an attempt was spent while paused"
        );
    }
    assert!(paused_in_status(&mut sinks)
        .await
        .iter()
        .all(|(_, paused)| !paused));
    assert_eq!(
        waiting_in_status(&mut sinks).await,
        [CONTROL, FLAGGED, SET].map(|namespace| (namespace.to_owned(), Some(0)))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_holds_across_sigkill() {
    a_pause_holds_across_a_restart("KILL").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_holds_across_sigterm() {
    a_pause_holds_across_a_restart("TERM").await;
}

/// A sink held to 10 pushes a second, with a window of 128 deliveries taken for it (the
/// default 64 in flight, twice): a pause lands while most of them wait for the pace, longer
/// than a push's budget. Answered, nothing more is pushed; SIGKILLed at once and started
/// again, the sink is still paused; resumed, every expiration arrives, and none as an
/// attempt after one that was never pushed: a delivery the pause caught unsent was given
/// back unspent, durably before the pause answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_among_paced_pushes_spends_no_attempt_across_sigkill() {
    const EXPIRATIONS: usize = 250;
    let data_dir = tempfile::tempdir().unwrap();
    let sink = HttpSink::start(always(200)).await;
    let start_paced = || {
        let mut command = tickd_command();
        command
            .arg("--data-dir")
            .arg(data_dir.path())
            .args(["--sink", &format!("{FLAGGED}={}", sink.url("/f"))])
            .args(["--sink-rate", &format!("{FLAGGED}=10/s,burst=1")])
            .args(["--sink-timeout", "1s", "--max-attempts", "2"])
            .args(["--metrics-listen", "127.0.0.1:0"]);
        Daemon::start(command)
    };
    let mut daemon = start_paced();
    let mut client = TimersClient::new(lazy(daemon.addr));
    register_all(&mut client, specs(FLAGGED, EXPIRATIONS, 100)).await;
    sink.wait_for("the first pushes", |pushes| pushes.len() >= 20)
        .await;
    let mut sinks = SinksClient::new(lazy(daemon.addr));
    let (view, changed) = pause(&mut sinks, FLAGGED).await;
    assert!(view.paused && changed, "{view:?}");
    let pushed_before_the_answer = sink.pushes().len();
    assert!(
        pushed_before_the_answer < EXPIRATIONS,
        "the pause came too late to catch a push: {pushed_before_the_answer}"
    );
    daemon.stop_with("KILL");

    let daemon = start_paced();
    let mut sinks = SinksClient::new(lazy(daemon.addr));
    assert_eq!(
        paused_in_status(&mut sinks).await,
        [(FLAGGED.to_owned(), true)]
    );
    // Its expirations wait in the buffer, none pushed (nothing else runs to wait for:
    // the buffer holding every one not yet pushed is the event).
    let not_pushed = EXPIRATIONS - keys(&sink.pushes()).len();
    scrape_until(daemon.metrics_addr(), |scrape| {
        scrape.value("tickd_delivery_buffered") >= not_pushed as f64
    })
    .await;
    assert_eq!(
        sink.pushes().len(),
        pushed_before_the_answer,
        "a push left after the pause was answered"
    );
    let (view, changed) = resume(&mut sinks, FLAGGED).await;
    assert!(!view.paused && changed, "{view:?}");
    sink.wait_for("every expiration, once resumed", |pushes| {
        keys(pushes).len() == EXPIRATIONS
    })
    .await;
    deliveries_settled(daemon.metrics_addr()).await;
    let mut attempts: std::collections::BTreeMap<String, Vec<u32>> = Default::default();
    for push in sink.pushes() {
        attempts.entry(push.key).or_default().push(push.attempt);
    }
    // An attempt is a push that was sent: each key's attempts are 1, then (if the
    // SIGKILL lost the ack of a push delivered just before) 2.
    let spent_unsent: Vec<_> = attempts
        .iter()
        .filter(|(_, seen)| seen[0] != 1 || seen.windows(2).any(|pair| pair[1] != pair[0] + 1))
        .collect();
    assert!(
        spent_unsent.is_empty(),
        "{} expirations came as an attempt after one never pushed: {spent_unsent:?}",
        spent_unsent.len()
    );
}

/// `namespace`'s pause as its pusher has it (SinkStatus) and as the store keeps it
/// (GetSink reads the store).
async fn pause_shown(sinks: &mut SinksClient<Channel>, namespace: &str) -> (bool, bool) {
    let running = paused_in_status(sinks)
        .await
        .into_iter()
        .find(|(shown, _)| shown == namespace)
        .map(|(_, paused)| paused)
        .expect("running");
    let kept = sinks
        .get_sink(tickd::proto::GetSinkRequest {
            namespace: namespace.into(),
        })
        .await
        .expect("GetSink")
        .into_inner()
        .sink
        .expect("a sink")
        .paused;
    (running, kept)
}

/// A namespace with a sink kept from SetSink, then given one by `--sink` after a restart:
/// pausing the flag's sink keeps the kept one (the pause is the namespace's), so when the
/// flag is dropped the kept sink comes back, paused, and resumed it pushes. Pauses and
/// resumes sent at once, many times, leave the pusher and the store agreeing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flag_sink_paused_over_a_kept_one_keeps_it_and_races_settle_in_order() {
    let data_dir = tempfile::tempdir().unwrap();
    let kept = HttpSink::start(always(200)).await;
    let flagged = HttpSink::start(always(200)).await;
    let start_with = |flag: Option<&HttpSink>| {
        let mut command = tickd_command();
        command.arg("--data-dir").arg(data_dir.path());
        if let Some(sink) = flag {
            command.args(["--sink", &format!("{FLAGGED}={}", sink.url("/f"))]);
        }
        Daemon::start(command)
    };
    let mut daemon = start_with(None);
    let mut sinks = SinksClient::new(lazy(daemon.addr));
    sinks
        .set_sink(SetSinkRequest {
            namespace: FLAGGED.into(),
            url: kept.url("/kept"),
            rate: "500/s".into(),
            ..Default::default()
        })
        .await
        .expect("SetSink");
    daemon.stop_with("TERM");

    let mut daemon = start_with(Some(&flagged));
    let mut sinks = SinksClient::new(lazy(daemon.addr));
    let (view, _) = pause(&mut sinks, FLAGGED).await;
    assert!(view.paused && view.url.contains("/f"), "{view:?}");
    daemon.stop_with("KILL");

    let daemon = start_with(None);
    let mut sinks = SinksClient::new(lazy(daemon.addr));
    let view = sinks
        .get_sink(tickd::proto::GetSinkRequest {
            namespace: FLAGGED.into(),
        })
        .await
        .expect("the kept sink is back")
        .into_inner()
        .sink
        .expect("a sink");
    assert!(
        view.url.contains("/kept") && view.paused && view.rate == "500/s,burst=50",
        "{view:?}"
    );
    assert_eq!(pause_shown(&mut sinks, FLAGGED).await, (true, true));

    // Each round sends a resume and a pause at once; whichever lands last, the pusher and
    // the store say the same.
    for _ in 0..20 {
        let (mut first, mut second) = (sinks.clone(), sinks.clone());
        let (resumed, paused) =
            tokio::join!(resume(&mut first, FLAGGED), pause(&mut second, FLAGGED));
        assert!(!resumed.0.paused && paused.0.paused);
        let (running, stored) = pause_shown(&mut sinks, FLAGGED).await;
        assert_eq!(running, stored, "the pusher and the store disagree");
    }
    resume(&mut sinks, FLAGGED).await;
    assert_eq!(pause_shown(&mut sinks, FLAGGED).await, (false, false));
    let mut client = TimersClient::new(lazy(daemon.addr));
    register_all(&mut client, specs(FLAGGED, 50, 50)).await;
    kept.wait_for("the kept sink's pushes", |pushes| keys(pushes).len() == 50)
        .await;
    assert!(
        flagged.pushes().is_empty(),
        "the flag's sink pushed without its flag"
    );
}

/// Whether replica `id`'s SinkStatus shows `namespace` paused as `paused`, with `rate`.
async fn replica_shows_paused(
    set: &ReplicaSet,
    id: &str,
    namespace: &str,
    paused: bool,
    rate: &str,
) -> Result<(), String> {
    let mut sinks = SinksClient::new(lazy(set.daemon(id).addr));
    let shown: Vec<(String, bool)> = paused_in_status(&mut sinks).await;
    let view = sinks
        .get_sink(tickd::proto::GetSinkRequest {
            namespace: namespace.into(),
        })
        .await
        .map_err(|status| status.to_string())?
        .into_inner()
        .sink
        .unwrap_or_default();
    if shown.contains(&(namespace.to_owned(), paused)) && view.rate == rate {
        Ok(())
    } else {
        Err(format!("{id} shows {shown:?}, rate {:?}", view.rate))
    }
}

/// Two replicas of one database: a sink paused through one is paused on both (none of its
/// expirations, registered through either, is pushed while a healthy sink beside it
/// pushes); resumed through the other, every one arrives as its first attempt. Its rate,
/// set through one, shows on both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_pause_and_resume_a_sink_together() {
    if skip_postgres("replicas_pause_and_resume_a_sink_together") {
        return;
    }
    const IDS: [&str; 2] = ["a", "b"];
    const PER_REPLICA: usize = 100;
    let paused_sink = HttpSink::start(always(200)).await;
    let control = HttpSink::start(always(200)).await;
    let set_of = ReplicaSet::start(&IDS, &[]).await;
    set_of
        .eventually("both replicas own partitions", || {
            set_of.each_owns_a_partition(&IDS)
        })
        .await;
    let mut through_a = SinksClient::new(lazy(set_of.daemon("a").addr));
    for (namespace, url, rate) in [
        (SET, paused_sink.url("/s"), "1000/s"),
        (CONTROL, control.url("/c"), ""),
    ] {
        through_a
            .set_sink(SetSinkRequest {
                namespace: namespace.into(),
                url,
                rate: rate.into(),
                ..Default::default()
            })
            .await
            .expect("SetSink through a");
    }
    let (view, changed) = pause(&mut through_a, SET).await;
    assert!(view.paused && changed);
    set_of
        .eventually("b pauses the sink paused through a", || {
            replica_shows_paused(&set_of, "b", SET, true, "1000/s,burst=100")
        })
        .await;
    for id in IDS {
        register_all(&mut set_of.client(id), specs(SET, PER_REPLICA, 100)).await;
    }
    for (index, id) in IDS.into_iter().enumerate() {
        register_all(
            &mut set_of.client(id),
            specs(CONTROL, CONTROL_EXPIRATIONS, 800),
        )
        .await;
        control
            .wait_for("the control expirations", |pushes| {
                keys(pushes).len() == (index + 1) * CONTROL_EXPIRATIONS
            })
            .await;
    }
    assert!(
        paused_sink.pushes().is_empty(),
        "a replica pushed to a paused sink"
    );
    // Each replica counts what waits in the database, registered through either.
    for id in IDS {
        let mut sinks = SinksClient::new(lazy(set_of.daemon(id).addr));
        let waiting = waiting_in_status(&mut sinks).await;
        assert!(
            waiting.contains(&(SET.to_owned(), Some(2 * PER_REPLICA as u64))),
            "{id}: {waiting:?}"
        );
    }

    let mut through_b = SinksClient::new(lazy(set_of.daemon("b").addr));
    let (view, changed) = resume(&mut through_b, SET).await;
    assert!(!view.paused && changed);
    paused_sink
        .wait_for("every expiration, once resumed", |pushes| {
            keys(pushes).len() == 2 * PER_REPLICA
        })
        .await;
    assert!(
        paused_sink.pushes().iter().all(|push| push.attempt == 1),
        "an attempt was spent while paused"
    );
    set_of
        .eventually("a resumes the sink resumed through b", || {
            replica_shows_paused(&set_of, "a", SET, false, "1000/s,burst=100")
        })
        .await;

    // A new rate through a, then at once a pause through b (whose copy may not have the
    // rate yet): the pause changes only the pause, so the rate stays.
    through_a
        .set_sink(SetSinkRequest {
            namespace: SET.into(),
            url: paused_sink.url("/s"),
            rate: "200/s".into(),
            ..Default::default()
        })
        .await
        .expect("a new rate through a");
    let (view, _) = pause(&mut through_b, SET).await;
    assert!(view.paused, "{view:?}");
    for id in IDS {
        set_of
            .eventually("both show the rate set and the pause", || {
                replica_shows_paused(&set_of, id, SET, true, "200/s,burst=20")
            })
            .await;
    }
}
