//! `tickd-bench e2e --push-listen ADDR`: the measured timers' expirations received as a push
//! sink receives them, instead of over Subscribe streams (or, with `--push-from URL`, read
//! back from the NATS subject or Redis stream tickd pushes them to). tickd runs with
//! `--sink NAMESPACE=http://ADDR/#protobuf` (the namespace given by `--namespace`, and
//! `#protobuf,h2c` for HTTP/2); this HTTP server answers every push 204, stamping it with the wall clock as it arrives, so
//! lateness is measured as for subscribers: receipt wall time − the deadline.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper::{Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use prost::Message;
use tickd::proto::Expiration;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::client::wall_nanos;

/// Streams at once on one HTTP/2 connection: beyond any `--sink-max-in-flight` benchmarked.
const MAX_STREAMS: u32 = 100_000;

/// A timer's id and when its push arrived (wall clock, nanoseconds).
pub(crate) type Receipt = (String, i64);

/// Listens on `listen` and records every push until `stopped` says true; the task's answer
/// is what a subscriber's is: the receipts and the errors (pushes it could not decode).
pub(crate) async fn receive(
    listen: SocketAddr,
    received: Arc<AtomicU64>,
    mut stopped: watch::Receiver<bool>,
) -> Result<tokio::task::JoinHandle<(Vec<Receipt>, u64)>, String> {
    let listener = TcpListener::bind(listen)
        .await
        .map_err(|error| format!("listening for pushes on {listen}: {error}"))?;
    let receipts = Arc::new(Mutex::new(Vec::new()));
    let errors = Arc::new(AtomicU64::new(0));
    let mut connections = 0_u64;
    Ok(tokio::spawn(async move {
        loop {
            tokio::select! {
                accepted = listener.accept() => {
                    let Ok((stream, _)) = accepted else { continue };
                    connections += 1;
                    let _ = stream.set_nodelay(true);
                    let (receipts, errors, received) = (receipts.clone(), errors.clone(), received.clone());
                    let service = service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                        let (receipts, errors, received) = (receipts.clone(), errors.clone(), received.clone());
                        async move {
                            let at = wall_nanos();
                            let body = request.into_body().collect().await?.to_bytes();
                            match Expiration::decode(body) {
                                Ok(expiration) => {
                                    let id = expiration.timer.map(|timer| timer.id).unwrap_or_default();
                                    receipts.lock().expect("receipts").push((id, at));
                                    received.fetch_add(1, Ordering::Relaxed);
                                }
                                Err(_) => {
                                    errors.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                            let mut answer = Response::new(Full::new(Bytes::new()));
                            *answer.status_mut() = StatusCode::NO_CONTENT;
                            Ok::<_, hyper::Error>(answer)
                        }
                    });
                    tokio::spawn(async move {
                        // HTTP/1.1, or HTTP/2 from the first byte (`#h2c`), with room
                        // for any window's streams.
                        let mut server = auto::Builder::new(TokioExecutor::new());
                        server.http2().max_concurrent_streams(MAX_STREAMS);
                        let _ = server.serve_connection(TokioIo::new(stream), service).await;
                    });
                }
                _ = stopped.wait_for(|stop| *stop) => break,
            }
        }
        // Kept-alive connections: about the window's worth, however many pushes.
        eprintln!("# push connections accepted: {connections}");
        let receipts = std::mem::take(&mut *receipts.lock().expect("receipts"));
        (receipts, errors.load(Ordering::Relaxed))
    }))
}

