//! What the integration tests share, one module for all of them:
//!
//! - [`server`]: a real tickd server in process on 127.0.0.1:0 ([`TestServer`]);
//! - [`rpc`]: the gRPC calls the tests make again and again, in short forms;
//! - [`cgroup`]: a memory cgroup to run `tickd` in, as a container with a memory limit;
//! - [`data_dir`]: a data directory's segments and size, seen from outside;
//! - [`daemon`]: `tickd` processes launched from the built binary, their logs captured;
//! - [`http_sink`]: an HTTP server that records what tickd pushes and answers as scripted
//!   (over TLS too);
//! - [`grpc_sink`]: a `tickd.v1.Sink` server that does the same for gRPC pushes;
//! - [`poison`]: a push sink's failure isolation: expirations it always fails among
//!   healthy ones, one node or replicas alike;
//! - [`postgres`]: a throwaway PostgreSQL server, for the replica tests;
//! - [`brokers`]: a throwaway NATS (JetStream) or Redis server, for the broker sinks;
//! - [`replica_set`]: a few `tickd` replicas on one such server: started, killed, paused,
//!   restarted, called, consumed from, and the ledger of what their clients were told;
//! - [`pg_proxy`]: a TCP proxy that can cut one replica off from PostgreSQL;
//! - [`proc_status`]: a process's memory, from `/proc/<pid>/status`;
//! - [`pki`]: a throwaway CA and the certificates it signs;
//! - [`metrics`]: scraping and parsing `/metrics`;
//! - [`raw_codec`]: sending bytes no generated client would;
//! - [`rng`]: a small deterministic random generator, for randomised tests;
//! - [`tmpfs`]: a small tmpfs, for a disk that fills up;
//! - [`wait`]: checking a condition until it holds, for states with no event to await;
//! - [`tooling`]: running commands, install locks, Python venvs, and the switches that skip
//!   tests needing what may be missing offline (`TICKD_SKIP_POLYGLOT`, `TICKD_SKIP_POSTGRES`,
//!   `TICKD_SKIP_BROKERS`) or taking long (`TICKD_SKIP_SIMULATION`).
//!
//! Every test binary (`tests/*.rs`) compiles this module anew with `mod common;` and uses
//! only part of it, so what one binary leaves unused would warn there: hence the one
//! `dead_code` allowance below, for the whole module (and the `unused_imports` one on the
//! re-exports, which a binary using only `tooling`, say, does not touch).
#![allow(dead_code)]

pub(crate) mod brokers;
pub(crate) mod cgroup;
pub(crate) mod daemon;
pub(crate) mod data_dir;
pub(crate) mod grpc_sink;
pub(crate) mod http_sink;
pub(crate) mod metrics;
pub(crate) mod otlp;
pub(crate) mod pg_proxy;
pub(crate) mod pki;
pub(crate) mod poison;
pub(crate) mod postgres;
pub(crate) mod proc_status;
pub(crate) mod raw_codec;
pub(crate) mod replica_set;
pub(crate) mod rng;
pub(crate) mod rpc;
pub(crate) mod server;
pub(crate) mod tmpfs;
pub(crate) mod tooling;
pub(crate) mod wait;

#[allow(unused_imports)]
pub(crate) use {rpc::*, server::*, tickd::proto::*};
