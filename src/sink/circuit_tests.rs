//! The circuit's rules, on tokio's paused clock: what opens it, who probes, what closes it.

use std::sync::Arc;

use super::*;

/// An expiration of timer `n`, due at `n`, as a first attempt (`failed_before` false) or
/// a retry.
fn expiration(n: u64, failed_before: bool) -> Judged {
    Judged {
        timer: n,
        due: (n, n),
        failed_before,
    }
}

fn opened_by_fresh_failures() -> Circuit {
    let circuit = Circuit::default();
    for n in 0..DISTINCT_FAILURES_TO_OPEN as u64 {
        circuit.sink_failed(Admission::Push, expiration(n, false));
    }
    assert_eq!(circuit.gauge_value(), 1);
    circuit
}

/// Spawns `admit` and lets it run until it waits.
async fn admitting(circuit: &Arc<Circuit>, judged: Judged) -> tokio::task::JoinHandle<Admission> {
    let handle = tokio::spawn({
        let circuit = circuit.clone();
        async move { circuit.admit(judged).await }
    });
    tokio::task::yield_now().await;
    handle
}

#[test]
fn backoff_doubles_within_its_jitter_and_stops_at_its_longest() {
    for attempt in 1..=20 {
        let full = FIRST_BACKOFF
            .saturating_mul(1 << (attempt - 1).min(16))
            .min(LONGEST_BACKOFF);
        for seed in 0..50 {
            let wait = backoff(attempt, seed);
            assert!(wait <= full && wait >= full / 2, "{attempt}: {wait:?}");
        }
    }
}

#[test]
fn one_expiration_failing_again_and_again_never_opens_the_circuit() {
    let circuit = Circuit::default();
    for _ in 0..100 {
        circuit.sink_failed(Admission::Push, expiration(7, true));
    }
    assert_eq!(circuit.gauge_value(), 0);
    for n in 1..DISTINCT_FAILURES_TO_OPEN as u64 - 1 {
        circuit.sink_failed(Admission::Push, expiration(n, true));
    }
    assert_eq!(
        circuit.gauge_value(),
        0,
        "one short of the distinct failures that open it"
    );
    circuit.sink_failed(Admission::Push, expiration(99, true));
    assert_eq!(circuit.gauge_value(), 1);
}

#[test]
fn an_answer_among_the_failures_starts_the_count_again() {
    let circuit = Circuit::default();
    for round in 0..10u64 {
        for n in 0..DISTINCT_FAILURES_TO_OPEN as u64 - 1 {
            circuit.sink_failed(Admission::Push, expiration(round * 100 + n, false));
        }
        circuit.sink_answered(expiration(0, false));
    }
    assert_eq!(circuit.gauge_value(), 0);
}

#[tokio::test(start_paused = true)]
async fn fresh_failures_open_the_circuit_and_one_probe_decides() {
    let circuit = opened_by_fresh_failures();
    let opened = Instant::now();
    // Opened by expirations that had not failed before: a fresh one waits out the window.
    assert_eq!(circuit.admit(expiration(10, false)).await, Admission::Probe);
    assert!(opened.elapsed() >= FIRST_OPEN / 2);
    assert_eq!(circuit.gauge_value(), 2);
    // A failed probe opens it for longer.
    circuit.sink_failed(Admission::Probe, expiration(10, false));
    assert_eq!(circuit.gauge_value(), 1);
    let reopened = Instant::now();
    assert_eq!(circuit.admit(expiration(11, false)).await, Admission::Probe);
    assert!(reopened.elapsed() >= FIRST_OPEN);
    circuit.sink_answered(expiration(0, false));
    assert_eq!(circuit.gauge_value(), 0);
    assert_eq!(circuit.admit(expiration(12, true)).await, Admission::Push);
}

#[tokio::test(start_paused = true)]
async fn pushes_waiting_behind_a_probe_go_once_it_succeeds() {
    let circuit = Arc::new(opened_by_fresh_failures());
    assert_eq!(circuit.admit(expiration(10, false)).await, Admission::Probe);
    let waiting = admitting(&circuit, expiration(11, false)).await;
    let retry = admitting(&circuit, expiration(1, true)).await;
    assert!(
        !waiting.is_finished() && !retry.is_finished(),
        "one probe at a time"
    );
    circuit.sink_answered(expiration(0, false));
    assert_eq!(waiting.await.unwrap(), Admission::Push);
    assert_eq!(retry.await.unwrap(), Admission::Push);
}

#[tokio::test(start_paused = true)]
async fn an_abandoned_probe_lets_another_push_probe() {
    let circuit = Arc::new(opened_by_fresh_failures());
    assert_eq!(circuit.admit(expiration(10, false)).await, Admission::Probe);
    let waiting = admitting(&circuit, expiration(11, false)).await;
    assert!(!waiting.is_finished(), "one probe at a time");
    circuit.probe_abandoned();
    assert_eq!(waiting.await.unwrap(), Admission::Probe);
}

#[tokio::test(start_paused = true)]
async fn an_expiration_that_has_not_failed_probes_before_one_that_has() {
    let circuit = Arc::new(opened_by_fresh_failures());
    // Waiting first, and from before the window ends: still not the probe.
    let retry = admitting(&circuit, expiration(1, true)).await;
    let fresh = admitting(&circuit, expiration(20, false)).await;
    assert_eq!(fresh.await.unwrap(), Admission::Probe);
    assert!(
        !retry.is_finished(),
        "the retry waits for the probe's outcome"
    );
    circuit.sink_failed(Admission::Probe, expiration(20, false));
    // No fresh one waits now: the retry may probe once the (longer) window has passed.
    assert_eq!(retry.await.unwrap(), Admission::Probe);
}