/// Receives the expirations tickd pushes to a broker sink, read back from the broker:
/// `nats://HOST:PORT/SUBJECT` (a core subscription on the subject, which sees each publish
/// as the stream stores it; the stream is created here if missing) or
/// `redis://HOST:PORT/STREAM` (`XREAD BLOCK` from the stream's start). tickd runs with the
/// same URL and `#protobuf`. Each receipt is stamped as the bench reads it, so lateness
/// includes the broker's hop back to a consumer, as a real consumer would see it.
pub(crate) async fn receive_from_broker(
    url: &str,
    received: Arc<AtomicU64>,
    stopped: watch::Receiver<bool>,
) -> Result<tokio::task::JoinHandle<(Vec<Receipt>, u64)>, String> {
    let (server, name) = url
        .rsplit_once('/')
        .filter(|(server, name)| server.contains("://") && !name.is_empty())
        .ok_or_else(|| format!("{url}: give SCHEME://HOST:PORT/NAME"))?;
    let record = Recorder {
        receipts: Vec::new(),
        errors: 0,
        received,
    };
    if url.starts_with("nats://") {
        receive_from_nats(server, name, record, stopped).await
    } else if url.starts_with("redis://") {
        receive_from_redis(server, name, record, stopped).await
    } else {
        Err(format!("{url}: a broker is nats:// or redis://"))
    }
}

/// The receipts of one broker consumer.
struct Recorder {
    receipts: Vec<Receipt>,
    errors: u64,
    received: Arc<AtomicU64>,
}

impl Recorder {
    fn record(&mut self, body: &[u8], at: i64) {
        match Expiration::decode(body) {
            Ok(expiration) => {
                let id = expiration.timer.map(|timer| timer.id).unwrap_or_default();
                self.receipts.push((id, at));
                self.received.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => self.errors += 1,
        }
    }
}

async fn receive_from_nats(
    server: &str,
    subject: &str,
    mut record: Recorder,
    mut stopped: watch::Receiver<bool>,
) -> Result<tokio::task::JoinHandle<(Vec<Receipt>, u64)>, String> {
    use tokio_stream::StreamExt;
    let client = async_nats::connect(server)
        .await
        .map_err(|error| format!("connecting to {server}: {error}"))?;
    let mut messages = client
        .subscribe(subject.to_owned())
        .await
        .map_err(|error| format!("subscribing to {subject}: {error}"))?;
    async_nats::jetstream::new(client.clone())
        .get_or_create_stream(async_nats::jetstream::stream::Config {
            name: "TICKD_BENCH".into(),
            subjects: vec![subject.to_owned()],
            ..Default::default()
        })
        .await
        .map_err(|error| format!("creating a stream for {subject}: {error}"))?;
    Ok(tokio::spawn(async move {
        loop {
            tokio::select! {
                message = messages.next() => match message {
                    Some(message) => record.record(&message.payload, wall_nanos()),
                    None => break,
                },
                _ = stopped.wait_for(|stop| *stop) => break,
            }
        }
        drop(client);
        (record.receipts, record.errors)
    }))
}

async fn receive_from_redis(
    server: &str,
    stream: &str,
    mut record: Recorder,
    stopped: watch::Receiver<bool>,
) -> Result<tokio::task::JoinHandle<(Vec<Receipt>, u64)>, String> {
    let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
    let mut connection = redis::Client::open(server)
        .map_err(|error| format!("{server}: {error}"))?
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .map_err(|error| format!("connecting to {server}: {error}"))?;
    let stream = stream.to_owned();
    type Read = Option<Vec<(String, Vec<(String, Vec<Vec<u8>>)>)>>;
    Ok(tokio::spawn(async move {
        let mut last = "0".to_owned();
        while !*stopped.borrow() {
            let read: Result<Read, _> = redis::cmd("XREAD")
                .arg("COUNT")
                .arg(1_000)
                .arg("BLOCK")
                .arg(100)
                .arg("STREAMS")
                .arg(&stream)
                .arg(&last)
                .query_async(&mut connection)
                .await;
            let Ok(read) = read else {
                record.errors += 1;
                break;
            };
            let at = wall_nanos();
            for (_, entries) in read.unwrap_or_default() {
                for (id, fields) in entries {
                    // Fields and values alternate; the expiration is the `expiration` field.
                    let body = fields
                        .chunks(2)
                        .find(|pair| pair[0] == b"expiration")
                        .map(|pair| pair[1].as_slice())
                        .unwrap_or_default();
                    record.record(body, at);
                    last = id;
                }
            }
        }
        (record.receipts, record.errors)
    }))
}
