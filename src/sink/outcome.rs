//! What became of one push, read from the sink's answer: the whole contract between tickd
//! and an HTTP sink is which answers acknowledge, which ask again later, and which refuse.

use std::time::{Duration, SystemTime};

use hyper::header::{HeaderMap, RETRY_AFTER};
use hyper::StatusCode;

use super::circuit::backoff;

/// The most a sink's `Retry-After` holds a delivery back: an answer cannot park an
/// expiration for days.
pub(crate) const MAX_RETRY_AFTER: Duration = Duration::from_secs(300);

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PushOutcome {
    /// 2xx: the sink has it; the delivery is acknowledged.
    Delivered,
    /// The sink was reached and wants it again later: 408, 429, 5xx, or no answer within
    /// the push timeout. The attempt counts; `after` is its `Retry-After`, if it gave one.
    Retry { after: Option<Duration> },
    /// The sink says it is sent too much: 429, a 503 with `Retry-After`, gRPC
    /// RESOURCE_EXHAUSTED or UNAVAILABLE with `retry-after`. Not this expiration's fault:
    /// no attempt is counted; the whole sink slows down (see [`super::pace`]) and the push
    /// goes again once the sink's pace lets it.
    SlowDown { after: Option<Duration> },
    /// Any other answer (4xx, 3xx, 1xx): the sink refuses this expiration. The attempt
    /// counts and it is retried with back-off until out of attempts, then dead; the sink
    /// itself is up, so this never opens its circuit.
    Rejected { status: u16 },
    /// The push never reached the sink (refused connection, a name that does not resolve
    /// or resolves outside `--sink-allow`): no attempt is counted, the push waits and goes
    /// again.
    Unreachable { reason: String },
}

/// What a pusher does with a push once the sink answered (or did not): the rule the
/// pusher follows, and the simulation with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Settlement {
    /// The sink answered, whatever it said: the circuit closes. Otherwise it failed.
    pub(crate) sink_answered: bool,
    pub(crate) then: Then,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Then {
    /// Acknowledge it.
    Ack,
    /// Hand it back ([`crate::domain::Hold::Released`]), to come again after `after` as
    /// the next attempt.
    RetryLater { after: Duration },
    /// Push it again, as the same attempt, when the sink's pace lets it.
    PushAgain,
    /// Keep it (its claim extended) and push it again after `wait`, as the same attempt.
    Hold { wait: Duration },
}

impl PushOutcome {
    /// The settlement of a push of `attempt` (delivery `delivery_id`, whose pushes met an
    /// unreachable sink `unreached` times before this one).
    pub(crate) fn settlement(&self, attempt: u32, delivery_id: u64, unreached: u32) -> Settlement {
        let (sink_answered, then) = match self {
            Self::Delivered => (true, Then::Ack),
            Self::Rejected { .. } => (
                true,
                Then::RetryLater {
                    after: backoff(attempt, delivery_id),
                },
            ),
            Self::Retry { after } => {
                // The sink's `Retry-After` may ask for longer than the back-off, never for
                // less: a `Retry-After: 0` must not burn attempts back to back.
                let floor = backoff(attempt, delivery_id);
                (
                    false,
                    Then::RetryLater {
                        after: after.map_or(floor, |after| after.max(floor)),
                    },
                )
            }
            // The sink is up and overloaded: the whole sink slows down, and this push goes
            // again when the pace lets it, as the same attempt.
            Self::SlowDown { .. } => (true, Then::PushAgain),
            Self::Unreachable { .. } => (
                false,
                Then::Hold {
                    wait: backoff(unreached + 1, delivery_id),
                },
            ),
        };
        let then = match then {
            // Planted: a failed expiration is kept and pushed again before any other,
            // holding its place in the window through its back-off.
            Then::RetryLater { after } if crate::faults::planted("head-of-line") => {
                Then::Hold { wait: after }
            }
            then => then,
        };
        Settlement {
            sink_answered,
            then,
        }
    }

    /// The answer's outcome: its status, and its `Retry-After` (seconds, or an HTTP date).
    pub(crate) fn of_answer(status: StatusCode, headers: &HeaderMap) -> Self {
        if status.is_success() {
            return Self::Delivered;
        }
        let asks_again = status == StatusCode::REQUEST_TIMEOUT
            || status == StatusCode::TOO_MANY_REQUESTS
            || status.is_server_error();
        if asks_again {
            let after = retry_after(headers, SystemTime::now());
            let overloaded = status == StatusCode::TOO_MANY_REQUESTS
                || (status == StatusCode::SERVICE_UNAVAILABLE && after.is_some());
            if overloaded {
                Self::SlowDown { after }
            } else {
                Self::Retry { after }
            }
        } else {
            Self::Rejected {
                status: status.as_u16(),
            }
        }
    }

