//! The harness: one seed drives a swarm of client calls, clock moves, crashes and disk
//! faults against a simulated tickd, and after every step the answers and deliveries are
//! checked against the [`Model`] (timers) and the [`Ledger`] (deliveries).
//!
//! A run is a pure function of its seed and step count: the disk, the clock, the node and
//! the choices all draw from generators forked from the seed, nothing reads real time, and
//! every step is folded into the trace hash, so a failure replays exactly.

use std::fmt::{self, Write as _};
use std::time::Duration;

use tokio::sync::oneshot;

use super::disk::SimDisk;
use super::ledger::{Held, Ledger, RedriveCandidates};
use super::model::{Model, Violation, LOSABLE_NANOS};
use super::node::{Later, Node, NodeConfig};
use super::pusher::{SimPusher, NAMESPACE as PUSHED};
use super::rng::Rng;
use crate::clock::ManualClock;
use crate::domain::DeliveryConfig;
use crate::domain::{
    AckOutcome, RedriveOutcome, Registered, SubscribeOptions, TimerError, TimerView,
};
use crate::local::delivery::Subscription;
use crate::local::store::{StoreError, SyncMode};
use crate::local::table::TableConfig;

mod answers;
mod calls;
mod pushing;

const MILLISECOND: u64 = 1_000_000;
/// The simulation's wall clock starts here (2023-11-14), the same for every seed.
const UNIX_ORIGIN: u64 = 1_700_000_000_000_000_000;
const NAMESPACES: [&str; 2] = ["a", "b"];
/// Where timers are registered: the clients' namespaces, and the pusher's.
const REGISTERED_IN: [&str; 3] = ["a", "b", PUSHED];
const KEYS: [&str; 3] = ["k0", "k1", "k2"];
/// Deliveries of one expiration before it is dead.
pub(super) const MAX_ATTEMPTS: u32 = 4;

/// How a run ended.
#[derive(Debug)]
pub struct Report {
    pub seed: u64,
    pub steps: u64,
    /// A hash of every step's choice and outcome: equal for two runs of one seed.
    pub trace: u64,
    /// Some: a promise was broken at this step.
    pub failure: Option<(u64, String)>,
    /// Firings checked, restarts made, runs that ended on a refusal to start (damage).
    pub firings: u64,
    pub restarts: u64,
    pub refused_to_start: bool,
}

/// A call in flight, with what the model needs to judge its answer.
enum Call {
    Register {
        token: u64,
        answer: oneshot::Receiver<Vec<Result<Registered, TimerError>>>,
    },
    Cancel {
        id: u64,
        answer: oneshot::Receiver<Result<bool, TimerError>>,
    },
    Reschedule {
        id: u64,
        asked: u64,
        answer: oneshot::Receiver<Result<TimerView, TimerError>>,
    },
    Touch {
        id: u64,
        /// The ttl the heartbeat gave, if any.
        ttl: Option<u64>,
        sent_at: u64,
        answer: oneshot::Receiver<Result<TimerView, TimerError>>,
    },
}

struct Client {
    namespace: &'static str,
    subscription: Subscription,
    ack_timeout: u64,
    /// The ledger's number for this subscription.
    number: u64,
}

/// One simulated run.
pub(crate) struct Harness {
    seed: u64,
    choices: Rng,
    disk: SimDisk,
    clock: ManualClock,
    config: NodeConfig,
    node: Option<Node>,
    /// True once a start refused the directory (damage): the run ends there.
    refused_to_start: bool,
    calls: Vec<Call>,
    /// Acks sent, with the deliveries they name and when they were sent.
    acks: Vec<(Later<AckOutcome>, Vec<Held>, u64)>,
    /// Redrives sent, with their namespace and the firings each may take back.
    redrives: Vec<(Later<RedriveOutcome>, &'static str, RedriveCandidates)>,
    clients: Vec<Client>,
    model: Model,
    ledger: Ledger,
    trace: u64,
    verbose: bool,
    restarts: u64,
    firings: u64,
    /// The push sink's pusher, of namespace [`PUSHED`].
    pusher: SimPusher,
    /// After each step: whether failed expirations held the pusher's window (see
    /// `pushing`'s head-of-line bound).
    blocked: Vec<(u64, bool)>,
    in_liveness: bool,
}

impl Harness {
    pub(crate) fn new(seed: u64) -> Self {
        let mut root = Rng::new(seed);
        let disk = SimDisk::new(root.fork());
        let mut choices = root.fork();
        let sync = if choices.chance(3, 4) {
            SyncMode::Always
        } else {
            SyncMode::Interval
        };
        let pusher = SimPusher::new(&mut choices, UNIX_ORIGIN);
        let config = NodeConfig {
            sync,
            delivery: DeliveryConfig {
                max_attempts: MAX_ATTEMPTS,
                ..DeliveryConfig::default()
            },
            table: TableConfig {
                tick: Duration::from_millis(1),
                max_pending: 48,
                max_pending_per_namespace: 0,
                max_namespaces: 0,
            },
        };
        Self {
            seed,
            choices,
            disk,
            clock: ManualClock::starting_at_unix(UNIX_ORIGIN),
            config,
            node: None,
            refused_to_start: false,
            calls: Vec::new(),
            acks: Vec::new(),
            redrives: Vec::new(),
            clients: Vec::new(),
            model: Model::default(),
            ledger: Ledger::new(),
            trace: 0xcbf2_9ce4_8422_2325,
            verbose: std::env::var_os("TICKD_DST_VERBOSE").is_some(),
            restarts: 0,
            firings: 0,
            pusher,
            blocked: Vec::new(),
            in_liveness: false,
        }
    }

