//! The values flags share: how results are printed, durations and RFC 3339 times. Kept
//! apart from the command line's shape so that every subcommand (and the connection
//! flags) can read them without depending on the whole command line.

use std::time::{Duration, SystemTime};

use clap::ValueEnum;

/// How results are printed: text for people, JSON for scripts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Output {
    Text,
    Json,
}

/// `1500ms`, `30s`, `2h`, `1h 30m`: the server's own parser, so tickctl and tickd's config
/// accept the same durations. Flags taking one set `allow_hyphen_values`, so that `-5s`
/// reaches this parser and gets a message about durations instead of clap's "unexpected
/// argument".
pub(crate) fn duration(text: &str) -> Result<Duration, String> {
    if text.starts_with("--") {
        return Err(format!(
            "expected a duration like 30s, found the flag {text:?}"
        ));
    }
    if let Some(magnitude) = text.trim_start().strip_prefix('-') {
        return Err(format!(
            "{text:?}: a duration cannot be negative; give how long from now, like {}",
            magnitude.trim()
        ));
    }
    tickd::config::parse_duration(text)
}

/// A timer id: 16 hexadecimal digits, as `add` prints them (the server's own parser). Text
/// that is not one is most likely a key, so the message says how to give that.
pub(crate) fn timer_id(text: &str) -> Result<String, String> {
    match text.parse::<tickd::domain::TimerId>() {
        Ok(_) => Ok(text.to_owned()),
        Err(_) => Err(format!(
            "{text:?} is not a timer id: ids are 16 hexadecimal digits, as `tickctl add` prints \
             them; to name a timer by its key, use --key {text}"
        )),
    }
}

/// RFC 3339 with `Z` or a numeric offset (`+01:00`); seconds fractions optional.
pub(crate) fn rfc3339(text: &str) -> Result<SystemTime, String> {
    let invalid = |why: &dyn std::fmt::Display| {
        format!("invalid RFC 3339 time {text:?} (like 2030-01-02T03:04:05Z): {why}")
    };
    let text = text.trim();
    let (local, offset_secs) = split_offset(text).ok_or_else(|| invalid(&"bad UTC offset"))?;
    let utc = humantime::parse_rfc3339_weak(local).map_err(|error| invalid(&error))?;
    let offset = Duration::from_secs(offset_secs.unsigned_abs());
    // A local time east of UTC (+hh:mm) is that much earlier in UTC.
    let adjusted = if offset_secs >= 0 {
        utc.checked_sub(offset)
    } else {
        utc.checked_add(offset)
    };
    adjusted.ok_or_else(|| invalid(&"out of range"))
}

/// Splits `2030-01-02T03:04:05+01:00` into the local part and the offset in seconds.
fn split_offset(text: &str) -> Option<(&str, i64)> {
    if let Some(local) = text.strip_suffix('Z').or_else(|| text.strip_suffix('z')) {
        return Some((local, 0));
    }
    // A numeric offset is the last six characters: `+hh:mm` or `-hh:mm`, after the time.
    let tail_start = text.len().checked_sub(6)?;
    let tail = text.get(tail_start..)?;
    let sign = match tail.as_bytes()[0] {
        b'+' => 1,
        b'-' => -1,
        _ => return Some((text, 0)), // no offset: UTC
    };
    if !text[..tail_start].contains(['T', 't', ' ']) {
        return Some((text, 0));
    }
    let hours: i64 = tail.get(1..3)?.parse().ok()?;
    let minutes: i64 = tail.get(4..6)?.parse().ok()?;
    if tail.as_bytes()[3] != b':' || hours > 23 || minutes > 59 {
        return None;
    }
    Some((&text[..tail_start], sign * (hours * 3600 + minutes * 60)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_are_applied() {
        let utc = rfc3339("2030-01-02T03:04:05Z").unwrap();
        assert_eq!(rfc3339("2030-01-02T04:04:05+01:00").unwrap(), utc);
        assert_eq!(rfc3339("2030-01-02T01:34:05-01:30").unwrap(), utc);
        assert_eq!(rfc3339("2030-01-02T03:04:05").unwrap(), utc);
        assert!(rfc3339("2030-01-02T03:04:05+25:00").is_err());
        assert!(rfc3339("tomorrow").is_err());
    }

    #[test]
    fn negative_durations_and_keys_for_ids_say_what_to_give() {
        assert_eq!(duration("1500ms"), Ok(Duration::from_millis(1500)));
        let negative = duration("-5s").unwrap_err();
        assert!(negative.contains("cannot be negative") && negative.contains("like 5s"));
        assert!(duration("--key").unwrap_err().contains("found the flag"));
        assert_eq!(
            timer_id("00000000000000ff").as_deref(),
            Ok("00000000000000ff")
        );
        let key = timer_id("order-7").unwrap_err();
        assert!(key.contains("16 hexadecimal digits") && key.contains("--key order-7"));
    }
}
