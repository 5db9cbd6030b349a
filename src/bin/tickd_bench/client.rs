//! What the gRPC benchmarks share: the client runtime and connections, the closed-loop driver
//! (`rpc`, `etcd-grant`), the windowed bidi-stream driver (`keepalive`, `etcd-keepalive`) and
//! latency percentiles. tickd and etcd are measured by the same code, so their lines compare.
//!
//! Timing: every driver runs a warm-up first, then a measurement window of `--secs`; calls
//! (or stream answers) that complete inside the window are counted, and their latencies
//! (send to answer, client side) kept in full and sorted for the percentiles.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::{mpsc, Semaphore};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Channel, Endpoint};
use tonic::{Response, Status, Streaming};

/// How long the drivers run before they start counting.
pub(crate) const WARMUP: Duration = Duration::from_secs(1);
/// How long a call may still take after the window closes before it is abandoned.
const GRACE: Duration = Duration::from_secs(5);

/// Connection options common to every gRPC benchmark.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ClientArgs {
    /// Server URL; only loopback is meant (`http://127.0.0.1:PORT`). Several, separated by
    /// commas (the replicas of one cluster): connections go to each in turn.
    #[arg(long, default_value = "http://127.0.0.1:50051")]
    pub addr: String,
    /// HTTP/2 connections the callers and streams are spread over (one connection
    /// serialises on its I/O task).
    #[arg(long, default_value_t = 4)]
    pub connections: usize,
    /// Worker threads of the client's runtime (it shares the machine with the server).
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// A W3C `traceparent` every registration is sent with (`rpc`, `e2e`), so a server with
    /// `--otlp-endpoint` makes spans for each timer: the cost of export, measured. Its
    /// flags `01` mean sampled, `00` carried but not sampled.
    #[arg(long)]
    pub traceparent: Option<String>,
}

/// `--traceparent`, set once when the benchmark starts; the registering calls read it.
static TRACEPARENT: OnceLock<tonic::metadata::MetadataValue<tonic::metadata::Ascii>> =
    OnceLock::new();

/// A registering call's request: `message` with the `--traceparent` header when one is
/// given, so the traced and the untraced runs go through the same code.
pub(crate) fn registration<T>(message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    if let Some(traceparent) = TRACEPARENT.get() {
        request
            .metadata_mut()
            .insert("traceparent", traceparent.clone());
    }
    request
}

impl ClientArgs {
    /// Runs `bench` on a fresh multi-threaded runtime and prints its line, or its error to
    /// stderr with a failing exit code.
    pub(crate) fn run<F>(&self, bench: impl FnOnce(Vec<Channel>) -> F)
    where
        F: Future<Output = Result<String, String>>,
    {
        if let Some(traceparent) = &self.traceparent {
            match traceparent.parse() {
                Ok(value) => {
                    let _ = TRACEPARENT.set(value);
                }
                Err(_) => {
                    eprintln!("tickd-bench: --traceparent {traceparent:?} is not a header value");
                    std::process::exit(2);
                }
            }
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(self.threads.max(1))
            .enable_all()
            .build()
            .expect("building the client runtime");
        let result = runtime.block_on(async {
            let channels = self.connect().await?;
            bench(channels).await
        });
        // Streams the server keeps open must not hold the process.
        runtime.shutdown_timeout(Duration::from_millis(100));
        match result {
            Ok(line) => println!("{line}"),
            Err(message) => {
                eprintln!("tickd-bench: {message}");
                std::process::exit(1);
            }
        }
    }

    /// `--connections` separate HTTP/2 connections (at least one per address), spread over
    /// the addresses in turn.
    async fn connect(&self) -> Result<Vec<Channel>, String> {
        let addresses: Vec<&str> = self.addr.split(',').map(str::trim).collect();
        let mut endpoints = Vec::with_capacity(addresses.len());
        for address in &addresses {
            let endpoint = Endpoint::from_shared(address.to_string())
                .map_err(|error| format!("--addr {address}: {error}"))?
                .tcp_nodelay(true)
                .connect_timeout(Duration::from_secs(5))
                .initial_stream_window_size(1 << 20)
                .initial_connection_window_size(8 << 20);
            endpoints.push((address, endpoint));
        }
        let count = self.connections.max(endpoints.len());
        let mut channels = Vec::with_capacity(count);
        for (address, endpoint) in endpoints.iter().cycle().take(count) {
            let channel = endpoint
                .connect()
                .await
                .map_err(|error| format!("connecting to {address}: {error}"))?;
            channels.push(channel);
        }
        Ok(channels)
    }
}

/// What a driver measured inside its window.
#[derive(Default)]
pub(crate) struct Outcome {
    /// Items completed: timers registered, calls made, heartbeats answered.
    pub items: u64,
    pub errors: u64,
    pub first_error: Option<String>,
    /// Nanoseconds, sorted once `finish` ran.
    pub latencies: Vec<u64>,
    pub secs: f64,
}

impl Outcome {
    fn merge(&mut self, other: Outcome) {
        self.items += other.items;
        self.errors += other.errors;
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
        self.latencies.extend(other.latencies);
    }

