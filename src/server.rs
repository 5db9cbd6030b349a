//! Wires the pieces together and serves them: [`run`] is the whole daemon, given its
//! listeners and a future that resolves when it should stop.

use std::future::Future;

use tokio::net::{TcpListener, UnixListener};
use tokio::sync::watch;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::transport::server::TcpIncoming;
use tonic::transport::Server;
use tracing::{info, warn};

use crate::api::convert::Limits;
use crate::api::TimersService;
use crate::config::Config;
use crate::delivery::DeliveryHandle;
use crate::proto;
use crate::proto::timers_server::TimersServer;
use crate::worker::clock::{Clock, SystemClock};
use crate::worker::table::TimerTable;
use crate::worker::Worker;

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("starting the timer worker thread: {0}")]
    Worker(#[source] std::io::Error),
    #[error("building the reflection service: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    #[error("serving gRPC: {0}")]
    Transport(#[from] tonic::transport::Error),
}

/// What [`run`] leaves behind once stopped.
#[derive(Debug)]
pub struct Stopped {
    /// Timers still pending at shutdown (with no data directory, these are lost).
    pub pending_timers: usize,
    /// True if open calls had to be cut off at the drain timeout.
    pub drain_timed_out: bool,
}

/// Serves tickd on `listener` (and `unix_listener`, if given) until `shutdown` resolves,
/// then drains: reports NOT_SERVING, ends subscription and heartbeat streams, and waits
/// at most `config.drain_timeout` for calls in progress.
pub async fn run(
    config: &Config,
    listener: TcpListener,
    unix_listener: Option<UnixListener>,
    shutdown: impl Future<Output = ()>,
) -> Result<Stopped, ServerError> {
    let delivery = DeliveryHandle::spawn(config.delivery());
    let worker = Worker::spawn(
        TimerTable::new(config.table()),
        SystemClock::new(),
        config.worker(),
        delivery.fired_sink(),
    )
    .map_err(ServerError::Worker)?;

    let (stopping, stop_signal) = watch::channel(false);
    let limits = Limits {
        max_payload_bytes: config.max_payload_bytes,
        max_batch: config.max_batch,
        ..Limits::default()
    };
    let timers = TimersServer::new(TimersService::new(
        worker.handle(),
        delivery.clone(),
        limits,
        stop_signal.clone(),
    ))
    .max_decoding_message_size(max_message_bytes(config));
    let (health_reporter, health) = tonic_health::server::health_reporter();
    health_reporter
        .set_serving::<TimersServer<TimersService>>()
        .await;
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()?;

    let router = Server::builder()
        .add_service(health)
        .add_service(reflection)
        .add_service(timers);
    let tcp = router.clone().serve_with_incoming_shutdown(
        // Without TCP_NODELAY small answers wait for Nagle's algorithm (tens of ms).
        TcpIncoming::from(listener).with_nodelay(Some(true)),
        stopped(stop_signal.clone()),
    );
    let unix = async {
        match unix_listener {
            Some(unix_listener) => {
                router
                    .serve_with_incoming_shutdown(
                        UnixListenerStream::new(unix_listener),
                        stopped(stop_signal.clone()),
                    )
                    .await
            }
            None => Ok(()),
        }
    };
    let serving = async { tokio::try_join!(tcp, unix).map(|_| ()) };
    tokio::pin!(serving);

    tokio::select! {
        result = &mut serving => result?,
        () = shutdown => {
            info!("shutdown requested: draining");
            health_reporter.set_not_serving::<TimersServer<TimersService>>().await;
            let _ = stopping.send(true);
            delivery.shutdown();
        }
    }
    let drain_timed_out = match tokio::time::timeout(config.drain_timeout, &mut serving).await {
        Ok(result) => {
            result?;
            false
        }
        Err(_) => {
            warn!(drain_timeout = ?config.drain_timeout, "drain timed out: closing open calls");
            true
        }
    };
    let clock = SystemClock::new();
    let pending_timers = worker.stop().into_pending(clock.now()).len();
    info!(pending_timers, "tickd stopped");
    Ok(Stopped {
        pending_timers,
        drain_timed_out,
    })
}

async fn stopped(mut stop_signal: watch::Receiver<bool>) {
    let _ = stop_signal.wait_for(|stopping| *stopping).await;
}

/// A whole batch of maximal payloads must fit in one message, with room for the framing.
fn max_message_bytes(config: &Config) -> usize {
    let largest_batch = config
        .max_batch
        .saturating_mul(config.max_payload_bytes + 1_024);
    largest_batch.clamp(4 * 1024 * 1024, 256 * 1024 * 1024)
}