#[tokio::test(start_paused = true)]
async fn the_probe_is_the_fresh_expiration_due_soonest() {
    let circuit = Arc::new(opened_by_fresh_failures());
    let later = admitting(&circuit, expiration(30, false)).await;
    let sooner = admitting(&circuit, expiration(25, false)).await;
    assert_eq!(sooner.await.unwrap(), Admission::Probe);
    assert!(!later.is_finished());
    circuit.sink_answered(expiration(0, false));
    assert_eq!(later.await.unwrap(), Admission::Push);
}

#[tokio::test(start_paused = true)]
async fn failures_of_expirations_that_failed_before_let_a_fresh_one_probe_at_once() {
    let circuit = Circuit::default();
    for n in 0..DISTINCT_FAILURES_TO_OPEN as u64 {
        circuit.sink_failed(Admission::Push, expiration(n, true));
    }
    assert_eq!(circuit.gauge_value(), 1);
    let asked = Instant::now();
    assert_eq!(circuit.admit(expiration(40, false)).await, Admission::Probe);
    assert_eq!(asked.elapsed(), Duration::ZERO, "no wait for the window");
    // A fresh probe failing says more: now fresh ones wait the window out too.
    circuit.sink_failed(Admission::Probe, expiration(40, false));
    let asked = Instant::now();
    assert_eq!(circuit.admit(expiration(41, false)).await, Admission::Probe);
    assert!(asked.elapsed() >= FIRST_OPEN);
}

#[tokio::test(start_paused = true)]
async fn a_fresh_expiration_that_stops_waiting_lets_a_retry_probe() {
    let circuit = Arc::new(opened_by_fresh_failures());
    let retry = admitting(&circuit, expiration(1, true)).await;
    let fresh = admitting(&circuit, expiration(50, false)).await;
    // Its delivery was taken away before the window ended.
    fresh.abort();
    assert!(fresh.await.unwrap_err().is_cancelled());
    assert_eq!(retry.await.unwrap(), Admission::Probe);
}

#[tokio::test(start_paused = true)]
async fn a_probe_that_had_failed_before_failing_keeps_the_window_as_it_was() {
    let circuit = opened_by_fresh_failures();
    for timer in 1..=5 {
        let asked = Instant::now();
        assert_eq!(
            circuit.admit(expiration(timer, true)).await,
            Admission::Probe
        );
        assert!(
            asked.elapsed() <= FIRST_OPEN,
            "not doubled: {:?}",
            asked.elapsed()
        );
        circuit.sink_failed(Admission::Probe, expiration(timer, true));
    }
    // Still opened by fresh failures: a fresh one waits out the window.
    let asked = Instant::now();
    assert_eq!(circuit.admit(expiration(9, false)).await, Admission::Probe);
    assert!(asked.elapsed() >= FIRST_OPEN / 2);
}

#[test]
fn a_repeating_timers_firings_failing_count_as_one_timer() {
    let circuit = Circuit::default();
    for firing in 0..100 {
        let judged = Judged {
            timer: 7,
            due: (firing, firing),
            failed_before: false,
        };
        circuit.sink_failed(Admission::Push, judged);
    }
    assert_eq!(circuit.gauge_value(), 0, "one bad timer is not a bad sink");
}

#[tokio::test(start_paused = true)]
async fn a_retry_meeting_an_open_circuit_is_told_to_wait_elsewhere_and_a_fresh_one_probes() {
    let circuit = opened_by_fresh_failures();
    let now = Instant::now();
    let wait = circuit
        .admit_failed_now(expiration(1, true), now)
        .expect_err("a retry does not go while the circuit is open");
    assert!(
        wait >= FIRST_OPEN / 2 && wait <= FIRST_OPEN,
        "about the circuit's window: {wait:?}"
    );
    // It waits elsewhere, so a fresh one is the probe once the window passes.
    assert_eq!(circuit.admit(expiration(9, false)).await, Admission::Probe);
    // While the probe is out, a retry waits elsewhere too, then goes once it closed.
    assert!(circuit
        .admit_failed_now(expiration(2, true), Instant::now())
        .is_err());
    circuit.sink_answered(expiration(0, false));
    assert_eq!(
        circuit.admit_failed_now(expiration(2, true), Instant::now()),
        Ok(Admission::Push)
    );
}

#[tokio::test(start_paused = true)]
async fn with_no_fresh_expiration_waiting_a_retry_probes_once_the_window_passed() {
    let circuit = Circuit::default();
    for n in 0..DISTINCT_FAILURES_TO_OPEN as u64 {
        circuit.sink_failed(Admission::Push, expiration(n, true));
    }
    tokio::time::advance(FIRST_OPEN).await;
    assert_eq!(
        circuit.admit_failed_now(expiration(1, true), Instant::now()),
        Ok(Admission::Probe),
        "a sink with only retries left is still probed"
    );
}

#[tokio::test(start_paused = true)]
async fn two_failed_probes_in_a_row_of_one_timer_close_the_circuit() {
    let circuit = opened_by_fresh_failures();
    for round in 0..2 {
        assert_eq!(circuit.admit(expiration(7, true)).await, Admission::Probe);
        circuit.sink_failed(Admission::Probe, expiration(7, true));
        let expected = if round == 0 { 1 } else { 0 };
        assert_eq!(circuit.gauge_value(), expected, "after probe {round}");
    }
    // Counting afresh from that timer: four more distinct ones open it again.
    for n in 100..100 + DISTINCT_FAILURES_TO_OPEN as u64 - 1 {
        circuit.sink_failed(Admission::Push, expiration(n, false));
    }
    assert_eq!(circuit.gauge_value(), 1);
}
