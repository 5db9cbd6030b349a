//! The worker thread driven by a manual clock: timers fire when (and only when) the clock
//! reaches them, and stopping hands back the ones that had not fired.

use std::sync::mpsc;
use std::time::Duration;

use tickd::clock::ManualClock;
use tickd::domain::{Due, Expiration, NewTimer, Target, TimerRef, TimerView};
use tickd::domain::{FiredRound, Handoff};
use tickd::local::table::command::Command;
use tickd::local::table::{TableConfig, TimerTable};
use tickd::metrics::Metrics;
use tickd::worker::{Worker, WorkerConfig, WorkerHandle};
use tokio::sync::oneshot;

const MILLI: u64 = 1_000_000;
const PATIENCE: Duration = Duration::from_secs(20);

fn new_timer(name: &str, delay_ms: u64) -> NewTimer {
    NewTimer {
        namespace: "manual".into(),
        key: Some(name.into()),
        due: Due::After(Duration::from_millis(delay_ms)),
        payload: name.as_bytes().to_vec().into(),
        repeat: None,
        ttl: None,
        calendar: None,
        replace: false,
        trace: None,
    }
}

fn register(worker: &WorkerHandle<Command>, timers: Vec<NewTimer>) -> Vec<TimerView> {
    let (reply, answer) = oneshot::channel();
    worker.send(Command::Register { timers, reply }).unwrap();
    answer
        .blocking_recv()
        .unwrap()
        .into_iter()
        .map(|result| result.unwrap().timer)
        .collect()
}

/// A round trip through the worker: everything it had to do before this is done.
fn sync(worker: &WorkerHandle<Command>) {
    let (reply, answer) = oneshot::channel();
    let timer = TimerRef {
        namespace: "manual".into(),
        target: Target::Key("never-registered".into()),
    };
    worker.send(Command::Get { timer, reply }).unwrap();
    assert!(answer.blocking_recv().unwrap().is_err());
}

/// A worker sink that passes on the expirations of each wake-up (namespaces forgotten are
/// not this file's concern).
fn expirations_to(fired: mpsc::Sender<Vec<Expiration>>) -> impl FnMut(Vec<FiredRound>) + Send {
    move |rounds| {
        let expirations = rounds
            .into_iter()
            .flat_map(|round| round.handoffs)
            .filter_map(|handoff| match handoff {
                Handoff::Fired(expiration) => Some(expiration),
                Handoff::Forgotten(_) => None,
            })
            .collect();
        fired.send(expirations).unwrap();
    }
}

/// A worker over a 1 ms-tick table on `clock`, and the batches of expirations it fires.
fn start_worker(clock: &ManualClock) -> (Worker<TimerTable>, mpsc::Receiver<Vec<Expiration>>) {
    let table = TimerTable::new(
        TableConfig {
            tick: Duration::from_millis(1),
            max_pending: 1_000,
            max_pending_per_namespace: 0,
            max_namespaces: 0,
        },
        Metrics::new(),
    );
    let (fired, batches) = mpsc::channel();
    let sink = expirations_to(fired);
    let worker = Worker::spawn(table, clock.clone(), WorkerConfig::default(), sink).unwrap();
    (worker, batches)
}

fn names(batch: &[Expiration]) -> Vec<String> {
    batch
        .iter()
        .map(|expiration| expiration.key.clone().unwrap())
        .collect()
}

