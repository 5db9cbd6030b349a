//! How tickctl shows timers and expirations: `key=value` text lines and tables, or JSON
//! (field names as in the proto; timestamps RFC 3339; durations like "1.5s"; payloads both as
//! text, when they are UTF-8, and as base64).

use std::io::{self, Write};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use tickd::proto::{Expiration, Timer};

/// Writes one line to stdout. A closed pipe (`tickctl watch | head -1`) ends tickctl quietly.
pub fn line(text: impl std::fmt::Display) {
    let mut stdout = io::stdout().lock();
    if let Err(error) = writeln!(stdout, "{text}").and_then(|()| stdout.flush()) {
        if error.kind() == io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("tickctl: writing to stdout: {error}");
        std::process::exit(1);
    }
}

pub fn json_line(value: &Value) {
    line(value);
}

pub fn json_pretty(value: &Value) {
    line(serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string()));
}

pub fn system_time(timestamp: Option<&prost_types::Timestamp>) -> Option<SystemTime> {
    let timestamp = timestamp?;
    let nanos = u32::try_from(timestamp.nanos).ok()?;
    let seconds = u64::try_from(timestamp.seconds).ok()?;
    UNIX_EPOCH.checked_add(Duration::new(seconds, nanos))
}

pub fn timestamp(timestamp: Option<&prost_types::Timestamp>) -> String {
    match system_time(timestamp) {
        Some(time) => humantime::format_rfc3339_millis(time).to_string(),
        None => "-".to_owned(),
    }
}

pub fn std_duration(duration: Option<&prost_types::Duration>) -> Option<Duration> {
    let duration = duration?;
    Some(Duration::new(
        u64::try_from(duration.seconds).ok()?,
        u32::try_from(duration.nanos).ok()?,
    ))
}

/// Humane, to the millisecond: `29s 998ms`; `-` when absent.
pub fn duration(duration: Option<&prost_types::Duration>) -> String {
    match std_duration(duration) {
        Some(value) if value.is_zero() => "0s".to_owned(),
        Some(value) => {
            let millis = Duration::from_millis(value.as_millis() as u64);
            if millis.is_zero() {
                format!("{}ns", value.as_nanos())
            } else {
                humantime::format_duration(millis).to_string()
            }
        }
        None => "-".to_owned(),
    }
}

/// The proto3 JSON form of a duration: `"1.500s"`; null when absent.
fn json_duration(duration: Option<&prost_types::Duration>) -> Value {
    match std_duration(duration) {
        Some(value) => {
            let nanos = value.subsec_nanos();
            if nanos == 0 {
                json!(format!("{}s", value.as_secs()))
            } else {
                let fraction = format!("{nanos:09}");
                json!(format!(
                    "{}.{}s",
                    value.as_secs(),
                    fraction.trim_end_matches('0')
                ))
            }
        }
        None => Value::Null,
    }
}

fn json_timestamp(value: Option<&prost_types::Timestamp>) -> Value {
    match system_time(value) {
        Some(time) => json!(humantime::format_rfc3339_nanos(time).to_string()),
        None => Value::Null,
    }
}

/// A payload for a text line: quoted and escaped when UTF-8, else `0x` and hex.
pub fn payload(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(text) => format!("{text:?}"),
        Err(_) => {
            let mut hex = String::with_capacity(2 + bytes.len() * 2);
            hex.push_str("0x");
            for byte in bytes {
                hex.push_str(&format!("{byte:02x}"));
            }
            hex
        }
    }
}

pub fn timer_json(timer: &Timer) -> Value {
    json!({
        "id": timer.id,
        "namespace": timer.namespace,
        "key": timer.key,
        "deadline": json_timestamp(timer.deadline.as_ref()),
        "remaining": json_duration(timer.remaining.as_ref()),
        "repeat": json_duration(timer.repeat.as_ref()),
        "ttl": json_duration(timer.ttl.as_ref()),
        "fired_count": timer.fired_count,
        "payload": std::str::from_utf8(&timer.payload).ok(),
        "payload_base64": base64(&timer.payload),
    })
}

