//! Reloading the TLS certificate and the token file while tickd runs, against the real
//! binary: on SIGHUP (which no longer ends tickd) and, with `--reload-interval`, on a change
//! of the files alone. What is open stays open; a bad new file is refused with a warning
//! and the old contents stay in force.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};
use tonic::Code;

use common::daemon::{tickd_command, Daemon};
use common::pki::{write_file, TestCa};
use common::wait::eventually;
use common::*;
use tickd::proto::timers_client::TimersClient;

/// `tickd` on `dir` with `extra` arguments, reading its files again every `reload_interval`
/// ("0s": on SIGHUP only).
fn start(dir: &Path, reload_interval: &str, extra: &[&str]) -> Daemon {
    let mut command = tickd_command();
    command
        .arg("--data-dir")
        .arg(dir.join("data"))
        .args(["--metrics-listen", "127.0.0.1:0"])
        .args(["--reload-interval", reload_interval])
        .args(extra);
    Daemon::start(command)
}

/// Waits until `daemon` has logged `needle` more than `before` times.
async fn logged(daemon: &Daemon, needle: &str, before: usize) {
    eventually(
        &format!("tickd logs {needle:?}"),
        PATIENCE,
        Duration::from_millis(20),
        || async move {
            let count = daemon.count(needle);
            (count > before)
                .then_some(())
                .ok_or(format!("{count} such lines"))
        },
        || async { daemon.log_text() },
    )
    .await;
}

/// Sends SIGHUP and waits for the reload it causes to be logged as `outcome` ("reloaded" or
/// "reload refused").
async fn sighup(daemon: &Daemon, outcome: &str) {
    let before = daemon.count(outcome);
    daemon.signal("HUP");
    logged(daemon, outcome, before).await;
}

