//! The generated gRPC types of `proto/tickd/v1/tickd.proto`.
#![allow(clippy::all, missing_docs)]

tonic::include_proto!("tickd.v1");

/// The encoded descriptor set, served by gRPC reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("tickd_descriptor");
