//! Compiles `proto/` into Rust with protox (a pure-Rust protobuf compiler), so a fresh
//! machine with nothing but cargo can build tickd: no system `protoc` is needed.

use std::path::PathBuf;

use protox::prost::Message;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let api = "proto/tickd/v1/tickd.proto";
    // The service an app implements to receive pushes (tickd is its client): generated
    // with the API, as one package, but left out of what reflection serves.
    let sink = "proto/tickd/v1/sink.proto";
    // The service that sets sinks at run time: served, and by reflection too.
    let sinks = "proto/tickd/v1/sinks.proto";
    let records = "proto/tickd/store/v1/records.proto";
    println!("cargo:rerun-if-changed={api}");
    println!("cargo:rerun-if-changed={sink}");
    println!("cargo:rerun-if-changed={sinks}");
    println!("cargo:rerun-if-changed={records}");
    let descriptors = protox::compile([api, sinks], ["proto"])?;
    // The encoded descriptor set feeds the gRPC reflection service.
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out_dir.join("tickd_descriptor.bin"),
        descriptors.encode_to_vec(),
    )?;
    tonic_prost_build::configure()
        // Payloads stay `Bytes` from the wire to the subscriber: clones share, never copy.
        .bytes(".")
        // Prost's codec, but a request that does not decode is INVALID_ARGUMENT.
        .codec_path("crate::api::codec::TimersCodec")
        .compile_fds(protox::compile([api, sink, sinks], ["proto"])?)?;
    // The log's records: plain prost messages, no gRPC service.
    tonic_prost_build::configure()
        .build_client(false)
        .build_server(false)
        .bytes(".")
        .compile_fds(protox::compile([records], ["proto"])?)?;

    // --- Benchmarks only: etcd's lease API (a minimal subset, `proto/peers/`), client side
    // only, for `tickd-bench etcd-grant` / `etcd-keepalive` (side-by-side comparison with
    // etcd). Nothing in the tickd library or server uses it.
    let etcd_lease = "proto/peers/etcd_lease.proto";
    println!("cargo:rerun-if-changed={etcd_lease}");
    tonic_prost_build::configure()
        .build_server(false)
        .compile_fds(protox::compile([etcd_lease], ["proto"])?)?;
    // --- end of the benchmark-only block.
    Ok(())
}
