//! Compiles `proto/` into Rust with protox (a pure-Rust protobuf compiler), so a fresh
//! machine with nothing but cargo can build tickd: no system `protoc` is needed.

use std::path::PathBuf;

use protox::prost::Message;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "proto/tickd/v1/tickd.proto";
    println!("cargo:rerun-if-changed={proto}");
    let descriptors = protox::compile([proto], ["proto"])?;
    // The encoded descriptor set feeds the gRPC reflection service.
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out_dir.join("tickd_descriptor.bin"),
        descriptors.encode_to_vec(),
    )?;
    tonic_prost_build::configure()
        // Payloads stay `Bytes` from the wire to the subscriber: clones share, never copy.
        .bytes(".")
        .compile_fds(descriptors)?;
    Ok(())
}