#[test]
fn timers_fire_when_the_manual_clock_reaches_them_and_stop_returns_the_rest() {
    let clock = ManualClock::starting_at_unix(1_700_000_000 * 1_000_000_000);
    let (worker, batches) = start_worker(&clock);
    let handle = worker.handle();
    register(
        &handle,
        vec![
            new_timer("ten", 10),
            new_timer("twenty", 20),
            new_timer("hour", 3_600_000),
        ],
    );

    clock.advance(9 * MILLI);
    sync(&handle);
    sync(&handle);
    assert!(
        batches.try_recv().is_err(),
        "a timer fired before its deadline"
    );

    clock.advance(6 * MILLI);
    sync(&handle);
    let batch = batches.recv_timeout(PATIENCE).unwrap();
    assert_eq!(names(&batch), ["ten"]);
    assert!(batch[0].fired_unix >= batch[0].deadline_unix, "fired early");
    sync(&handle);
    assert!(batches.try_recv().is_err(), "twenty fired at 15 ms");

    // A long jump catches up on everything due in between, in deadline order.
    register(
        &handle,
        vec![new_timer("thirty", 30 - 15), new_timer("forty", 40 - 15)],
    );
    clock.advance(100 * MILLI);
    sync(&handle);
    let mut caught_up = Vec::new();
    while caught_up.len() < 3 {
        caught_up.extend(batches.recv_timeout(PATIENCE).unwrap());
    }
    assert_eq!(names(&caught_up), ["twenty", "thirty", "forty"]);

    let table = worker.stop();
    let left = table.into_pending(tickd::clock::Clock::now(&clock));
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].key.as_deref(), Some("hour"));
}

fn get(worker: &WorkerHandle<Command>, key: &str) -> TimerView {
    let (reply, answer) = oneshot::channel();
    let timer = TimerRef {
        namespace: "manual".into(),
        target: Target::Key(key.into()),
    };
    worker.send(Command::Get { timer, reply }).unwrap();
    answer.blocking_recv().unwrap().unwrap()
}

#[test]
fn a_repeating_timer_catches_up_on_one_clock() {
    const START: u64 = 1_700_000_000 * 1_000_000_000;
    const SECOND: u64 = 1_000 * MILLI;
    let clock = ManualClock::starting_at_unix(START);
    let (worker, batches) = start_worker(&clock);
    let handle = worker.handle();
    // Ten seconds in the past, every second; and the earliest deadline there is, every tick.
    let mut past = new_timer("past", 0);
    past.due = Due::AtUnix(START - 10 * SECOND);
    past.repeat = Some(Duration::from_secs(1));
    let mut earliest = new_timer("earliest", 0);
    earliest.due = Due::AtUnix(0);
    earliest.repeat = Some(Duration::from_millis(1));
    register(&handle, vec![past, earliest]);

    // Both fire at once, late; the missed firings collapse into that one.
    clock.advance(MILLI / 2);
    sync(&handle);
    let mut first = Vec::new();
    while first.len() < 2 {
        first.extend(batches.recv_timeout(PATIENCE).unwrap());
    }
    let past = get(&handle, "past");
    assert_eq!(
        past.deadline_unix,
        START + SECOND,
        "the next point of its grid"
    );
    assert!(past.remaining <= Duration::from_secs(1));
    let earliest = get(&handle, "earliest");
    assert!(earliest.deadline_unix > START && earliest.deadline_unix <= START + MILLI);
    assert!(earliest.remaining <= Duration::from_millis(1));

    // The second firing of `past` comes when its stated deadline says: one repeat later.
    let mut seen_past = 0;
    let mut advanced = MILLI / 2;
    while advanced < SECOND + MILLI {
        clock.advance(MILLI);
        advanced += MILLI;
        sync(&handle);
        while let Ok(batch) = batches.try_recv() {
            for expiration in batch.iter().filter(|e| e.key.as_deref() == Some("past")) {
                assert!(START + advanced >= expiration.deadline_unix, "fired early");
                assert_eq!(expiration.deadline_unix, START + SECOND);
                seen_past += 1;
            }
        }
    }
    sync(&handle);
    while let Ok(batch) = batches.try_recv() {
        seen_past += batch
            .iter()
            .filter(|e| e.key.as_deref() == Some("past"))
            .count();
    }
    assert_eq!(seen_past, 1, "one firing one repeat after the first");
    worker.stop();
}
