//! Push sinks over gRPC and over TLS, against a real tickd: a `tickd.v1.Sink` written
//! here with tonic that fails, then answers, or always rejects; an `https://` sink with a
//! test CA, a bearer token and a client certificate, and one whose CA tickd was not given;
//! a token file rotated while tickd runs;
//! and the starts that must be refused (a gRPC sink outside `--sink-allow`, an unreadable
//! token file).

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::daemon::{tickd_command, Daemon};
use common::grpc_sink::{GrpcPush, GrpcScript, GrpcSink};
use common::http_sink::{always, HttpSink};
use common::metrics::{deliveries_settled, scrape_until};
use common::pki::{write_file, TestCa};
use common::*;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tickd::proto::timers_client::TimersClient;
use tonic::Code;

const NAMESPACE: &str = "pushed";

fn keys(pushes: &[GrpcPush]) -> BTreeSet<String> {
    pushes.iter().map(|push| push.key.clone()).collect()
}

fn attempts_of(pushes: &[GrpcPush], key: &str) -> Vec<u32> {
    pushes
        .iter()
        .filter(|push| push.key == key)
        .map(|push| push.attempt)
        .collect()
}

fn pushes_series(outcome: &str) -> String {
    format!("tickd_sink_pushes_total{{namespace=\"{NAMESPACE}\",outcome=\"{outcome}\"}}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_sink_unavailable_twice_gets_each_expiration_three_times_and_acknowledges_it() {
    let script: GrpcScript = Arc::new(|_, before| {
        if before < 2 {
            Code::Unavailable
        } else {
            Code::Ok
        }
    });
    let sink = GrpcSink::start(script, None).await;
    let server = TestServer::pushing_to(NAMESPACE, &format!("grpc://{}", sink.addr), |_| {}).await;
    let mut client = server.client().await;
    let registered: BTreeSet<String> = register_all(&mut client, specs(NAMESPACE, 5, 20))
        .await
        .into_iter()
        .collect();
    sink.wait_for("three calls for each of the 5 expirations", |pushes| {
        pushes.len() >= 15 && keys(pushes).len() == 5
    })
    .await;
    deliveries_settled(server.metrics_addr).await;
    let pushes = sink.pushes();
    assert_eq!(
        pushes.len(),
        15,
        "acknowledged after the third: {pushes:#?}"
    );
    for key in keys(&pushes) {
        assert_eq!(attempts_of(&pushes, &key), [1, 2, 3], "{key}");
    }
    for push in &pushes {
        let expiration = push.expiration();
        assert_eq!(push.namespace, NAMESPACE);
        assert_eq!(push.request.namespace, NAMESPACE);
        assert_eq!(push.request.idempotency_key, push.key);
        assert_eq!(expiration.delivery_id, push.delivery_id);
        assert_eq!(expiration.attempt, push.attempt);
        let timer_id = &expiration.timer.as_ref().expect("its timer").id;
        assert!(registered.contains(timer_id), "{timer_id}");
        assert!(push.key.contains(timer_id.as_str()), "{}", push.key);
        assert_eq!(push.authorization, None);
    }
    let dead = pending_with_dead(&mut client, NAMESPACE).await;
    assert!(dead.dead_expirations.is_empty(), "{dead:?}");
    let scrape = common::metrics::scrape(server.metrics_addr).await;
    assert_eq!(scrape.value(&pushes_series("delivered")), 5.0);
    assert_eq!(scrape.value(&pushes_series("retry")), 10.0);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_sink_answering_invalid_argument_buries_after_max_attempts() {
    let accepting = Arc::new(AtomicBool::new(false));
    let script: GrpcScript = {
        let accepting = accepting.clone();
        Arc::new(move |_, _| match accepting.load(Ordering::SeqCst) {
            true => Code::Ok,
            false => Code::InvalidArgument,
        })
    };
    let sink = GrpcSink::start(script, None).await;
    let server = TestServer::pushing_to(NAMESPACE, &format!("grpc://{}", sink.addr), |config| {
        config.max_attempts = 3;
    })
    .await;
    let mut client = server.client().await;
    register(&mut client, spec(NAMESPACE, 10, b"poison")).await;
    sink.wait_for("three rejected calls", |pushes| pushes.len() >= 3)
        .await;
    wait_for_dead(&client, NAMESPACE, 1, || async {
        format!("{:#?}", sink.pushes())
    })
    .await;
    let pushes = sink.pushes();
    assert_eq!(pushes.len(), 3, "no call after the last attempt");
    assert_eq!(attempts_of(&pushes, &pushes[0].key), [1, 2, 3]);
    let scrape = common::metrics::scrape(server.metrics_addr).await;
    assert_eq!(scrape.value(&pushes_series("rejected")), 3.0);
    // Redriven once the app accepts it: delivered, its attempts counted afresh.
    accepting.store(true, Ordering::SeqCst);
    let dead = pending_with_dead(&mut client, NAMESPACE).await;
    let redriven = client
        .redrive(RedriveRequest {
            namespace: NAMESPACE.into(),
            delivery_ids: vec![dead.dead_expirations[0].delivery_id.clone()],
        })
        .await
        .expect("redrive")
        .into_inner();
    assert_eq!(redriven.redriven, 1);
    sink.wait_for("the redriven expiration", |pushes| pushes.len() >= 4)
        .await;
    deliveries_settled(server.metrics_addr).await;
    let pushes = sink.pushes();
    assert_eq!(pushes.len(), 4);
    assert_eq!(
        (pushes[3].key.as_str(), pushes[3].attempt),
        (pushes[0].key.as_str(), 1)
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_sink_down_then_up_gets_everything_as_first_attempts() {
    let addr = common::http_sink::unused_address().await;
    let server = TestServer::pushing_to(NAMESPACE, &format!("grpc://{addr}"), |_| {}).await;
    let mut client = server.client().await;
    let registered = register_all(&mut client, specs(NAMESPACE, 5, 10)).await;
    // Tried while down: each a connection that failed, which spends no attempt.
    scrape_until(server.metrics_addr, |scrape| {
        scrape.value(&pushes_series("unreachable")) > 0.0
    })
    .await;
    let scrape = common::metrics::scrape(server.metrics_addr).await;
    assert_eq!(scrape.value(&pushes_series("retry")), 0.0);
    let sink = GrpcSink::start_on(addr, Arc::new(|_, _| Code::Ok), None).await;
    sink.wait_for("the 5 expirations", |pushes| keys(pushes).len() == 5)
        .await;
    deliveries_settled(server.metrics_addr).await;
    let pushes = sink.pushes();
    for id in &registered {
        assert!(
            pushes.iter().any(|push| push.key.contains(id.as_str())),
            "{id}"
        );
    }
    assert!(pushes.iter().all(|push| push.attempt == 1), "{pushes:#?}");
    server.stop().await;
}

/// A rustls server configuration for `localhost` signed by `ca`; with `client_ca`, it
/// requires a client certificate signed by that CA.
fn tls_server(ca: &TestCa, client_ca: Option<&TestCa>) -> rustls::ServerConfig {
    let identity = ca.server("sink", &["localhost"]);
    let chain = CertificateDer::pem_slice_iter(identity.cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_slice(identity.key_pem.as_bytes()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = match client_ca {
        Some(client_ca) => {
            let mut roots = rustls::RootCertStore::empty();
            roots
                .add(CertificateDer::from_pem_slice(client_ca.pem.as_bytes()).unwrap())
                .unwrap();
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .unwrap();
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    builder.with_single_cert(chain, key).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_sink_trusting_a_test_ca_gets_the_token_and_sees_the_client_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("sink");
    let clients_ca = TestCa::new("tickd clients");
    let client_identity = clients_ca.client("tickd");
    let sink = HttpSink::start_tls(always(200), tls_server(&ca, Some(&clients_ca))).await;
    let ca_file = ca.write(dir.path(), "sink-ca.pem");
    let (client_cert, client_key) = client_identity.write(dir.path(), "client");
    let token_file = write_file(dir.path(), "token", "s3cret-token\n");
    let server = TestServer::pushing_to(NAMESPACE, &sink.https_url("/timers"), |config| {
        config.sink_ca = Some(ca_file);
        config.sink_client_cert = Some(client_cert);
        config.sink_client_key = Some(client_key);
        config.sink_token_file = Some(token_file);
    })
    .await;
    let mut client = server.client().await;
    let timer = register(&mut client, spec(NAMESPACE, 10, b"over TLS")).await;
    sink.wait_for("one push", |pushes| !pushes.is_empty()).await;
    deliveries_settled(server.metrics_addr).await;
    let pushes = sink.pushes();
    assert_eq!(pushes.len(), 1, "{pushes:#?}");
    let push = &pushes[0];
    assert!(push.key.contains(&timer.id), "{}", push.key);
    assert_eq!(push.authorization.as_deref(), Some("Bearer s3cret-token"));
    let presented = CertificateDer::from_pem_slice(client_identity.cert_pem.as_bytes()).unwrap();
    assert_eq!(
        push.client_certificate.as_deref(),
        Some(presented.as_ref()),
        "the sink saw tickd's client certificate"
    );
    assert_eq!(sink.failed_handshakes(), 0);
    // The sink offered no protocol in its handshake: HTTP/1.1.
    assert_eq!(push.version, hyper::Version::HTTP_11);
    server.stop().await;
}

/// A rotated token file applies to later pushes without a restart: tickd looks at the
/// file at most once a second, and the second timer is due well after that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_token_file_applies_to_later_pushes() {
    let dir = tempfile::tempdir().unwrap();
    let sink = HttpSink::start(always(200)).await;
    let token_file = write_file(dir.path(), "token", "first-token\n");
    let server = TestServer::pushing_to(NAMESPACE, &sink.url("/timers"), |config| {
        config.sink_token_file = Some(token_file.clone());
    })
    .await;
    let mut client = server.client().await;
    register(&mut client, spec(NAMESPACE, 10, b"before")).await;
    sink.wait_for("the first push", |pushes| pushes.len() == 1)
        .await;
    // Rotated as a secret mount does it: a new file renamed over the old one.
    let rotated = write_file(dir.path(), "token.new", "second-token\n");
    std::fs::rename(&rotated, &token_file).unwrap();
    register(&mut client, spec(NAMESPACE, 2_000, b"after")).await;
    sink.wait_for("the second push", |pushes| pushes.len() == 2)
        .await;
    let tokens: Vec<_> = sink
        .pushes()
        .iter()
        .map(|push| push.authorization.clone())
        .collect();
    assert_eq!(
        tokens,
        [
            Some("Bearer first-token".to_string()),
            Some("Bearer second-token".to_string())
        ]
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpcs_sink_gets_each_expiration_with_the_token() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("grpc sink");
    let identity = ca.server("sink", &["localhost"]);
    let sink = GrpcSink::start(
        Arc::new(|_, _| Code::Ok),
        Some((&identity.cert_pem, &identity.key_pem)),
    )
    .await;
    let ca_file = ca.write(dir.path(), "ca.pem");
    let token_file = write_file(dir.path(), "token", "  grpc-token \n");
    let url = format!("grpcs://localhost:{}", sink.addr.port());
    let server = TestServer::pushing_to(NAMESPACE, &url, |config| {
        config.sink_ca = Some(ca_file);
        config.sink_token_file = Some(token_file);
    })
    .await;
    let mut client = server.client().await;
    register_all(&mut client, specs(NAMESPACE, 3, 10)).await;
    sink.wait_for("3 expirations", |pushes| keys(pushes).len() == 3)
        .await;
    deliveries_settled(server.metrics_addr).await;
    let pushes = sink.pushes();
    assert_eq!(pushes.len(), 3, "{pushes:#?}");
    for push in &pushes {
        assert_eq!(push.authorization.as_deref(), Some("Bearer grpc-token"));
        assert_eq!(push.attempt, 1);
    }
    server.stop().await;
}

/// A `tickd` process on `data_dir` pushing to `url`, trusting `ca_file` if given.
fn daemon_pushing_to(data_dir: &Path, url: &str, ca_file: Option<&Path>) -> Daemon {
    let mut command = tickd_command();
    command
        .arg("--data-dir")
        .arg(data_dir)
        .args(["--sink", &format!("{NAMESPACE}={url}")])
        .args(["--metrics-listen", "127.0.0.1:0"]);
    if let Some(ca_file) = ca_file {
        command.arg("--sink-ca").arg(ca_file);
    }
    Daemon::start(command)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_sink_whose_ca_is_not_trusted_gets_nothing_until_it_is_and_nothing_is_lost() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    let ca = TestCa::new("untrusted");
    // This sink offers HTTP/2 in its handshake: once trusted, pushes go over it.
    let mut offers_h2 = tls_server(&ca, None);
    offers_h2.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let sink = HttpSink::start_tls(always(200), offers_h2).await;
    let url = sink.https_url("/");
    let mut daemon = daemon_pushing_to(&data_dir, &url, None);
    let mut client = TimersClient::connect(format!("http://{}", daemon.addr))
        .await
        .unwrap();
    let registered = register_all(&mut client, specs(NAMESPACE, 3, 10)).await;
    sink.wait_for_a_failed_handshake().await;
    // Not reached: the pushes are held, no attempt spent, and the metric says why.
    let scrape = scrape_until(daemon.metrics_addr(), |scrape| {
        scrape.value(&pushes_series("unreachable")) > 0.0
    })
    .await;
    assert!(scrape.value(&pushes_series("unreachable")) > 0.0);
    assert_eq!(scrape.value(&pushes_series("delivered")), 0.0);
    assert_eq!(scrape.value(&pushes_series("retry")), 0.0);
    assert!(sink.pushes().is_empty(), "{:#?}", sink.pushes());
    daemon.signal("TERM");
    assert!(
        daemon.wait_for_exit(PATIENCE).success(),
        "{}",
        daemon.log_text()
    );
    // Trusted after a restart: everything arrives. The failed handshakes spent no
    // attempt; the restart counts the one each delivery was handed out as before it, as
    // for any subscriber that goes away.
    let ca_file = ca.write(dir.path(), "ca.pem");
    let daemon = daemon_pushing_to(&data_dir, &url, Some(&ca_file));
    sink.wait_for("the 3 expirations", |pushes| {
        registered
            .iter()
            .all(|id| pushes.iter().any(|push| push.key.contains(id.as_str())))
    })
    .await;
    let mut client = TimersClient::connect(format!("http://{}", daemon.addr))
        .await
        .unwrap();
    let dead = pending_with_dead(&mut client, NAMESPACE).await;
    assert!(dead.dead_expirations.is_empty(), "{dead:?}");
    assert!(
        sink.pushes().iter().all(|push| push.attempt <= 2),
        "{:#?}",
        sink.pushes()
    );
    assert!(
        sink.pushes()
            .iter()
            .all(|push| push.version == hyper::Version::HTTP_2),
        "the handshake chose h2: {:#?}",
        sink.pushes()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_sink_outside_sink_allow_is_refused_at_start() {
    let outside = tokio::net::TcpListener::bind("127.0.0.2:0")
        .await
        .expect("bind 127.0.0.2");
    let port = outside.local_addr().unwrap().port();
    let mut command = tickd_command();
    command
        .args(["--sync", "none", "--metrics-listen", "127.0.0.1:0"])
        .args(["--sink", &format!("{NAMESPACE}=grpc://127.0.0.2:{port}")])
        .args(["--sink-allow", "127.0.0.1"]);
    let (status, log) = Daemon::refused(command, PATIENCE);
    assert!(!status.success(), "{log}");
    assert!(
        log.contains("--sink-allow"),
        "the refusal names the flag: {log}"
    );
    assert!(log.contains("127.0.0.2"), "and the address: {log}");
    let accepted = tokio::time::timeout(Duration::ZERO, outside.accept()).await;
    assert!(accepted.is_err(), "tickd connected to a sink it refused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_token_file_or_ca_is_refused_at_start_naming_its_flag() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-token");
    let empty = write_file(dir.path(), "empty", "\n");
    let not_pem = write_file(dir.path(), "not-pem", "not a certificate\n");
    for (flag, path) in [
        ("--sink-token-file", &missing),
        ("--sink-token-file", &empty),
        ("--sink-ca", &missing),
        ("--sink-ca", &not_pem),
    ] {
        let mut command = tickd_command();
        command
            .args(["--sync", "none", "--metrics-listen", "127.0.0.1:0"])
            .args(["--sink", &format!("{NAMESPACE}=grpc://127.0.0.1:9")])
            .arg(flag)
            .arg(path);
        let (status, log) = Daemon::refused(command, PATIENCE);
        assert!(!status.success(), "{flag} {}: {log}", path.display());
        assert!(log.contains(flag), "the refusal names {flag}: {log}");
        assert!(
            log.contains(&path.display().to_string()),
            "and the file: {log}"
        );
    }
}
