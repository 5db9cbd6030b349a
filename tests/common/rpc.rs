//! Short forms of the gRPC calls the tests make again and again, each panicking with the
//! call's name when it fails, and the small values they take (durations, timer specs,
//! timer references).

use std::net::SocketAddr;
use std::time::Duration;

use tickd::proto::timers_client::TimersClient;
use tickd::proto::*;
use tonic::transport::Channel;

pub(crate) fn millis(ms: u64) -> prost_types::Duration {
    let duration = Duration::from_millis(ms);
    prost_types::Duration {
        seconds: duration.as_secs() as i64,
        nanos: duration.subsec_nanos() as i32,
    }
}

pub(crate) fn spec(namespace: &str, delay_ms: u64, payload: &[u8]) -> TimerSpec {
    TimerSpec {
        namespace: namespace.into(),
        delay: Some(millis(delay_ms)),
        payload: payload.to_vec().into(),
        ..Default::default()
    }
}

pub(crate) fn by_id(namespace: &str, id: &str) -> Option<TimerRef> {
    Some(TimerRef {
        namespace: namespace.into(),
        target: Some(timer_ref::Target::Id(id.into())),
    })
}

pub(crate) fn by_key(namespace: &str, key: &str) -> Option<TimerRef> {
    Some(TimerRef {
        namespace: namespace.into(),
        target: Some(timer_ref::Target::Key(key.into())),
    })
}

pub(crate) async fn register(client: &mut TimersClient<Channel>, spec: TimerSpec) -> Timer {
    client
        .new_timeout(NewTimeoutRequest { timer: Some(spec) })
        .await
        .expect("register")
        .into_inner()
        .timer
        .expect("timer")
}

/// Opens a sharing subscription with the given ack timeout and window.
pub(crate) async fn subscribe(
    client: &mut TimersClient<Channel>,
    namespace: &str,
    ack_timeout_ms: u64,
    max_unacked: u32,
) -> tonic::Streaming<SubscribeResponse> {
    client
        .subscribe(SubscribeRequest {
            namespace: namespace.into(),
            ack_timeout: (ack_timeout_ms > 0).then(|| millis(ack_timeout_ms)),
            max_unacked,
            ..Default::default()
        })
        .await
        .expect("subscribe")
        .into_inner()
}

pub(crate) async fn next_expiration(
    stream: &mut tonic::Streaming<SubscribeResponse>,
) -> Expiration {
    stream
        .message()
        .await
        .expect("stream error")
        .expect("stream ended")
        .expiration
        .expect("expiration")
}

pub(crate) async fn ack(
    client: &mut TimersClient<Channel>,
    namespace: &str,
    ids: Vec<String>,
) -> AckResponse {
    client
        .ack(AckRequest {
            namespace: namespace.into(),
            delivery_ids: ids,
        })
        .await
        .expect("ack")
        .into_inner()
}

pub(crate) async fn pending_count(client: &mut TimersClient<Channel>, namespace: &str) -> u64 {
    client
        .pending(PendingRequest {
            namespace: namespace.into(),
            ..Default::default()
        })
        .await
        .expect("pending")
        .into_inner()
        .count
}

pub(crate) fn unix_nanos(timestamp: &prost_types::Timestamp) -> i128 {
    i128::from(timestamp.seconds) * 1_000_000_000 + i128::from(timestamp.nanos)
}

pub(crate) fn now_unix_nanos() -> i128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i128
}

/// Registers every spec in one NewTimeouts call (one worker command, hence one clock
/// reading: timers with the same delay share a deadline and fire in the same batch).
pub(crate) async fn register_all(
    client: &mut TimersClient<Channel>,
    specs: Vec<TimerSpec>,
) -> Vec<String> {
    let count = specs.len();
    let results = client
        .new_timeouts(NewTimeoutsRequest { timers: specs })
        .await
        .expect("new_timeouts")
        .into_inner()
        .results;
    assert_eq!(results.len(), count);
    results
        .into_iter()
        .map(|result| match result.result {
            Some(new_timeout_result::Result::Registered(registered)) => {
                registered.timer.expect("timer").id
            }
            other => panic!("registration failed: {other:?}"),
        })
        .collect()
}

pub(crate) fn specs(namespace: &str, count: usize, delay_ms: u64) -> Vec<TimerSpec> {
    (0..count)
        .map(|index| spec(namespace, delay_ms, format!("payload-{index}").as_bytes()))
        .collect()
}

/// Waits until `namespace`'s dead list holds `count` expirations (at most [`PATIENCE`]),
/// and returns the Pending answer that showed it; `report` says what else the failure
/// should show (what a sink received, say).
pub(crate) async fn wait_for_dead<R, RFut>(
    client: &TimersClient<Channel>,
    namespace: &str,
    count: usize,
    report: R,
) -> PendingResponse
where
    R: FnOnce() -> RFut,
    RFut: std::future::Future<Output = String>,
{
    super::wait::eventually(
        &format!("{count} dead in {namespace}"),
        PATIENCE,
        std::time::Duration::from_millis(20),
        || {
            let mut client = client.clone();
            async move {
                let pending = pending_with_dead(&mut client, namespace).await;
                match pending.dead_expirations.len() {
                    dead if dead == count => Ok(()),
                    other => Err(format!("{other} dead")),
                }
            }
        },
        report,
    )
    .await;
    pending_with_dead(&mut client.clone(), namespace).await
}