    fn now(&self) -> u64 {
        UNIX_ORIGIN + self.clock_monotonic()
    }

    fn clock_monotonic(&self) -> u64 {
        crate::clock::Clock::now(&self.clock).monotonic
    }

    /// Folds `event` into the trace hash (FNV-1a) as it is formatted, without building a
    /// string; prints it with `TICKD_DST_VERBOSE=1`.
    fn trace(&mut self, event: impl fmt::Display) {
        if self.verbose {
            eprintln!("{} {event}", self.now() - UNIX_ORIGIN);
        }
        let mut hash = TraceHash(self.trace);
        // Writing to a hash cannot fail.
        let _ = writeln!(hash, "{event}");
        self.trace = hash.0;
    }

    /// Runs `steps` steps, then the liveness phase.
    pub(crate) fn run(mut self, steps: u64) -> Report {
        let failure = self.start().and_then(|()| {
            for step in 0..steps {
                self.step().map_err(|violation| (step, violation.0))?;
                if self.refused_to_start {
                    return Ok(());
                }
            }
            self.liveness().map_err(|violation| (steps, violation.0))
        });
        Report {
            seed: self.seed,
            steps,
            trace: self.trace,
            failure: failure.err(),
            firings: self.firings,
            restarts: self.restarts,
            refused_to_start: self.refused_to_start,
        }
    }

    fn start(&mut self) -> Result<(), (u64, String)> {
        self.restart().map_err(|violation| (0, violation.0))
    }

    /// Starts a process on the disk as it is; a refusal for damage ends the run, having
    /// checked that it changed nothing.
    fn restart(&mut self) -> Result<(), Violation> {
        let before = self.disk.fingerprint();
        let schedules = calls::SCHEDULES.iter().cloned();
        match Node::start(&self.disk, &self.clock, &self.config, schedules) {
            Ok(node) => {
                self.restarts += 1;
                self.ledger.restarted();
                let boot = self.restarts;
                self.trace(format_args!("start boot={boot}"));
                self.node = Some(node);
                self.settle()
            }
            Err(StoreError::Corrupt { path, offset, .. }) => {
                self.trace(format_args!("refused {} at {offset}", path.display()));
                // Damage tickd did not make: bits flipped at rest, or garbage a power loss
                // left where an append was never synced (which recovery cannot tell from
                // damage to synced bytes, so it refuses both: a refusal, nothing lost).
                if !self.ledger.damaged_at_rest && !self.disk.garbled_on_power_loss() {
                    return Err(Violation(format!(
                        "start refused {} (damage at byte {offset}) with no damage injected",
                        path.display()
                    )));
                }
                if self.disk.fingerprint() != before {
                    return Err(Violation(
                        "a start that refused damage changed files".into(),
                    ));
                }
                self.refused_to_start = true;
                Ok(())
            }
            Err(StoreError::Io { path, source }) => {
                // A fault injected into recovery: the process exits; try again next step.
                self.trace(format_args!("start failed {}: {source}", path.display()));
                self.disk.crash_process();
                Ok(())
            }
        }
    }