    /// What a push that did not deliver met, for people (`SinkStatus`); None if delivered.
    pub(crate) fn failure(&self) -> Option<String> {
        match self {
            Self::Delivered => None,
            Self::Retry { after: Some(after) } => Some(format!(
                "the sink asked to be sent it again after {after:?} (408, 429 or 5xx)"
            )),
            Self::Retry { after: None } => Some(
                "the sink asked to be sent it again (408, 429 or 5xx), or did not answer in time"
                    .to_owned(),
            ),
            Self::SlowDown { after } => Some(format!(
                "the sink asked to be sent less (429, or 503 with Retry-After{}): the sink slows down",
                after.map(|after| format!(" {after:?}")).unwrap_or_default()
            )),
            Self::Rejected { status } => Some(format!("the sink rejected it with HTTP {status}")),
            Self::Unreachable { reason } => Some(format!("the sink was unreachable: {reason}")),
        }
    }

    /// The metric label of this outcome (`tickd_sink_pushes{outcome}`).
    pub(crate) fn label(&self) -> &'static str {
        match self {
            Self::Delivered => "delivered",
            Self::Retry { .. } => "retry",
            Self::SlowDown { .. } => "slowed",
            Self::Rejected { .. } => "rejected",
            Self::Unreachable { .. } => "unreachable",
        }
    }
}

/// `Retry-After` as a wait from `now`: delta-seconds or an HTTP date, at most
/// [`MAX_RETRY_AFTER`]. None if absent or unreadable (the back-off applies instead).
pub(crate) fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    let wait = match value.parse::<u64>() {
        Ok(seconds) => Duration::from_secs(seconds),
        Err(_) => httpdate::parse_http_date(value)
            .ok()?
            .duration_since(now)
            .unwrap_or(Duration::ZERO),
    };
    Some(wait.min(MAX_RETRY_AFTER))
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::HeaderValue;

    fn answer(status: u16, retry_after: Option<&str>) -> PushOutcome {
        let mut headers = HeaderMap::new();
        if let Some(value) = retry_after {
            headers.insert(RETRY_AFTER, HeaderValue::from_str(value).unwrap());
        }
        PushOutcome::of_answer(StatusCode::from_u16(status).unwrap(), &headers)
    }

    #[test]
    fn success_acknowledges_and_busy_or_broken_sinks_are_asked_again() {
        for status in [200, 201, 202, 204] {
            assert_eq!(answer(status, None), PushOutcome::Delivered);
        }
        for status in [408, 500, 502, 503, 504] {
            assert_eq!(answer(status, None), PushOutcome::Retry { after: None });
        }
        assert_eq!(answer(429, None), PushOutcome::SlowDown { after: None });
        for status in [301, 400, 401, 403, 404, 410, 422] {
            assert_eq!(answer(status, None), PushOutcome::Rejected { status });
        }
    }

    #[test]
    fn retry_after_is_honoured_in_seconds_or_as_a_date_within_a_bound() {
        assert_eq!(
            answer(429, Some("1")),
            PushOutcome::SlowDown {
                after: Some(Duration::from_secs(1))
            }
        );
        assert_eq!(
            answer(503, Some("86400")),
            PushOutcome::SlowDown {
                after: Some(MAX_RETRY_AFTER)
            }
        );
        assert_eq!(
            answer(503, Some("soon")),
            PushOutcome::Retry { after: None }
        );
        assert_eq!(
            answer(500, Some("1")),
            PushOutcome::Retry {
                after: Some(Duration::from_secs(1))
            },
            "only 429 and 503 speak of load"
        );
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_445_412_480);
        let mut headers = HeaderMap::new();
        headers.insert(
            RETRY_AFTER,
            HeaderValue::from_static("Wed, 21 Oct 2015 07:28:30 GMT"),
        );
        assert_eq!(retry_after(&headers, now), Some(Duration::from_secs(30)));
        // A date already past: at once.
        let later = now + Duration::from_secs(3_600);
        assert_eq!(retry_after(&headers, later), Some(Duration::ZERO));
    }
}
