//! Registered and fired records encoded by hand, straight from borrowed timer fields, byte
//! for byte what prost writes for the same `records::Record` (a property test checks it).

use prost::encoding::{encode_key, encode_varint, encoded_len_varint, key_len, uint64, WireType};

use super::frame::frame_with;

/// A timer as the log stores it (`records::Timer`), borrowed from wherever its owner keeps
/// it. Registering, firing and snapshotting encode timers straight from the worker's own
/// records this way: building a `records::Timer` first would allocate its namespace, key
/// and payload anew for every record, which was a good part of the worker's time under
/// batched registration.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TimerFields<'a> {
    pub(crate) id: u64,
    pub(crate) namespace: &'a str,
    pub(crate) key: &'a str,
    pub(crate) deadline_unix_nanos: u64,
    pub(crate) payload: &'a [u8],
    pub(crate) repeat_nanos: u64,
    pub(crate) ttl_nanos: u64,
    pub(crate) fired_count: u64,
    /// A cron timer's expression and zone; empty otherwise.
    pub(crate) cron: &'a str,
    pub(crate) time_zone: &'a str,
    /// The registering call's trace context; all empty when it carried none.
    pub(crate) traceparent: &'a str,
    pub(crate) tracestate: &'a str,
    pub(crate) baggage: &'a str,
}

/// Field numbers of `records.proto`, for the records encoded by hand.
mod field {
    pub(crate) const RECORD_REGISTERED: u32 = 1;
    pub(crate) const RECORD_FIRED: u32 = 4;
    pub(crate) const FIRED_TIMER: u32 = 1;
    pub(crate) const FIRED_UNIX: u32 = 2;
    pub(crate) const FIRED_REARMED: u32 = 3;
}

impl TimerFields<'_> {
    /// The scalar fields with their numbers; proto3 leaves zeros out.
    fn scalars(&self) -> [(u32, u64); 5] {
        [
            (1, self.id),
            (4, self.deadline_unix_nanos),
            (6, self.repeat_nanos),
            (7, self.ttl_nanos),
            (8, self.fired_count),
        ]
    }

    fn encoded_len(&self) -> usize {
        uint64_fields_len(&self.scalars())
            + length_delimited_len(2, self.namespace.len())
            + length_delimited_len(3, self.key.len())
            + length_delimited_len(5, self.payload.len())
            + length_delimited_len(9, self.cron.len())
            + length_delimited_len(10, self.time_zone.len())
            + length_delimited_len(11, self.traceparent.len())
            + length_delimited_len(12, self.tracestate.len())
            + length_delimited_len(13, self.baggage.len())
    }

    /// The message body, fields in number order as prost writes them.
    fn encode_raw(&self, out: &mut Vec<u8>) {
        put_uint64(1, self.id, out);
        put_length_delimited(2, self.namespace.as_bytes(), out);
        put_length_delimited(3, self.key.as_bytes(), out);
        put_uint64(4, self.deadline_unix_nanos, out);
        put_length_delimited(5, self.payload, out);
        put_uint64(6, self.repeat_nanos, out);
        put_uint64(7, self.ttl_nanos, out);
        put_uint64(8, self.fired_count, out);
        put_length_delimited(9, self.cron.as_bytes(), out);
        put_length_delimited(10, self.time_zone.as_bytes(), out);
        put_length_delimited(11, self.traceparent.as_bytes(), out);
        put_length_delimited(12, self.tracestate.as_bytes(), out);
        put_length_delimited(13, self.baggage.as_bytes(), out);
    }
}

/// Length of `uint64` fields, zeros left out as proto3 does.
fn uint64_fields_len(fields: &[(u32, u64)]) -> usize {
    fields
        .iter()
        .filter(|&&(_, value)| value != 0)
        .map(|&(number, value)| uint64::encoded_len(number, &value))
        .sum()
}

/// Writes a `uint64` field unless it is zero, as proto3 does.
fn put_uint64(number: u32, value: u64, out: &mut Vec<u8>) {
    if value != 0 {
        uint64::encode(number, &value, out);
    }
}

/// Length of an optional length-delimited field (absent when empty).
fn length_delimited_len(number: u32, length: usize) -> usize {
    if length == 0 {
        return 0;
    }
    key_len(number) + encoded_len_varint(length as u64) + length
}

fn put_length_delimited(number: u32, bytes: &[u8], out: &mut Vec<u8>) {
    if bytes.is_empty() {
        return;
    }
    encode_key(number, WireType::LengthDelimited, out);
    encode_varint(bytes.len() as u64, out);
    out.extend_from_slice(bytes);
}

/// Frames `Record { registered: timer }`: byte for byte what [`super::frame::encode`]
/// makes of it.
pub(crate) fn encode_registered(timer: &TimerFields<'_>, out: &mut Vec<u8>) {
    let timer_len = timer.encoded_len();
    let record_len =
        key_len(field::RECORD_REGISTERED) + encoded_len_varint(timer_len as u64) + timer_len;
    frame_with(record_len, out, |out| {
        encode_key(field::RECORD_REGISTERED, WireType::LengthDelimited, out);
        encode_varint(timer_len as u64, out);
        timer.encode_raw(out);
    });
}