pub fn expiration_json(expiration: &Expiration) -> Value {
    json!({
        "delivery_id": expiration.delivery_id,
        "timer": expiration.timer.as_ref().map(timer_json),
        "fired_at": json_timestamp(expiration.fired_at.as_ref()),
        "attempt": expiration.attempt,
        "late": expiration.late,
        "lease": expiration.lease,
    })
}

/// `fired id=.. namespace=.. key=.. attempt=1 fired_at=.. [late] [lease] delivery=.. payload=".."`
pub fn expiration_line(expiration: &Expiration) -> String {
    let default = Timer::default();
    let timer = expiration.timer.as_ref().unwrap_or(&default);
    let mut text = format!(
        "fired id={} namespace={} key={} attempt={} fired_at={}",
        timer.id,
        or_dash(&timer.namespace),
        or_dash(&timer.key),
        expiration.attempt,
        timestamp(expiration.fired_at.as_ref()),
    );
    if expiration.late {
        text.push_str(" late");
    }
    if expiration.lease {
        text.push_str(" lease");
    }
    text.push_str(&format!(
        " delivery={} payload={}",
        expiration.delivery_id,
        payload(&timer.payload)
    ));
    text
}

/// `key: value` lines, for `get` and `touch`.
pub fn timer_details(timer: &Timer) -> String {
    let rows = [
        ("id", timer.id.clone()),
        ("namespace", or_dash(&timer.namespace).to_owned()),
        ("key", or_dash(&timer.key).to_owned()),
        ("deadline", timestamp(timer.deadline.as_ref())),
        ("remaining", duration(timer.remaining.as_ref())),
        ("repeat", duration(timer.repeat.as_ref())),
        ("ttl", duration(timer.ttl.as_ref())),
        ("fired_count", timer.fired_count.to_string()),
        ("payload", payload(&timer.payload)),
    ];
    rows.iter()
        .map(|(name, value)| format!("{name}: {value}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A left-aligned table with a header row.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|name| name.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let render = |cells: Vec<&str>| {
        let mut text = String::new();
        for (index, (cell, width)) in cells.iter().zip(&widths).enumerate() {
            if index + 1 == cells.len() {
                text.push_str(cell);
            } else {
                text.push_str(&format!("{cell:<width$}  "));
            }
        }
        text
    };
    let mut lines = vec![render(header.to_vec())];
    for row in rows {
        lines.push(render(row.iter().map(String::as_str).collect()));
    }
    lines.join("\n")
}

pub fn timer_row(timer: &Timer) -> Vec<String> {
    vec![
        timer.id.clone(),
        or_dash(&timer.namespace).to_owned(),
        or_dash(&timer.key).to_owned(),
        timestamp(timer.deadline.as_ref()),
        duration(timer.remaining.as_ref()),
        duration(timer.repeat.as_ref()),
        duration(timer.ttl.as_ref()),
        payload(&timer.payload),
    ]
}

pub const TIMER_HEADER: [&str; 8] = [
    "ID",
    "NAMESPACE",
    "KEY",
    "DEADLINE",
    "REMAINING",
    "REPEAT",
    "TTL",
    "PAYLOAD",
];

fn or_dash(text: &str) -> &str {
    if text.is_empty() {
        "-"
    } else {
        text
    }
}

/// Standard base64 with padding.
pub fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut text = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (index, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if index <= chunk.len() {
                text.push(ALPHABET[((n >> shift) & 63) as usize] as char);
            } else {
                text.push('=');
            }
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc4648() {
        for (input, expected) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(input.as_bytes()), expected);
        }
    }

    #[test]
    fn durations_in_json_follow_proto3() {
        let d = |seconds, nanos| prost_types::Duration { seconds, nanos };
        assert_eq!(json_duration(Some(&d(1, 500_000_000))), json!("1.5s"));
        assert_eq!(json_duration(Some(&d(30, 0))), json!("30s"));
        assert_eq!(json_duration(None), Value::Null);
    }
}
