//! What `tickctl add-batch` reads: JSON values one after another (JSON lines, or pretty
//! objects), each a timer or a listing of timers, as tickctl and grpcurl print them in proto3
//! JSON, or as a person writes them; each becomes a TimerSpec with the line it starts on.

use std::collections::BTreeMap;

use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::failure::Failure;
use crate::proto_json::from_json;
use crate::proto_time::to_proto_duration;
use crate::values::duration;
use tickd::proto::TimerSpec;

/// One timer of the input and the line it starts on, by which its result is reported.
pub(crate) struct BatchItem {
    pub(crate) line: usize,
    pub(crate) spec: TimerSpec,
}

/// What a registered timer says about itself (`get`, `pending`) and a new one cannot be
/// given: dropped, so a timer tickctl printed registers as it was.
const READ_ONLY_TIMER_FIELDS: [&str; 4] = ["id", "remaining", "firedCount", "fired_count"];

/// tickctl's own addition for files written by hand: a UTF-8 payload as it is, where
/// `payload` (proto3 JSON's bytes) is base64.
const PAYLOAD_TEXT_FIELDS: [&str; 2] = ["payloadText", "payload_text"];

const DURATION_FIELDS: [&str; 3] = ["delay", "repeat", "ttl"];

/// Every timer of the input, in order. Nothing is sent unless all of them read well: a bad
/// one is a usage error naming its line.
pub(crate) fn read_batch(input: &str, default_namespace: &str) -> Result<Vec<BatchItem>, Failure> {
    let mut items = Vec::new();
    for value in serde_json::Deserializer::from_str(input).into_iter::<&RawValue>() {
        // serde_json's message ends with the line and column.
        let value = value.map_err(|error| Failure::Usage(format!("add-batch: {error}")))?;
        let line = line_of(input, value);
        let listing: Option<BTreeMap<String, &RawValue>> = serde_json::from_str(value.get()).ok();
        match listing.as_ref().and_then(|fields| fields.get("timers")) {
            Some(timers) => {
                let timers: Vec<&RawValue> = serde_json::from_str(timers.get()).map_err(|_| {
                    Failure::Usage(format!("line {line}: \"timers\" is not a list of timers"))
                })?;
                for timer in timers {
                    let line = line_of(input, timer);
                    let spec = timer_spec(timer.get(), line, default_namespace)?;
                    items.push(BatchItem { line, spec });
                }
            }
            None => {
                let spec = timer_spec(value.get(), line, default_namespace)?;
                items.push(BatchItem { line, spec });
            }
        }
    }
    Ok(items)
}

/// The line of `input` that `value` (a slice of it) starts on, counting from 1.
fn line_of(input: &str, value: &RawValue) -> usize {
    let offset = (value.get().as_ptr() as usize).saturating_sub(input.as_ptr() as usize);
    input[..offset.min(input.len())].matches('\n').count() + 1
}

/// One timer as a TimerSpec: a Timer (its read-only fields dropped) or a TimerSpec in proto3
/// JSON, durations also as `add` takes them (`30m`), and `payloadText`; a timer without a
/// namespace goes to `--namespace`.
fn timer_spec(text: &str, line: usize, default_namespace: &str) -> Result<TimerSpec, Failure> {
    let bad_line = |why: String| Failure::Usage(format!("line {line}: {why}"));
    let Ok(Value::Object(mut fields)) = serde_json::from_str::<Value>(text) else {
        return Err(bad_line(
            "expected a timer (as `tickctl get -o json` prints one) or a listing with \"timers\" \
             (as `tickctl pending -o json` prints)"
                .into(),
        ));
    };
    for field in READ_ONLY_TIMER_FIELDS {
        fields.remove(field);
    }
    let payload_text = take_payload_text(&mut fields).map_err(bad_line)?;
    for field in DURATION_FIELDS {
        if let Some(Value::String(text)) = fields.get_mut(field) {
            *text = canonical_duration(text).map_err(|why| bad_line(format!("{field}: {why}")))?;
        }
    }
    let mut spec: TimerSpec = from_json(Value::Object(fields)).map_err(bad_line)?;
    if spec.namespace.is_empty() {
        spec.namespace = default_namespace.to_owned();
    }
    if let Some(text) = payload_text {
        spec.payload = text.into_bytes().into();
    }
    Ok(spec)
}

/// `payloadText`, which must be a string and cannot come with `payload`.
fn take_payload_text(fields: &mut Map<String, Value>) -> Result<Option<String>, String> {
    let mut found = None;
    for field in PAYLOAD_TEXT_FIELDS {
        match fields.remove(field) {
            Some(Value::String(text)) => found = Some(text),
            Some(_) => return Err(format!("{field}: expected a string")),
            None => {}
        }
    }
    if found.is_some() && fields.contains_key("payload") {
        return Err("give payload (base64) or payloadText (text), not both".into());
    }
    Ok(found)
}

/// A duration in proto3 JSON (`1.500s`) as it is; one as `add` takes it (`30m`, `1h 30m`)
/// turned into that form; a negative one refused.
fn canonical_duration(text: &str) -> Result<String, String> {
    match text.parse::<prost_types::Duration>() {
        Ok(parsed) if parsed.seconds >= 0 && parsed.nanos >= 0 => Ok(text.to_owned()),
        _ => duration(text).map(|value| to_proto_duration(value).to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timers_and_listings_are_read_with_their_lines() {
        let input = "{\"key\": \"a\", \"delay\": \"30m\", \"payloadText\": \"hi\"}\n\n\
                     {\n  \"timers\": [\n    {\"id\": \"0000000000000001\", \"namespace\": \"n\", \
                     \"payload\": \"/wA=\", \"firedCount\": \"2\", \"repeat\": \"1.500s\"},\n    \
                     {\"deadline\": \"2100-01-01T00:00:00Z\"}\n  ],\n  \"count\": \"2\"\n}\n";
        let Ok(items) = read_batch(input, "default") else {
            panic!("refused: {input}");
        };
        let lines: Vec<_> = items.iter().map(|item| item.line).collect();
        assert_eq!(lines, [1, 5, 6]);
        assert_eq!(items[0].spec.delay.unwrap().seconds, 1800);
        assert_eq!(&items[0].spec.payload[..], b"hi");
        assert_eq!(items[0].spec.namespace, "default");
        assert_eq!(items[1].spec.namespace, "n");
        assert_eq!(&items[1].spec.payload[..], b"\xff\x00");
        assert_eq!(items[1].spec.repeat.unwrap().nanos, 500_000_000);
        assert_eq!(items[2].spec.deadline.unwrap().seconds, 4_102_444_800);
    }

    #[test]
    fn bad_timers_name_their_line_and_field() {
        let error = |input: &str| match read_batch(input, "") {
            Err(Failure::Usage(message)) => message,
            _ => panic!("{input} was accepted"),
        };
        assert!(error("{}\n{\"delai\": \"1s\"}").starts_with("line 2: "));
        assert!(error("{}\n{\"delai\": \"1s\"}").contains("delai"));
        assert!(error("{\"delay\": \"-5s\"}").contains("delay: "));
        assert!(error("{\"payload\": \"/w==\", \"payloadText\": \"x\"}").contains("not both"));
        assert!(error("[1]").starts_with("line 1: expected a timer"));
        assert!(error("{}\n{\"key\": ").contains("line 2"));
    }
}
