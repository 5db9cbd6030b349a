//! `tickd-bench e2e --push-listen ADDR`: the measured timers' expirations received as a push
//! sink receives them, instead of over Subscribe streams. tickd runs with
//! `--sink NAMESPACE=http://ADDR/#protobuf` (the namespace given by `--namespace`); this
//! HTTP server answers every push 204, stamping it with the wall clock as it arrives, so
//! lateness is measured as for subscribers: receipt wall time − the deadline.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Response, StatusCode};
use hyper_util::rt::TokioIo;
use prost::Message;
use tickd::proto::Expiration;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::client::wall_nanos;

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
                        let _ = http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), service)
                            .await;
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
