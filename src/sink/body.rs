//! What a push carries whatever its transport: the expiration written in the sink's body
//! format, and the values a receiver deduplicates and reports by (the idempotency key,
//! the same for every attempt at one expiration; the delivery id and attempt of one
//! push; the namespace; the signature, if the namespace's pushes are signed). One place,
//! so that an HTTP POST, a JetStream message and a Redis stream entry say the same thing.

use bytes::Bytes;
use prost::Message;

use super::signing::{Signature, Signing};
use crate::domain::Delivered;

/// How an expiration is written in a push's body: chosen by the URL's fragment (`#json`,
/// the default, or `#protobuf`), which HTTP never sends to the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BodyFormat {
    /// The proto3 JSON mapping of `tickd.v1.Expiration`, `application/json`.
    Json,
    /// `tickd.v1.Expiration` encoded, `application/x-protobuf`.
    Protobuf,
}

/// The URL without its fragment, and the body format the fragment names.
pub(crate) fn body_format(url: &str) -> Result<(&str, BodyFormat), String> {
    match url.split_once('#') {
        None => Ok((url, BodyFormat::Json)),
        Some((url, fragment)) => match BodyFormat::named(fragment) {
            Some(format) => Ok((url, format)),
            // Not echoed: a raw `#` in a password would show the rest of it.
            None => Err(
                "the URL's #fragment names no body format: give #json (the default) or #protobuf"
                    .into(),
            ),
        },
    }
}

impl BodyFormat {
    /// The format a URL's fragment (or one of an HTTP URL's fragment options) names.
    pub(crate) fn named(option: &str) -> Option<BodyFormat> {
        match option {
            "json" => Some(BodyFormat::Json),
            "protobuf" => Some(BodyFormat::Protobuf),
            _ => None,
        }
    }
}

/// One push's expiration as the sink receives it.
pub(crate) struct PushBody {
    /// `application/json` or `application/x-protobuf`.
    pub(crate) content_type: &'static str,
    pub(crate) bytes: Bytes,
    pub(crate) labels: PushLabels,
}

impl PushBody {
    /// `tickd.v1.Expiration` for `delivered`, in proto3 JSON or encoded; signed over
    /// these bytes when the namespace has secrets.
    pub(crate) fn of(
        delivered: &Delivered,
        format: BodyFormat,
        signing: Option<&Signing>,
    ) -> PushBody {
        let message = crate::convert::expiration(
            delivered.delivery_id,
            &delivered.expiration,
            delivered.attempt,
        );
        let (content_type, bytes) = match format {
            BodyFormat::Json => (
                "application/json",
                Bytes::from(crate::proto_json::to_json_text(&message, false)),
            ),
            BodyFormat::Protobuf => (
                "application/x-protobuf",
                Bytes::from(message.encode_to_vec()),
            ),
        };
        let mut labels = PushLabels::of(delivered, message.delivery_id);
        labels.sign(signing, &bytes);
        PushBody {
            content_type,
            bytes,
            labels,
        }
    }
}

/// What a push says beside its body, as headers, metadata or fields, for a receiver to
/// deduplicate and report by; made once per push whatever its transport.
pub(crate) struct PushLabels {
    /// The same for every attempt at one expiration, and across restarts: its namespace,
    /// its timer and which firing of that timer it is.
    pub(crate) idempotency_key: String,
    /// The delivery id as the body and the API write it (one attempt).
    pub(crate) delivery_id: String,
    /// The namespace, escaped as a header value holds it.
    pub(crate) namespace: String,
    /// The Standard Webhooks headers, when the namespace's pushes are signed.
    pub(crate) signature: Option<Signature>,
}

impl PushLabels {
    /// `delivered`'s labels, given its delivery id as the expiration's message wrote it.
    pub(crate) fn of(delivered: &Delivered, delivery_id: String) -> PushLabels {
        let expiration = &delivered.expiration;
        let namespace = escaped(&expiration.namespace);
        PushLabels {
            idempotency_key: format!(
                "{namespace}/{:016x}/{}",
                expiration.id.0, expiration.fired_count
            ),
            delivery_id,
            namespace,
            signature: None,
        }
    }

    /// Signs `body` (the bytes the receiver gets) under the idempotency key, if `signing`.
    pub(crate) fn sign(&mut self, signing: Option<&Signing>, body: &[u8]) {
        self.signature = signing.map(|signing| signing.sign(&self.idempotency_key, body));
    }
}

/// A namespace as a header value holds it: percent-encoded beyond printable ASCII, and
/// `/` too (the idempotency key's separator).
fn escaped(namespace: &str) -> String {
    percent_encoding::utf8_percent_encode(namespace, KEY_ESCAPES).to_string()
}

/// Escaped in a namespace shown in a header: controls, `/`, `%` and spaces (anything past
/// ASCII always is).
const KEY_ESCAPES: &percent_encoding::AsciiSet =
    &percent_encoding::CONTROLS.add(b'/').add(b'%').add(b' ');
