//! The proto3 JSON mapping (the canonical JSON that grpcurl and every protobuf library print)
//! for tickctl's `--output json` and the bodies tickd pushes to HTTP sinks, both ways: `deliveryId`, 64-bit integers as strings, bytes
//! as base64, RFC 3339 timestamps, `"1.500s"` durations, default values left out.
//!
//! prost-reflect does the mapping from the descriptor set tickd already embeds for gRPC
//! reflection, so the JSON follows the .proto file by construction: no field list to keep in
//! step by hand.

use std::sync::OnceLock;

use prost_reflect::{DescriptorPool, DeserializeOptions, DynamicMessage, MessageDescriptor};
use serde_json::Value;

/// A generated message and its full protobuf name (tonic's codegen implements no
/// `prost::Name`), to find its descriptor.
pub trait ProtoMessage: prost::Message + Default {
    const FULL_NAME: &'static str;
}

macro_rules! proto_messages {
    ($($message:ty => $name:literal),* $(,)?) => {
        $(impl ProtoMessage for $message {
            const FULL_NAME: &'static str = $name;
        })*
    };
}

proto_messages! {
    crate::proto::Timer => "tickd.v1.Timer",
    crate::proto::TimerSpec => "tickd.v1.TimerSpec",
    crate::proto::Expiration => "tickd.v1.Expiration",
    crate::proto::NewTimeoutResponse => "tickd.v1.NewTimeoutResponse",
    crate::proto::NewTimeoutResult => "tickd.v1.NewTimeoutResult",
    crate::proto::PendingResponse => "tickd.v1.PendingResponse",
    crate::proto::CancelResponse => "tickd.v1.CancelResponse",
    crate::proto::AckResponse => "tickd.v1.AckResponse",
    crate::proto::RedriveResponse => "tickd.v1.RedriveResponse",
    crate::proto::KeepAliveResponse => "tickd.v1.KeepAliveResponse",
    crate::proto::SetSinkResponse => "tickd.v1.SetSinkResponse",
    crate::proto::GetSinkResponse => "tickd.v1.GetSinkResponse",
    crate::proto::RemoveSinkResponse => "tickd.v1.RemoveSinkResponse",
    crate::proto::PauseSinkResponse => "tickd.v1.PauseSinkResponse",
    crate::proto::ResumeSinkResponse => "tickd.v1.ResumeSinkResponse",
    crate::proto::SinkStatusResponse => "tickd.v1.SinkStatusResponse",
    crate::proto::ListSinksResponse => "tickd.v1.ListSinksResponse",
    tonic_health::pb::HealthCheckResponse => "grpc.health.v1.HealthCheckResponse",
}

/// tickd's API and the health service, decoded once from the descriptor sets built in.
fn descriptor_pool() -> &'static DescriptorPool {
    static POOL: OnceLock<DescriptorPool> = OnceLock::new();
    POOL.get_or_init(|| {
        let mut pool = DescriptorPool::new();
        for descriptor_set in [
            crate::proto::FILE_DESCRIPTOR_SET,
            tonic_health::pb::FILE_DESCRIPTOR_SET,
        ] {
            pool.decode_file_descriptor_set(descriptor_set)
                .expect("the descriptor sets compiled in decode");
        }
        pool
    })
}

fn descriptor<M: ProtoMessage>() -> MessageDescriptor {
    descriptor_pool()
        .get_message_by_name(M::FULL_NAME)
        .unwrap_or_else(|| panic!("{} is in the built-in descriptor set", M::FULL_NAME))
}

/// A message in canonical proto3 JSON, its fields in the .proto's order (as grpcurl prints
/// them): indented, or on one line.
pub fn to_json_text<M: ProtoMessage>(message: &M, indented: bool) -> String {
    let mut dynamic = DynamicMessage::new(descriptor::<M>());
    dynamic
        .transcode_from(message)
        .expect("a message decodes as its own type");
    let text = if indented {
        serde_json::to_string_pretty(&dynamic)
    } else {
        serde_json::to_string(&dynamic)
    };
    // Fails only on values the mapping cannot express (a timestamp past year 9999), which
    // the server never sends; show them as null rather than stop.
    text.unwrap_or_else(|_| "null".to_owned())
}

/// A message from proto3 JSON (lowerCamelCase or the proto's own field names); a field the
/// message does not have is an error, so a misspelt one is never silently dropped.
pub fn from_json<M: ProtoMessage>(value: Value) -> Result<M, String> {
    let dynamic = DynamicMessage::deserialize_with_options(
        descriptor::<M>(),
        value,
        &DeserializeOptions::new().deny_unknown_fields(true),
    )
    .map_err(|error| error.to_string())?;
    dynamic.transcode_to().map_err(|error| error.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{Expiration, Timer, TimerSpec};
    use serde_json::json;

    #[test]
    fn output_follows_the_proto3_json_mapping() {
        let expiration = Expiration {
            delivery_id: "d-1".into(),
            timer: Some(Timer {
                id: "0000000000000007".into(),
                payload: b"\xff\x00raw".to_vec().into(),
                fired_count: 1,
                repeat: Some(prost_types::Duration {
                    seconds: 1,
                    nanos: 500_000_000,
                }),
                deadline: Some(prost_types::Timestamp {
                    seconds: 4_102_444_800,
                    nanos: 0,
                }),
                ..Default::default()
            }),
            attempt: 1,
            ..Default::default()
        };
        let text = to_json_text(&expiration, false);
        assert!(
            text.starts_with("{\"deliveryId\":\"d-1\",\"timer\":{\"id\":"),
            "{text}"
        );
        assert_eq!(
            serde_json::from_str::<Value>(&text).unwrap(),
            json!({
                "deliveryId": "d-1",
                "timer": {
                    "id": "0000000000000007",
                    "deadline": "2100-01-01T00:00:00Z",
                    "payload": "/wByYXc=",
                    "repeat": "1.500s",
                    "firedCount": "1",
                },
                "attempt": 1,
            })
        );
    }

    #[test]
    fn input_takes_both_field_spellings_and_refuses_unknown_fields() {
        for spelling in ["timeZone", "time_zone"] {
            let spec: TimerSpec =
                from_json(json!({spelling: "UTC", "payload": "/wByYXc="})).unwrap();
            assert_eq!(spec.time_zone, "UTC");
            assert_eq!(&spec.payload[..], b"\xff\x00raw");
        }
        let error = from_json::<TimerSpec>(json!({"delai": "1s"})).unwrap_err();
        assert!(error.contains("delai"), "{error}");
    }
}
