//! An HTTP sink written for the tests: a hyper server on loopback that records every push
//! tickd makes and answers as the test's script says (a status, and a `Retry-After` if
//! wanted), so that a test can make a sink fail, reject, throttle or go down, or hold its
//! answers (pushes stay in flight, unacknowledged, until it lets them go). Over TLS with
//! [`HttpSink::start_tls`]: it then records the client certificate each push came with,
//! and counts the handshakes that failed. It speaks HTTP/1.1 and HTTP/2 (from the first
//! byte, or as chosen in the TLS handshake when the test's server configuration offers
//! `h2`), recording which each push came over, and counts the connections it accepted
//! and those closed. [`SinkOptions`] make it speak HTTP/1.1 only, or answer every push
//! with a body that never ends.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper::{Request, Response, Version};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::{watch, Notify};
use tokio::task::JoinSet;

use super::rpc::PATIENCE;

/// One push as the sink received it.
#[derive(Clone, Debug)]
pub(crate) struct Push {
    pub key: String,
    pub delivery_id: String,
    pub attempt: u32,
    pub namespace: String,
    pub content_type: String,
    pub authorization: Option<String>,
    /// Over TLS, the client's certificate (DER), if it presented one.
    pub client_certificate: Option<Vec<u8>>,
    pub version: Version,
    /// The Standard Webhooks headers (`webhook-id`, `webhook-timestamp`,
    /// `webhook-signature`), each if sent.
    pub webhook: [Option<String>; 3],
    /// The W3C trace headers (`traceparent`, `tracestate`, `baggage`), each if sent.
    pub trace: [Option<String>; 3],
    pub body: Bytes,
    pub at: Instant,
}

/// The answer to a push: its status and `Retry-After`. Called with the push and how many
/// pushes of its expiration (its idempotency key) came before it.
pub(crate) type Script = Arc<dyn Fn(&Push, usize) -> (u16, Option<&'static str>) + Send + Sync>;

/// A script answering `status` to every push.
pub(crate) fn always(status: u16) -> Script {
    Arc::new(move |_, _| (status, None))
}

/// How the sink speaks, beyond its script.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SinkOptions {
    /// HTTP/1.1 only: a client speaking HTTP/2 from the first byte is not understood.
    pub http1_only: bool,
    /// Every answer's body is endless: the sink writes it until the client goes.
    pub endless_body: bool,
}

pub(crate) struct HttpSink {
    pub addr: SocketAddr,
    pushes: Arc<Mutex<Vec<Push>>>,
    pushed: Arc<Notify>,
    /// True while answers are held: a push is recorded at once, answered on release.
    holding: watch::Sender<bool>,
    /// TLS handshakes that failed (a client that does not trust the sink's certificate).
    failed_handshakes: Arc<AtomicUsize>,
    /// TCP connections accepted.
    accepted: Arc<AtomicUsize>,
    /// Connections that ended (either side closed them).
    closed: Arc<AtomicUsize>,
    tasks: JoinSet<()>,
}

impl HttpSink {
    pub(crate) async fn start(script: Script) -> Self {
        Self::start_on("127.0.0.1:0".parse().unwrap(), script).await
    }

    /// On a given address: a sink brought back up where tickd expects it.
    pub(crate) async fn start_on(addr: SocketAddr, script: Script) -> Self {
        Self::start_inner(addr, script, None, SinkOptions::default()).await
    }

    /// Speaking as `options` say.
    pub(crate) async fn start_with(script: Script, options: SinkOptions) -> Self {
        Self::start_inner("127.0.0.1:0".parse().unwrap(), script, None, options).await
    }

    /// Over TLS, with this server configuration (its certificate, and whether it asks for
    /// a client's).
    pub(crate) async fn start_tls(script: Script, tls: rustls::ServerConfig) -> Self {
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
        let options = SinkOptions::default();
        Self::start_inner(
            "127.0.0.1:0".parse().unwrap(),
            script,
            Some(acceptor),
            options,
        )
        .await
    }

