//! Short forms of the gRPC calls the tests make again and again, each panicking with the
//! call's name when it fails, and the small values they take (durations, timer specs,
//! timer references).

use std::net::SocketAddr;
use std::time::Duration;

use tickd::proto::timers_client::TimersClient;
use tickd::proto::*;
use tonic::transport::Channel;

pub fn millis(ms: u64) -> prost_types::Duration {
    let duration = Duration::from_millis(ms);
    prost_types::Duration {
        seconds: duration.as_secs() as i64,
        nanos: duration.subsec_nanos() as i32,
    }
}

pub fn spec(namespace: &str, delay_ms: u64, payload: &[u8]) -> TimerSpec {
    TimerSpec {
        namespace: namespace.into(),
        delay: Some(millis(delay_ms)),
        payload: payload.to_vec().into(),
        ..Default::default()
    }
}

pub fn by_id(namespace: &str, id: &str) -> Option<TimerRef> {
    Some(TimerRef {
        namespace: namespace.into(),
        target: Some(timer_ref::Target::Id(id.into())),
    })
}

pub fn by_key(namespace: &str, key: &str) -> Option<TimerRef> {
    Some(TimerRef {
        namespace: namespace.into(),
        target: Some(timer_ref::Target::Key(key.into())),
    })
}

pub async fn register(client: &mut TimersClient<Channel>, spec: TimerSpec) -> Timer {
    client
        .new_timeout(NewTimeoutRequest { timer: Some(spec) })
        .await
        .expect("register")
        .into_inner()
        .timer
        .expect("timer")
}

/// Opens a sharing subscription with the given ack timeout and window.
pub async fn subscribe(
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

pub async fn next_expiration(stream: &mut tonic::Streaming<SubscribeResponse>) -> Expiration {
    stream
        .message()
        .await
        .expect("stream error")
        .expect("stream ended")
        .expiration
        .expect("expiration")
}

pub async fn ack(
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

pub async fn pending_count(client: &mut TimersClient<Channel>, namespace: &str) -> u64 {
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

pub fn unix_nanos(timestamp: &prost_types::Timestamp) -> i128 {
    i128::from(timestamp.seconds) * 1_000_000_000 + i128::from(timestamp.nanos)
}

pub fn now_unix_nanos() -> i128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i128
}

/// Registers every spec in one NewTimeouts call (one worker command, hence one clock
/// reading: timers with the same delay share a deadline and fire in the same batch).
pub async fn register_all(
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

pub fn specs(namespace: &str, count: usize, delay_ms: u64) -> Vec<TimerSpec> {
    (0..count)
        .map(|index| spec(namespace, delay_ms, format!("payload-{index}").as_bytes()))
        .collect()
}

pub async fn pending_with_dead(
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
pub async fn health(
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