    fn error(&mut self, counted: bool, message: impl FnOnce() -> String) {
        if counted {
            self.errors += 1;
        }
        if self.first_error.is_none() {
            self.first_error = Some(message());
        }
    }

    fn finish(mut self, secs: f64) -> Self {
        self.latencies.sort_unstable();
        self.secs = secs;
        if let Some(message) = &self.first_error {
            eprintln!("tickd-bench: {} errors, first: {message}", self.errors);
        }
        self
    }

    pub(crate) fn per_sec(&self) -> f64 {
        self.items as f64 / self.secs
    }

    /// The `q` quantile of the latencies, in milliseconds.
    pub(crate) fn quantile_ms(&self, q: f64) -> f64 {
        quantile(&self.latencies, q) as f64 / 1e6
    }
}

/// The `q` quantile (nearest rank) of sorted values; 0 when there are none.
pub(crate) fn quantile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// One closed-loop caller: makes a call, waits for its answer, makes the next.
pub(crate) trait Caller: Send + 'static {
    /// One call; says how many items it completed (timers registered, or 1).
    fn call(&mut self) -> impl Future<Output = Result<u64, Status>> + Send;
}

/// Runs every caller in its own task for the warm-up and then `measure`.
pub(crate) async fn closed_loop<C: Caller>(callers: Vec<C>, measure: Duration) -> Outcome {
    let begin = Instant::now() + WARMUP;
    let end = begin + measure;
    let tasks: Vec<_> = callers
        .into_iter()
        .map(|mut caller| {
            tokio::spawn(async move {
                let mut outcome = Outcome::default();
                while Instant::now() < end {
                    let sent = Instant::now();
                    let result = tokio::time::timeout_at((end + GRACE).into(), caller.call()).await;
                    let answered = Instant::now();
                    let counted = answered >= begin && answered <= end;
                    match result {
                        Ok(Ok(items)) if counted => {
                            outcome.items += items;
                            outcome.latencies.push(nanos(answered - sent));
                        }
                        Ok(Ok(_)) => {}
                        Ok(Err(status)) => {
                            outcome.error(counted, || status.to_string());
                            // A failing server is not hammered in a hot loop.
                            tokio::time::sleep(Duration::from_millis(1)).await;
                        }
                        Err(_) => outcome.error(counted, || "call timed out".to_string()),
                    }
                }
                outcome
            })
        })
        .collect();
    let mut total = Outcome::default();
    for task in tasks {
        total.merge(task.await.expect("caller task"));
    }
    total.finish(measure.as_secs_f64())
}