    async fn start_inner(
        addr: SocketAddr,
        script: Script,
        tls: Option<tokio_rustls::TlsAcceptor>,
        options: SinkOptions,
    ) -> Self {
        let listener = TcpListener::bind(addr).await.expect("bind the test sink");
        let addr = listener.local_addr().unwrap();
        let pushes = Arc::new(Mutex::new(Vec::new()));
        let pushed = Arc::new(Notify::new());
        let holding = watch::Sender::new(false);
        let failed_handshakes = Arc::new(AtomicUsize::new(0));
        let accepted = Arc::new(AtomicUsize::new(0));
        let closed = Arc::new(AtomicUsize::new(0));
        let mut tasks = JoinSet::new();
        let connections = Arc::new(Mutex::new(JoinSet::new()));
        {
            let (pushes, pushed, connections, holding, failed_handshakes, accepted) = (
                pushes.clone(),
                pushed.clone(),
                connections.clone(),
                holding.clone(),
                failed_handshakes.clone(),
                accepted.clone(),
            );
            let closed = closed.clone();
            tasks.spawn(async move {
                loop {
                    let Ok((stream, _)) = listener.accept().await else {
                        continue;
                    };
                    accepted.fetch_add(1, Ordering::SeqCst);
                    let (pushes, pushed, script) = (pushes.clone(), pushed.clone(), script.clone());
                    let held = holding.subscribe();
                    let (tls, failed_handshakes) = (tls.clone(), failed_handshakes.clone());
                    let closed = closed.clone();
                    connections.lock().unwrap().spawn(async move {
                        let Some(tls) = tls else {
                            let recorder = Recorder {
                                pushes,
                                pushed: pushed.clone(),
                                held,
                                client_certificate: None,
                            };
                            serve(stream, recorder, script, options).await;
                            closed.fetch_add(1, Ordering::SeqCst);
                            pushed.notify_waiters();
                            return;
                        };
                        let stream = match tls.accept(stream).await {
                            Ok(stream) => stream,
                            Err(_) => {
                                failed_handshakes.fetch_add(1, Ordering::SeqCst);
                                closed.fetch_add(1, Ordering::SeqCst);
                                pushed.notify_waiters();
                                return;
                            }
                        };
                        let client_certificate = stream
                            .get_ref()
                            .1
                            .peer_certificates()
                            .and_then(|chain| chain.first())
                            .map(|certificate| certificate.to_vec());
                        let recorder = Recorder {
                            pushes,
                            pushed: pushed.clone(),
                            held,
                            client_certificate,
                        };
                        serve(stream, recorder, script, options).await;
                        closed.fetch_add(1, Ordering::SeqCst);
                        pushed.notify_waiters();
                    });
                }
            });
        }
        // Dropping the sink drops `connections` with the accept loop: every connection closes.
        tasks.spawn(async move {
            let _keep = connections;
            std::future::pending::<()>().await
        });
        HttpSink {
            addr,
            pushes,
            pushed,
            holding,
            failed_handshakes,
            accepted,
            closed,
            tasks,
        }
    }

