//! The protobuf codec of the `Timers` service: prost's, except that a request that does not
//! decode is the caller's fault and says so.
//!
//! tonic-prost answers a malformed message (a truncated varint, a bad wire type, invalid
//! UTF-8 in a string) with INTERNAL, which tells a client the server broke and invites a
//! retry of the same bytes. gRPC's status guide gives INVALID_ARGUMENT for a request the
//! server cannot accept as sent; this codec keeps prost's message (what was wrong and
//! where) under that code. The generated code builds it through `Default` (see
//! `codec_path` in build.rs).

use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};
use tonic::Status;
use tonic_prost::{ProstCodec, ProstDecoder, ProstEncoder};

/// Prost's codec with decoding failures answered as INVALID_ARGUMENT.
#[derive(Debug, Clone, Default)]
pub(crate) struct TimersCodec<T, U>(ProstCodec<T, U>);

impl<T, U> Codec for TimersCodec<T, U>
where
    T: prost::Message + Send + 'static,
    U: prost::Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = InvalidArgumentDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        self.0.encoder()
    }

    fn decoder(&mut self) -> Self::Decoder {
        InvalidArgumentDecoder(self.0.decoder())
    }
}

/// Decodes like prost; a failure is INVALID_ARGUMENT carrying prost's description.
#[derive(Debug, Clone)]
pub(crate) struct InvalidArgumentDecoder<U>(ProstDecoder<U>);

impl<U: prost::Message + Default> Decoder for InvalidArgumentDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        self.0.decode(buf).map_err(|status| {
            Status::invalid_argument(format!("malformed message: {}", status.message()))
        })
    }

    fn buffer_settings(&self) -> BufferSettings {
        self.0.buffer_settings()
    }
}