/// A new connection over TLS trusting `ca` alone: it fails unless tickd presents a
/// certificate `ca` signed.
async fn tls_channel(addr: SocketAddr, ca: &TestCa) -> Result<Channel, String> {
    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(&ca.pem))
        .domain_name("localhost");
    let endpoint = Endpoint::from_shared(format!("https://127.0.0.1:{}", addr.port()))
        .unwrap()
        .tls_config(tls)
        .map_err(|error| format!("tls config: {error}"))?
        .connect_timeout(Duration::from_secs(5));
    within(endpoint.connect())
        .await
        .map_err(|error| format!("connect: {error:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_swapped_certificate_serves_new_connections_and_open_streams_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let (old_ca, new_ca) = (TestCa::new("old"), TestCa::new("new"));
    let old = old_ca.server("tickd", &["localhost", "127.0.0.1"]);
    let new = new_ca.server("tickd", &["localhost", "127.0.0.1"]);
    let (cert, key) = old.write(dir.path(), "server");
    let mut daemon = start(
        dir.path(),
        "0s",
        &[
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ],
    );
    let before = tls_channel(daemon.addr, &old_ca).await.expect("old ca");
    assert!(tls_channel(daemon.addr, &new_ca).await.is_err());
    let mut open_client = TimersClient::new(before);
    let mut stream = within(subscribe(&mut open_client, "rotation", 0, 0)).await;

    new.write(dir.path(), "server");
    sighup(&daemon, "reloaded").await;
    let refused = tls_channel(daemon.addr, &old_ca).await;
    assert!(refused.is_err(), "old certificate still served");
    let mut new_client = TimersClient::new(tls_channel(daemon.addr, &new_ca).await.unwrap());
    // Registered over a new connection, delivered on the stream opened before the swap.
    let timer = within(register(&mut new_client, spec("rotation", 10, b"after"))).await;
    let expiration = within(next_expiration(&mut stream)).await;
    assert_eq!(timer_id(&expiration), timer.id);
    // The connection from before the swap still takes calls (a reconnection would fail:
    // it trusts the old CA alone).
    within(open_client.pending(PendingRequest {
        namespace: "rotation".into(),
        ..Default::default()
    }))
    .await
    .expect("call on the connection opened before the swap");

    // A certificate that is not PEM, then a key that is not the certificate's: refused,
    // and the new certificate stays in force.
    write_file(dir.path(), "server.pem", "not a certificate\n");
    sighup(&daemon, "reload refused").await;
    old.write(dir.path(), "server");
    write_file(dir.path(), "server.key", &new.key_pem);
    sighup(&daemon, "reload refused").await;
    let refusals = daemon.lines_with(&["reload refused"]);
    assert!(refusals[0].contains("no PEM certificate"), "{refusals:?}");
    assert!(refusals[1].contains("--tls-key"), "{refusals:?}");
    assert!(refusals.iter().all(|line| line.contains("server.pem")));
    assert!(tls_channel(daemon.addr, &old_ca).await.is_err());
    let mut client = TimersClient::new(tls_channel(daemon.addr, &new_ca).await.unwrap());
    within(register(&mut client, spec("rotation", 3_600_000, b"x"))).await;
    daemon.assert_running();
}

/// A call with `token` (a Pending of every namespace): its status code.
async fn call_with(client: &mut TimersClient<Channel>, token: &str) -> Code {
    let mut request = tonic::Request::new(PendingRequest::default());
    let value = format!("Bearer {token}").parse().unwrap();
    request.metadata_mut().insert("authorization", value);
    match within(client.pending(request)).await {
        Ok(_) => Code::Ok,
        Err(status) => status.code(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_token_file_takes_effect_on_sighup_and_a_broken_one_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = write_file(dir.path(), "tokens", "alpha *\n");
    let mut daemon = start(
        dir.path(),
        "0s",
        &["--auth-token-file", tokens.to_str().unwrap()],
    );
    let mut client = TimersClient::new(channel_to(daemon.addr).await);
    assert_eq!(call_with(&mut client, "alpha").await, Code::Ok);
    assert_eq!(call_with(&mut client, "beta").await, Code::Unauthenticated);

    write_file(dir.path(), "tokens", "# rotated\nbeta *\n");
    sighup(&daemon, "reloaded").await;
    assert_eq!(call_with(&mut client, "beta").await, Code::Ok);
    assert_eq!(call_with(&mut client, "alpha").await, Code::Unauthenticated);

    // Malformed, empty, or gone: refused, naming the file, and beta still works.
    for broken in ["beta * extra\n", "# nothing\n", ""] {
        write_file(dir.path(), "tokens", broken);
        sighup(&daemon, "reload refused").await;
        assert_eq!(call_with(&mut client, "beta").await, Code::Ok, "{broken:?}");
    }
    std::fs::remove_file(&tokens).unwrap();
    sighup(&daemon, "reload refused").await;
    assert_eq!(call_with(&mut client, "beta").await, Code::Ok);
    let refusals = daemon.lines_with(&["reload refused"]);
    assert_eq!(refusals.len(), 4, "{refusals:?}");
    assert!(refusals[0].contains("line 1"), "{refusals:?}");
    assert!(refusals[1].contains("no token"), "{refusals:?}");
    assert!(refusals.iter().all(|line| line.contains("tokens")));
    assert!(
        refusals.iter().all(|line| !line.contains("beta")),
        "token logged"
    );
    daemon.assert_running();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_token_file_is_noticed_without_a_signal() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = write_file(dir.path(), "tokens", "alpha *\n");
    let daemon = start(
        dir.path(),
        "50ms",
        &["--auth-token-file", tokens.to_str().unwrap()],
    );
    let mut client = TimersClient::new(channel_to(daemon.addr).await);
    assert_eq!(call_with(&mut client, "alpha").await, Code::Ok);
    write_file(dir.path(), "tokens", "gamma orders\n");
    logged(&daemon, "reloaded", 0).await;
    assert_eq!(call_with(&mut client, "alpha").await, Code::Unauthenticated);
    // Pending of every namespace needs `*`: gamma is known, but limited to "orders".
    assert_eq!(
        call_with(&mut client, "gamma").await,
        Code::PermissionDenied
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_without_files_to_reload_leaves_tickd_serving() {
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = start(dir.path(), "0s", &[]);
    for _ in 0..2 {
        sighup(&daemon, "sighup: reloading").await;
    }
    let mut client = TimersClient::new(channel_to(daemon.addr).await);
    within(register(&mut client, spec("hup", 3_600_000, b"x"))).await;
    daemon.signal("TERM");
    let status = daemon.wait_for_exit(PATIENCE);
    assert!(status.success(), "{status}");
}

async fn channel_to(addr: SocketAddr) -> Channel {
    within(
        Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect(),
    )
    .await
    .expect("connect")
}