    /// TCP connections accepted so far.
    pub(crate) fn connections(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    /// Waits until `count` connections have ended (at most [`PATIENCE`]).
    pub(crate) async fn wait_for_closed_connections(&self, count: usize) {
        let deadline = tokio::time::Instant::now() + PATIENCE * 2;
        loop {
            let pushed = self.pushed.notified();
            tokio::pin!(pushed);
            pushed.as_mut().enable();
            if self.closed.load(Ordering::SeqCst) >= count {
                return;
            }
            if tokio::time::timeout_at(deadline, pushed).await.is_err() {
                panic!(
                    "{} of {} connections ended, not {count}",
                    self.closed.load(Ordering::SeqCst),
                    self.connections()
                );
            }
        }
    }

    /// `https://localhost:PORT/PATH`.
    pub(crate) fn https_url(&self, path: &str) -> String {
        format!("https://localhost:{}{path}", self.addr.port())
    }

    pub(crate) fn failed_handshakes(&self) -> usize {
        self.failed_handshakes.load(Ordering::SeqCst)
    }

    /// Waits until a TLS handshake has failed (at most [`PATIENCE`]).
    pub(crate) async fn wait_for_a_failed_handshake(&self) {
        let deadline = tokio::time::Instant::now() + PATIENCE * 2;
        loop {
            let pushed = self.pushed.notified();
            tokio::pin!(pushed);
            pushed.as_mut().enable();
            if self.failed_handshakes() > 0 {
                return;
            }
            if tokio::time::timeout_at(deadline, pushed).await.is_err() {
                panic!("no TLS handshake failed");
            }
        }
    }

    /// `http://ADDR/PATH`.
    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub(crate) fn pushes(&self) -> Vec<Push> {
        self.pushes.lock().unwrap().clone()
    }

    /// Waits until the pushes received satisfy `condition`, which is checked at each push
    /// (at most [`PATIENCE`], then fails with `what` and the pushes).
    pub(crate) async fn wait_for(&self, what: &str, condition: impl Fn(&[Push]) -> bool) {
        let deadline = tokio::time::Instant::now() + PATIENCE * 2;
        loop {
            let pushed = self.pushed.notified();
            tokio::pin!(pushed);
            pushed.as_mut().enable();
            if condition(&self.pushes.lock().unwrap()) {
                return;
            }
            if tokio::time::timeout_at(deadline, pushed).await.is_err() {
                let pushes = self.pushes();
                panic!(
                    "the sink never saw {what}; it received {} pushes: {:#?}",
                    pushes.len(),
                    pushes.iter().rev().take(10).collect::<Vec<_>>()
                );
            }
        }
    }

    /// Holds every answer from now on (pushes already answered are not affected): what
    /// tickd pushes meanwhile is recorded and stays in flight until [`HttpSink::release`].
    pub(crate) fn hold(&self) {
        self.holding.send_replace(true);
    }

    /// Answers the held pushes, and every push from now on at once.
    pub(crate) fn release(&self) {
        self.holding.send_replace(false);
    }

    /// Closes the listener and every connection: the sink is down.
    pub(crate) fn stop(mut self) {
        self.tasks.abort_all();
    }
}

/// Where a connection records its pushes, and whether it holds their answers.
#[derive(Clone)]
struct Recorder {
    pushes: Arc<Mutex<Vec<Push>>>,
    pushed: Arc<Notify>,
    held: watch::Receiver<bool>,
    client_certificate: Option<Vec<u8>>,
}

/// Serves one connection, plain or TLS.
async fn serve(
    stream: impl AsyncRead + AsyncWrite + Unpin + Send + 'static,
    recorder: Recorder,
    script: Script,
    options: SinkOptions,
) {
    let service = service_fn(move |request| {
        answer(
            request,
            recorder.clone(),
            script.clone(),
            options.endless_body,
        )
    });
    let mut builder = auto::Builder::new(TokioExecutor::new());
    if options.http1_only {
        builder = builder.http1_only();
    }
    let _ = builder
        .serve_connection(TokioIo::new(stream), service)
        .await;
}

/// A body of `x`s that never ends, written as fast as the client reads it.
fn endless() -> BoxBody<Bytes, Infallible> {
    static CHUNK: [u8; 16 * 1024] = [b'x'; 16 * 1024];
    let chunks = futures_util::stream::repeat_with(|| Ok(Frame::data(Bytes::from_static(&CHUNK))));
    BodyExt::boxed(StreamBody::new(chunks))
}

async fn answer(
    request: Request<Incoming>,
    recorder: Recorder,
    script: Script,
    endless_body: bool,
) -> Result<Response<BoxBody<Bytes, Infallible>>, hyper::Error> {
    let Recorder {
        pushes,
        pushed,
        mut held,
        client_certificate,
    } = recorder;
    let header = |name: &str| {
        request
            .headers()
            .get(name)
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned)
    };
    let mut push = Push {
        key: header("idempotency-key").unwrap_or_default(),
        delivery_id: header("tickd-delivery-id").unwrap_or_default(),
        attempt: header("tickd-attempt")
            .and_then(|attempt| attempt.parse().ok())
            .unwrap_or_default(),
        namespace: header("tickd-namespace").unwrap_or_default(),
        content_type: header("content-type").unwrap_or_default(),
        authorization: header("authorization"),
        client_certificate,
        version: request.version(),
        webhook: ["webhook-id", "webhook-timestamp", "webhook-signature"].map(header),
        trace: ["traceparent", "tracestate", "baggage"].map(header),
        body: Bytes::new(),
        at: Instant::now(),
    };
    push.body = request.into_body().collect().await?.to_bytes();
    let before = {
        let pushes = pushes.lock().unwrap();
        pushes
            .iter()
            .filter(|earlier| earlier.key == push.key)
            .count()
    };
    let (status, retry_after) = script(&push, before);
    pushes.lock().unwrap().push(push);
    pushed.notify_waiters();
    // Held, the push is recorded but unanswered: tickd has it in flight.
    let _ = held.wait_for(|held| !*held).await;
    let mut response = Response::builder().status(status);
    if let Some(retry_after) = retry_after {
        response = response.header("retry-after", retry_after);
    }
    let body = match endless_body {
        true => endless(),
        false => BodyExt::boxed(Full::new(Bytes::new())),
    };
    Ok(response.body(body).unwrap())
}

/// A loopback address nothing listens on, for a sink that is down until a test starts
/// it there ([`HttpSink::start_on`]).
pub(crate) async fn unused_address() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    listener.local_addr().unwrap()
}

/// The expirations' keys the sink was pushed, each once.
pub(crate) fn keys(pushes: &[Push]) -> std::collections::BTreeSet<String> {
    pushes.iter().map(|push| push.key.clone()).collect()
}

/// The attempts of one expiration (by key) the sink was pushed, in order.
pub(crate) fn attempts_of(pushes: &[Push], key: &str) -> Vec<u32> {
    pushes
        .iter()
        .filter(|push| push.key == key)
        .map(|push| push.attempt)
        .collect()
}

/// How long the pushes of one expiration (by key) waited between each other.
pub(crate) fn gaps(pushes: &[Push], key: &str) -> Vec<Duration> {
    let times: Vec<Instant> = pushes
        .iter()
        .filter(|push| push.key == key)
        .map(|push| push.at)
        .collect();
    times.windows(2).map(|pair| pair[1] - pair[0]).collect()
}