    /// One step: a weighted choice of operation, then the process runs, then every check.
    fn step(&mut self) -> Result<(), Violation> {
        if self.node.is_none() {
            return self.restart();
        }
        let roll = self.choices.below(100);
        match roll {
            0..=21 => self.register(),
            22..=27 => self.cancel(),
            28..=32 => self.reschedule(),
            33..=35 => self.subscribe(),
            36..=37 => self.unsubscribe(),
            38..=53 => self.ack(),
            54..=78 => self.advance(),
            79 => self.crash(false)?,
            80 => self.crash(true)?,
            81 => self.clean_restart()?,
            82..=84 => self.inject_fault(),
            85 if self.choices.chance(1, 8) => self.flip_bit(),
            86..=87 => self.snapshot(),
            88..=90 => self.touch(),
            91..=92 => self.redrive(),
            93 => self.pause_or_resume(),
            _ => self.advance(),
        }
        if self.node.is_none() {
            return Ok(());
        }
        self.settle()?;
        self.ledger.check_orphans()
    }

    /// Lets the process run at the current time, then takes in what came back.
    fn settle(&mut self) -> Result<(), Violation> {
        if let Some(node) = &mut self.node {
            node.run();
        }
        if self.disk.crashed() {
            // A crash at the n-th disk call: the machine loses power there. What the
            // subscribers' streams hold had left tickd (its attempts written): a client
            // has it.
            self.receive()?;
            return self.crash(true);
        }
        self.receive()?;
        if !self.pusher_turns()? {
            return self.crash(true);
        }
        self.answers()?;
        if self.node.as_ref().is_some_and(Node::store_failed) {
            // The log failed: tickd exits; the next step starts it again.
            self.trace("store failed: exit");
            self.process_gone(false);
            self.disk.crash_process();
        }
        self.note_blocked();
        Ok(())
    }

    fn process_gone(&mut self, machine: bool) {
        self.node = None;
        self.clients.clear();
        self.acks.clear();
        // Redrives never answered are in doubt: their candidates may come again at
        // attempt 1, or stay dead.
        self.redrives.clear();
        self.calls.clear();
        let now = self.now();
        self.pusher.gone(&mut self.ledger, &mut self.choices, now);
        self.blocked.push((now, false));
        self.model.crashed();
        // With `--sync interval` a power cut may take what was answered in the last sync
        // interval (docs/durability.md, `--sync`); with `always`, nothing answered.
        let power_cut = machine.then(|| {
            (self.config.sync == SyncMode::Interval)
                .then(|| self.now().saturating_sub(LOSABLE_NANOS))
        });
        if let Some(Some(lost_from)) = power_cut {
            self.model.power_cut(lost_from);
        }
        self.ledger.crashed(power_cut);
    }

    /// SIGKILL, or (`machine`) a power cut that keeps only what was synced.
    fn crash(&mut self, machine: bool) -> Result<(), Violation> {
        self.trace(if machine {
            "crash machine"
        } else {
            "crash process"
        });
        // Answers already sent are answers: take them in before the process is gone.
        self.answers()?;
        self.process_gone(machine);
        if machine {
            self.disk.crash_machine();
        } else {
            self.disk.crash_process();
        }
        Ok(())
    }

    fn clean_restart(&mut self) -> Result<(), Violation> {
        self.trace("stop");
        if let Some(node) = self.node.take() {
            node.stop();
        }
        self.answers()?;
        self.process_gone(false);
        self.disk.crash_process();
        Ok(())
    }

    fn inject_fault(&mut self) {
        let fault = self.choices.below(6);
        self.trace(format_args!("fault {fault}"));
        match fault {
            0 => self.disk.fail_append_next(),
            1 => self.disk.enospc_next_append(),
            2 => self.disk.fail_sync_next(),
            3 => self.disk.fail_set_len_next(),
            4 => self.disk.fail_read_next(),
            _ => self.disk.crash_at_call(1 + self.choices.below(6)),
        }
    }

    /// Damage at rest to a synced byte of some file, then a restart that must refuse it
    /// (or start with nothing acknowledged missing).
    fn flip_bit(&mut self) {
        let files = self.disk.files();
        let newest_log = files
            .iter()
            .map(|(path, _)| path.clone())
            .filter(|path| path.extension().is_some_and(|extension| extension == "log"))
            .max();
        if files.is_empty() {
            return self.advance();
        }
        let (path, length) = files[self.choices.below_usize(files.len())].clone();
        if length == 0 {
            return self.advance();
        }
        let bit = self.choices.below(length * 8);
        if Some(&path) == newest_log.as_ref() && self.flip_zeros_a_sector_tail(&path, bit) {
            // The one damage recovery cannot tell from a torn append (docs/durability.md,
            // what it does not check).
            return self.advance();
        }
        self.trace(format_args!("flip {} bit {bit}", path.display()));
        if self.disk.flip_bit_at_rest(&path, bit).is_ok() {
            self.ledger.damaged_at_rest = true;
            let _ = self.crash(false);
        }
    }