/// Frames `Record { fired: Fired { timer, fired_unix_nanos, rearmed_deadline_unix_nanos } }`,
/// byte for byte what [`super::frame::encode`] makes of it.
pub(crate) fn encode_fired(
    timer: &TimerFields<'_>,
    fired_unix_nanos: u64,
    rearmed_deadline_unix_nanos: u64,
    out: &mut Vec<u8>,
) {
    let timer_len = timer.encoded_len();
    let scalars = [
        (field::FIRED_UNIX, fired_unix_nanos),
        (field::FIRED_REARMED, rearmed_deadline_unix_nanos),
    ];
    let fired_len = key_len(field::FIRED_TIMER)
        + encoded_len_varint(timer_len as u64)
        + timer_len
        + uint64_fields_len(&scalars);
    let record_len =
        key_len(field::RECORD_FIRED) + encoded_len_varint(fired_len as u64) + fired_len;
    frame_with(record_len, out, |out| {
        encode_key(field::RECORD_FIRED, WireType::LengthDelimited, out);
        encode_varint(fired_len as u64, out);
        encode_key(field::FIRED_TIMER, WireType::LengthDelimited, out);
        encode_varint(timer_len as u64, out);
        timer.encode_raw(out);
        for (number, value) in scalars {
            put_uint64(number, value, out);
        }
    });
}

/// The hand-written encoders against prost, over field values at the varint length
/// boundaries and strings and payloads up to their limits.
#[cfg(test)]
mod hand_encoding_tests {
    use super::*;
    use crate::local::store::frame::{decode_all, encode, FILE_HEADER};
    use crate::local::store::records::Record;
    use crate::local::store::records::{record::Kind, Fired, Timer};
    use proptest::prelude::*;

    fn boundary_or_any() -> impl Strategy<Value = u64> {
        prop_oneof![
            Just(0u64),
            Just(1),
            Just(127),
            Just(128),
            Just(16_383),
            Just(16_384),
            Just(u64::MAX),
            any::<u64>(),
        ]
    }

    fn length(limit: usize) -> impl Strategy<Value = usize> {
        prop_oneof![Just(0usize), Just(127), Just(128), Just(limit), 0..=limit]
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 300,
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        #[test]
        fn registered_and_fired_frames_are_what_prost_writes(
            numbers in prop::array::uniform7(boundary_or_any()),
            namespace_len in length(300),
            key_len in length(256),
            payload_len in length(64 * 1024),
            cron_len in length(200),
            baggage_len in length(8192),
        ) {
            let [id, deadline, repeat, ttl, fired_count, fired_unix, rearmed] = numbers;
            let namespace = "n".repeat(namespace_len);
            let key = "k".repeat(key_len);
            let payload = vec![0xab_u8; payload_len];
            let cron = "*".repeat(cron_len);
            let time_zone = if cron_len > 0 { "Europe/Berlin" } else { "" };
            let traceparent = if baggage_len % 2 == 1 {
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
            } else {
                ""
            };
            let tracestate = if baggage_len % 3 == 1 { "congo=t61rcWkgMzE" } else { "" };
            let baggage = "b".repeat(baggage_len);
            let fields = TimerFields {
                traceparent,
                tracestate,
                baggage: &baggage,
                id,
                namespace: &namespace,
                key: &key,
                deadline_unix_nanos: deadline,
                payload: &payload,
                repeat_nanos: repeat,
                ttl_nanos: ttl,
                fired_count,
                cron: &cron,
                time_zone,
            };
            let timer = Timer {
                id,
                namespace: namespace.clone(),
                key: key.clone(),
                deadline_unix_nanos: deadline,
                payload: bytes::Bytes::from(payload.clone()),
                repeat_nanos: repeat,
                ttl_nanos: ttl,
                fired_count,
                cron: cron.clone(),
                time_zone: time_zone.to_owned(),
                traceparent: traceparent.to_owned(),
                tracestate: tracestate.to_owned(),
                baggage: baggage.clone(),
            };
            let registered = Record { kind: Some(Kind::Registered(timer.clone())) };
            let fired = Record {
                kind: Some(Kind::Fired(Fired {
                    timer: Some(timer),
                    fired_unix_nanos: fired_unix,
                    rearmed_deadline_unix_nanos: rearmed,
                })),
            };
            let (mut by_hand, mut by_prost) = (Vec::new(), Vec::new());
            encode_registered(&fields, &mut by_hand);
            encode(&registered, &mut by_prost);
            prop_assert_eq!(&by_hand, &by_prost);
            prop_assert_eq!(decode_all(&[&FILE_HEADER[..], &by_hand].concat()).records, vec![registered]);
            let (mut by_hand, mut by_prost) = (Vec::new(), Vec::new());
            encode_fired(&fields, fired_unix, rearmed, &mut by_hand);
            encode(&fired, &mut by_prost);
            prop_assert_eq!(&by_hand, &by_prost);
            prop_assert_eq!(decode_all(&[&FILE_HEADER[..], &by_hand].concat()).records, vec![fired]);
        }
    }
}