/// Drives one bidi stream of heartbeats with up to `window` requests in flight, for the
/// warm-up and then until `end`. Answers must come back in request order (tickd and etcd
/// both answer a stream's heartbeats in arrival order); `check` is given each answer and the
/// sequence number of the request it answers, and says whether it succeeded.
pub(crate) async fn windowed_stream<Req, Resp, Open, Fut>(
    window: usize,
    begin: Instant,
    end: Instant,
    mut request: impl FnMut(u64) -> Req + Send + 'static,
    open: Open,
    check: impl Fn(&Resp, u64) -> Result<(), String>,
) -> Outcome
where
    Req: Send + 'static,
    Open: FnOnce(ReceiverStream<Req>) -> Fut,
    Fut: Future<Output = Result<Response<Streaming<Resp>>, Status>>,
{
    let window = window.max(1);
    let (requests, outgoing) = mpsc::channel(window);
    let sent_at = Arc::new(Mutex::new(VecDeque::<Instant>::with_capacity(window)));
    let permits = Arc::new(Semaphore::new(window));
    // The sender runs before the stream is open: a server may hold its response headers
    // until the first answer (etcd does).
    let sender = {
        let sent_at = sent_at.clone();
        let permits = permits.clone();
        tokio::spawn(async move {
            let mut sequence = 0u64;
            loop {
                let Ok(permit) = permits.acquire().await else {
                    break;
                };
                permit.forget();
                if Instant::now() >= end {
                    break;
                }
                let next = request(sequence);
                sent_at.lock().expect("sent_at").push_back(Instant::now());
                if requests.send(next).await.is_err() {
                    break;
                }
                sequence += 1;
            }
            // Dropping `requests` ends the request stream: the server finishes the stream.
        })
    };
    let mut outcome = Outcome::default();
    let deadline = (end + GRACE).into();
    match tokio::time::timeout_at(deadline, open(ReceiverStream::new(outgoing))).await {
        Ok(Ok(response)) => {
            let mut answers = response.into_inner();
            let mut sequence = 0u64;
            loop {
                let answer = match tokio::time::timeout_at(deadline, answers.message()).await {
                    Ok(Ok(Some(answer))) => answer,
                    Ok(Ok(None)) => break,
                    Ok(Err(status)) => {
                        outcome.error(true, || status.to_string());
                        break;
                    }
                    Err(_) => {
                        outcome.error(true, || "stream answers timed out".to_string());
                        break;
                    }
                };
                let answered = Instant::now();
                let sent = sent_at.lock().expect("sent_at").pop_front();
                permits.add_permits(1);
                let counted = answered >= begin && answered <= end;
                match (check(&answer, sequence), sent) {
                    (Ok(()), Some(sent)) if counted => {
                        outcome.items += 1;
                        outcome.latencies.push(nanos(answered - sent));
                    }
                    (Ok(()), _) => {}
                    (Err(message), _) => outcome.error(counted, || message),
                }
                sequence += 1;
            }
        }
        Ok(Err(status)) => outcome.error(true, || format!("opening the stream: {status}")),
        Err(_) => outcome.error(true, || "opening the stream timed out".to_string()),
    }
    permits.close();
    sender.abort();
    outcome
}

/// Runs `streams` windowed streams together and merges what they measured.
pub(crate) async fn windowed_streams(
    streams: Vec<tokio::task::JoinHandle<Outcome>>,
    measure: Duration,
) -> Outcome {
    let mut total = Outcome::default();
    for stream in streams {
        total.merge(stream.await.expect("stream task"));
    }
    total.finish(measure.as_secs_f64())
}

fn nanos(duration: Duration) -> u64 {
    duration.as_nanos() as u64
}

/// Wall-clock nanoseconds since the Unix epoch.
pub(crate) fn wall_nanos() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_nanos() as i64
}

pub(crate) fn timestamp_nanos(timestamp: &prost_types::Timestamp) -> i64 {
    timestamp.seconds * 1_000_000_000 + i64::from(timestamp.nanos)
}

pub(crate) fn duration(value: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: value.as_secs() as i64,
        nanos: value.subsec_nanos() as i32,
    }
}

/// A namespace no earlier run used.
pub(crate) fn fresh_namespace(prefix: &str) -> String {
    format!("{prefix}-{}-{}", std::process::id(), wall_nanos() / 1_000)
}

pub(crate) fn ms(value: f64) -> String {
    format!("{value:.3}")
}
