//! How tickctl shows timers and expirations: `key=value` text lines and tables, or the
//! answers in proto3 JSON (see [`crate::proto_json`]), pretty or one object per line.

use std::io::{self, Write};
use std::time::Duration;

use crate::proto_json::{to_json_text, ProtoMessage};
use crate::proto_time::{from_proto_duration, from_proto_timestamp};
use tickd::proto::{Expiration, Timer};

/// Writes one line to stdout. A closed pipe (`tickctl watch | head -1`) ends tickctl quietly.
pub(crate) fn print_line(text: impl std::fmt::Display) {
    let mut stdout = io::stdout().lock();
    let written = writeln!(stdout, "{text}").and_then(|()| stdout.flush());
    stop_unless_written(written);
}

/// Writes bytes as they are (a generated script or manual page), like [`print_line`].
pub(crate) fn print_bytes(bytes: &[u8]) {
    let mut stdout = io::stdout().lock();
    let written = stdout.write_all(bytes).and_then(|()| stdout.flush());
    stop_unless_written(written);
}

/// A closed pipe ends tickctl quietly (exit 0); any other write error with exit 1.
fn stop_unless_written(written: io::Result<()>) {
    if let Err(error) = written {
        if error.kind() == io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("tickctl: writing to stdout: {error}");
        std::process::exit(1);
    }
}

/// One message in proto3 JSON on one line: what streams print, so that every line parses on
/// its own.
pub(crate) fn print_message_line<M: ProtoMessage>(message: &M) {
    print_line(to_json_text(message, false));
}

/// One message in proto3 JSON, indented as grpcurl prints an answer.
pub(crate) fn print_message<M: ProtoMessage>(message: &M) {
    print_line(to_json_text(message, true));
}

pub(crate) fn timestamp_text(timestamp: Option<&prost_types::Timestamp>) -> String {
    match from_proto_timestamp(timestamp) {
        Some(time) => humantime::format_rfc3339_millis(time).to_string(),
        None => "-".to_owned(),
    }
}

/// Humane, to the millisecond: `29s 998ms`; `-` when absent.
fn duration_text(duration: Option<&prost_types::Duration>) -> String {
    match from_proto_duration(duration) {
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

/// A payload for a text line: quoted and escaped when UTF-8, else `0x` and hex.
fn payload_text(bytes: &[u8]) -> String {
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

/// `fired id=.. namespace=.. key=.. attempt=1 fired_at=.. [late] [lease] delivery=.. payload=".."`
pub(crate) fn expiration_line(expiration: &Expiration) -> String {
    let default = Timer::default();
    let timer = expiration.timer.as_ref().unwrap_or(&default);
    let mut text = format!(
        "fired id={} namespace={} key={} attempt={} fired_at={}",
        timer.id,
        or_dash(&timer.namespace),
        or_dash(&timer.key),
        expiration.attempt,
        timestamp_text(expiration.fired_at.as_ref()),
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
        payload_text(&timer.payload)
    ));
    text
}

/// `key: value` lines, for `get` and `touch`.
pub(crate) fn timer_details(timer: &Timer) -> String {
    let rows = [
        ("id", timer.id.clone()),
        ("namespace", or_dash(&timer.namespace).to_owned()),
        ("key", or_dash(&timer.key).to_owned()),
        ("deadline", timestamp_text(timer.deadline.as_ref())),
        ("remaining", duration_text(timer.remaining.as_ref())),
        ("repeat", duration_text(timer.repeat.as_ref())),
        ("ttl", duration_text(timer.ttl.as_ref())),
        ("fired_count", timer.fired_count.to_string()),
        ("cron", or_dash(&timer.cron).to_owned()),
        ("time_zone", or_dash(&timer.time_zone).to_owned()),
        ("payload", payload_text(&timer.payload)),
    ];
    rows.iter()
        .map(|(name, value)| format!("{name}: {value}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A left-aligned table with a header row.
pub(crate) fn table(header: &[&str], rows: &[Vec<String>]) -> String {
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

pub(crate) fn timer_row(timer: &Timer) -> Vec<String> {
    vec![
        timer.id.clone(),
        or_dash(&timer.namespace).to_owned(),
        or_dash(&timer.key).to_owned(),
        timestamp_text(timer.deadline.as_ref()),
        duration_text(timer.remaining.as_ref()),
        duration_text(timer.repeat.as_ref()),
        duration_text(timer.ttl.as_ref()),
        schedule_text(timer),
        payload_text(&timer.payload),
    ]
}

pub(crate) const TIMER_HEADER: [&str; 9] = [
    "ID",
    "NAMESPACE",
    "KEY",
    "DEADLINE",
    "REMAINING",
    "REPEAT",
    "TTL",
    "CRON",
    "PAYLOAD",
];

/// The columns of `pending --dead`: expirations whose deliveries ran out of attempts.
pub(crate) const DEAD_EXPIRATION_HEADER: [&str; 6] =
    ["DELIVERY", "ID", "KEY", "FIRED_AT", "ATTEMPTS", "PAYLOAD"];

pub(crate) fn dead_expiration_row(dead: &Expiration) -> Vec<String> {
    let default = Timer::default();
    let timer = dead.timer.as_ref().unwrap_or(&default);
    vec![
        dead.delivery_id.clone(),
        timer.id.clone(),
        or_dash(&timer.key).to_owned(),
        timestamp_text(dead.fired_at.as_ref()),
        dead.attempt.to_string(),
        payload_text(&timer.payload),
    ]
}

/// A cron timer's schedule and zone, `0 9 * * MON-FRI (Europe/Berlin)`; `-` for others.
fn schedule_text(timer: &Timer) -> String {
    if timer.cron.is_empty() {
        return "-".to_owned();
    }
    format!("{} ({})", timer.cron, or_dash(&timer.time_zone))
}

/// Empty text fields show as `-`, so text columns and `key=value` pairs never go blank.
fn or_dash(text: &str) -> &str {
    if text.is_empty() {
        "-"
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dead_expiration_rows_dash_what_is_missing() {
        let dead = Expiration {
            delivery_id: "d-1".into(),
            timer: Some(Timer {
                id: "0000000000000007".into(),
                payload: b"x".to_vec().into(),
                ..Default::default()
            }),
            attempt: 5,
            ..Default::default()
        };
        assert_eq!(
            dead_expiration_row(&dead),
            ["d-1", "0000000000000007", "-", "-", "5", "\"x\""]
        );
        let without_timer = Expiration::default();
        assert_eq!(
            dead_expiration_row(&without_timer),
            ["", "", "-", "-", "0", "\"\""]
        );
    }
}