pub(crate) async fn pending_with_dead(
    client: &mut TimersClient<Channel>,
    namespace: &str,
) -> PendingResponse {
    client
        .pending(PendingRequest {
            namespace: namespace.into(),
            include_dead: true,
            ..Default::default()
        })
        .await
        .expect("pending")
        .into_inner()
}

/// The health of `service` ("" for the whole server), or None if tickd does not answer.
pub(crate) async fn health(
    addr: SocketAddr,
    service: &str,
) -> Option<tonic_health::pb::health_check_response::ServingStatus> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .timeout(Duration::from_secs(5))
        .connect()
        .await
        .ok()?;
    let request = tonic_health::pb::HealthCheckRequest {
        service: service.into(),
    };
    let answer = tonic_health::pb::health_client::HealthClient::new(channel)
        .check(request)
        .await
        .ok()?;
    Some(answer.into_inner().status())
}

/// How long a test waits for one answer: a safety net so that a bug fails the test instead
/// of hanging it, never a synchronisation.
pub(crate) const PATIENCE: Duration = Duration::from_secs(30);

/// `future`, or a test failure if it does not finish within [`PATIENCE`].
pub(crate) async fn within<T>(future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(PATIENCE, future)
        .await
        .expect("no answer in time")
}

/// Whether tickd answers a call (a Pending of `namespace`); the refusal's text otherwise.
/// A replica serves before it has joined its cluster, and calls wait for that.
pub(crate) async fn answers_calls(
    mut client: TimersClient<Channel>,
    namespace: &str,
) -> Result<(), String> {
    let request = PendingRequest {
        namespace: namespace.into(),
        ..Default::default()
    };
    client
        .pending(request)
        .await
        .map(drop)
        .map_err(|status| status.to_string())
}

/// Cancels `timer`; true if it was pending.
pub(crate) async fn cancel(client: &mut TimersClient<Channel>, timer: Option<TimerRef>) -> bool {
    client
        .cancel(CancelRequest { timer })
        .await
        .expect("cancel")
        .into_inner()
        .cancelled
}

/// The stored timer (with its payload), or the refusal.
pub(crate) async fn get(
    client: &mut TimersClient<Channel>,
    timer: Option<TimerRef>,
) -> Result<Timer, tonic::Status> {
    client
        .get(GetRequest { timer })
        .await
        .map(|response| response.into_inner().timer.expect("timer"))
}

/// One page of the pending timers of `namespace` ("" for all).
pub(crate) async fn pending_page(
    client: &mut TimersClient<Channel>,
    namespace: &str,
    page_size: u32,
    page_token: &str,
) -> Result<PendingResponse, tonic::Status> {
    client
        .pending(PendingRequest {
            namespace: namespace.into(),
            page_size,
            page_token: page_token.into(),
            ..Default::default()
        })
        .await
        .map(tonic::Response::into_inner)
}

/// Every pending timer of `namespace` ("" for all), paging through the listing, by id.
pub(crate) async fn list_pending(
    client: &mut TimersClient<Channel>,
    namespace: &str,
) -> std::collections::BTreeMap<String, Timer> {
    let mut timers = std::collections::BTreeMap::new();
    let mut page_token = String::new();
    loop {
        let page = pending_page(client, namespace, 1_000, &page_token)
            .await
            .expect("pending");
        for timer in page.timers {
            timers.insert(timer.id.clone(), timer);
        }
        if page.next_page_token.is_empty() {
            return timers;
        }
        page_token = page.next_page_token;
    }
}

/// The id of the timer an expiration carries.
pub(crate) fn timer_id(expiration: &Expiration) -> String {
    expiration
        .timer
        .as_ref()
        .expect("expiration timer")
        .id
        .clone()
}

/// The health of `service` ("" for the whole server) as the server behind `channel` tells.
pub(crate) async fn check_health(
    channel: Channel,
    service: &str,
) -> Result<tonic_health::pb::health_check_response::ServingStatus, tonic::Status> {
    let request = tonic_health::pb::HealthCheckRequest {
        service: service.into(),
    };
    tonic_health::pb::health_client::HealthClient::new(channel)
        .check(request)
        .await
        .map(|answer| answer.into_inner().status())
}

/// A channel over the Unix socket at `path` (the URI is not used).
pub(crate) async fn unix_channel(
    path: std::path::PathBuf,
) -> Result<Channel, tonic::transport::Error> {
    tonic::transport::Endpoint::from_static("http://unix.socket")
        .connect_with_connector(tower::service_fn(move |_| {
            let path = path.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(path).await?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
            }
        }))
        .await
}