    /// Whether flipping `bit` of `path` would make its bytes zeros from a sector boundary to
    /// the end: what a crash leaves where an append's end never reached the disk, so
    /// recovery forgives it as a torn one (`frame::written_part`).
    fn flip_zeros_a_sector_tail(&self, path: &std::path::Path, bit: u64) -> bool {
        const SECTOR_BYTES: usize = 512;
        let Ok(mut bytes) = self.disk.read_all(path) else {
            return false;
        };
        let byte = (bit / 8) as usize;
        bytes[byte] ^= 1 << (bit % 8);
        let nonzero = bytes
            .iter()
            .rposition(|&value| value != 0)
            .map_or(0, |last| last + 1);
        nonzero <= byte && nonzero.next_multiple_of(SECTOR_BYTES) < bytes.len()
    }

    /// Faults off, the clock past every deadline, one subscriber per namespace acking
    /// everything: every promised firing must come, and be delivered.
    fn liveness(&mut self) -> Result<(), Violation> {
        if self.refused_to_start {
            return Ok(());
        }
        self.trace("liveness");
        self.in_liveness = true;
        self.pusher.paused = false;
        self.disk.disarm();
        if self.disk.crashed() {
            self.disk.crash_process();
        }
        for _ in 0..3 {
            if self.node.is_none() {
                self.restart()?;
            }
            if self.refused_to_start {
                return Ok(());
            }
        }
        if self.node.is_none() {
            return Err(Violation("tickd does not start once faults are off".into()));
        }
        for namespace in NAMESPACES {
            if !self
                .clients
                .iter()
                .any(|client| client.namespace == namespace)
            {
                let subscription = self.node().subscribe(SubscribeOptions {
                    namespace: namespace.to_owned(),
                    observer: false,
                    ack_timeout: Some(Duration::from_secs(5)),
                    max_unacked: Some(1_000),
                    auto_ack: false,
                });
                let number = self.ledger.subscribed();
                self.clients.push(Client {
                    namespace,
                    subscription,
                    ack_timeout: 5_000 * MILLISECOND,
                    number,
                });
            }
        }
        let owed = self.pusher_unsettled();
        // Enough for the pusher's circuit, open up to 30 s at a time while poison
        // expirations probe it, to let the last of them through.
        for _ in 0..20_000 {
            if let Some(held) = self.ledger.pick_to_ack(&mut self.choices, 64) {
                self.send_ack(held);
            } else if !self.model.owes_a_firing()
                && !self.ledger.owes_a_redelivery()
                && !self.pusher_owes(&owed)
            {
                // Everything owed has fired (or been redriven and come again) and every
                // delivery is settled. Repeating and cron timers would fire for ever:
                // waiting on them checks nothing more.
                break;
            } else {
                let now = self.clock_monotonic();
                let node_wakeup = self.node.as_ref().and_then(Node::next_wakeup);
                let wakeup = [node_wakeup, self.pusher_wakeup()]
                    .into_iter()
                    .flatten()
                    .min();
                match wakeup {
                    Some(due) => self.clock.advance(due.saturating_sub(now).max(1)),
                    None => self.clock.advance(100 * MILLISECOND),
                }
            }
            self.settle()?;
            if self.node.is_none() {
                return Err(Violation("tickd stopped during the liveness phase".into()));
            }
        }
        if self.ledger.owes_a_redelivery() {
            return Err(Violation(
                "an expiration a Redrive took back never came again".into(),
            ));
        }
        // Nothing lost: whatever the pusher took is acknowledged, or dead.
        self.ledger
            .check_none_lost(&owed, MAX_ATTEMPTS)
            .map_err(|lost| {
                Violation(format!(
                    "{}; the pusher: {}",
                    lost.0,
                    self.pusher.describe()
                ))
            })?;
        let unfired = self.model.unfired();
        if !unfired.is_empty() {
            return Err(Violation(format!(
                "acknowledged timers never fired: {:016x?}; the pusher: {}",
                &unfired[..unfired.len().min(8)],
                self.pusher.describe()
            )));
        }
        Ok(())
    }
}

/// An FNV-1a hash that text is written into.
struct TraceHash(u64);

impl fmt::Write for TraceHash {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        for byte in text.bytes() {
            self.0 ^= u64::from(byte);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
        Ok(())
    }
}
