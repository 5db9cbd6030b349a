//! What an operator relies on: the Prometheus endpoint, TLS and mutual TLS, and bearer
//! tokens (load shedding and the Unix socket are in `overload.rs`). Each test starts the
//! real server and talks to it over real connections.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::metrics::*;
use common::pki::{write_file, CertAndKey, TestCa};
use common::*;
use tickd::proto::timers_client::TimersClient;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use tonic::{Code, Request};
use tonic_health::pb::health_check_response::ServingStatus;

// ---------------------------------------------------------------------------------------
// Metrics

#[test]
fn the_scrape_parser_reads_the_text_format() {
    let scrape = Scrape::parse(
        "# HELP x X.\n# TYPE x counter\nx_total 3\ny{b=\"2\",a=\"q\\\"z\"} 1.5\nh_bucket{le=\"+Inf\"} 2\n# EOF\n",
    );
    assert_eq!(scrape.value("x_total"), 3.0);
    assert_eq!(scrape.value("y{a=\"q\\\"z\",b=\"2\"}"), 1.5);
    assert_eq!(scrape.value("h_bucket{le=\"+Inf\"}"), 2.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_endpoint_counts_the_life_of_timers_and_calls() {
    // The default --sync always: every registration is fsynced before it is answered.
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let mut stream = subscribe(&mut client, "m", 30_000, 0).await;

    let doomed = register(&mut client, spec("m", 3_600_000, b"never")).await;
    let first = register(&mut client, spec("m", 50, b"one")).await;
    let second = register(&mut client, spec("m", 80, b"two")).await;
    assert!(cancel(&mut client, by_id("m", &doomed.id)).await);

    let mut fired = Vec::new();
    let mut delivery_ids = Vec::new();
    for _ in 0..2 {
        let expiration = within(next_expiration(&mut stream)).await;
        fired.push(expiration.timer.expect("timer").id);
        delivery_ids.push(expiration.delivery_id);
    }
    fired.sort();
    let mut expected = vec![first.id.clone(), second.id.clone()];
    expected.sort();
    assert_eq!(fired, expected);
    assert_eq!(ack(&mut client, "m", delivery_ids).await.acknowledged, 2);

    let missing = get(&mut client, by_key("m", "no-such-key"))
        .await
        .expect_err("no such timer");
    assert_eq!(missing.code(), Code::NotFound);

    let not_found = "tickd_rpc_requests_total{method=\"Get\",code=\"NOT_FOUND\"}";
    let scrape = scrape_until(server.metrics_addr, |scrape| {
        scrape.get(not_found) == Some(1.0)
            && scrape.get("tickd_expirations_delivered_total") == Some(2.0)
            && scrape.get("tickd_rpc_requests_total{method=\"Ack\",code=\"OK\"}") == Some(1.0)
    })
    .await;
    assert_eq!(scrape.value("tickd_timers_registered_total"), 3.0);
    assert_eq!(scrape.value("tickd_timers_cancelled_total"), 1.0);
    assert_eq!(scrape.value("tickd_timers_fired_total"), 2.0);
    // 0, or already gone: an empty namespace's series is removed after a second.
    let pending = scrape.get("tickd_timers_pending{namespace=\"m\"}");
    assert!(matches!(pending, None | Some(0.0)), "{pending:?}");
    assert_eq!(scrape.value("tickd_expirations_delivered_total"), 2.0);
    assert_eq!(scrape.value("tickd_expirations_redelivered_total"), 0.0);
    assert_eq!(scrape.value("tickd_expirations_dead_total"), 0.0);
    assert_eq!(scrape.value("tickd_delivery_buffered"), 0.0);
    assert_eq!(
        scrape.value("tickd_rpc_requests_total{code=\"OK\",method=\"NewTimeout\"}"),
        3.0
    );
    assert_eq!(
        scrape.value("tickd_rpc_requests_total{method=\"Cancel\",code=\"OK\"}"),
        1.0
    );
    assert_eq!(
        scrape.value("tickd_rpc_requests_total{method=\"Subscribe\",code=\"OK\"}"),
        1.0
    );
    assert_eq!(scrape.value(not_found), 1.0);
    assert_eq!(
        scrape.value("tickd_rpc_seconds_count{method=\"NewTimeout\"}"),
        3.0
    );
    assert_eq!(scrape.value("tickd_firing_lateness_seconds_count"), 2.0);
    assert_eq!(
        scrape.value("tickd_firing_lateness_seconds_bucket{le=\"+Inf\"}"),
        2.0
    );
    assert!(scrape.value("tickd_firing_lateness_seconds_sum") >= 0.0);
    assert!(scrape.value("tickd_log_fsync_seconds_count") > 0.0);
    assert!(scrape.value("tickd_worker_busy_seconds_total") > 0.0);

    // Anything but /metrics is a 404, not a crash.
    let mut stream = tokio::net::TcpStream::connect(server.metrics_addr)
        .await
        .unwrap();
    stream.write_all(b"GET / HTTP/1.0\r\n\r\n").await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    assert!(response.contains(" 404 "), "{response}");
    server.stop().await;
}

// ---------------------------------------------------------------------------------------
// TLS

fn server_cert(ca: &TestCa) -> CertAndKey {
    ca.server("tickd", &["localhost", "127.0.0.1"])
}

/// Connects over TLS trusting `ca`, presenting a client certificate signed by
/// `client_signer` if one is given, and makes one Timers call and one health call; any
/// failure (handshake, certificate, call) is an Err.
async fn tls_call(
    addr: SocketAddr,
    host: &str,
    ca: &TestCa,
    client_signer: Option<&TestCa>,
) -> Result<(), String> {
    within(tls_call_inner(addr, host, ca, client_signer)).await
}

async fn tls_call_inner(
    addr: SocketAddr,
    host: &str,
    ca: &TestCa,
    client_signer: Option<&TestCa>,
) -> Result<(), String> {
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(&ca.pem))
        .domain_name("localhost");
    if let Some(signer) = client_signer {
        let identity = signer.client("tickd client");
        tls = tls.identity(Identity::from_pem(&identity.cert_pem, &identity.key_pem));
    }
    let endpoint = Endpoint::from_shared(format!("https://{host}:{}", addr.port()))
        .unwrap()
        .tls_config(tls)
        .map_err(|error| format!("tls config: {error}"))?
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(5));
    let channel = endpoint
        .connect()
        .await
        .map_err(|error| format!("connect: {error:?}"))?;
    let mut timers = TimersClient::new(channel.clone());
    let timer = timers
        .new_timeout(NewTimeoutRequest {
            timer: Some(spec("tls", 3_600_000, b"over tls")),
        })
        .await
        .map_err(|status| format!("NewTimeout: {status:?}"))?
        .into_inner()
        .timer
        .ok_or("no timer")?;
    assert_eq!(timer.namespace, "tls");
    let health = check_health(channel, "")
        .await
        .map_err(|status| format!("health: {status:?}"))?;
    assert_eq!(health, ServingStatus::Serving);
    Ok(())
}

/// A plaintext HTTP/2 client against a TLS listener gets nowhere.
async fn plaintext_call(addr: SocketAddr) -> Result<(), String> {
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(5))
        .connect()
        .await
        .map_err(|error| format!("connect: {error}"))?;
    check_health(channel, "")
        .await
        .map(|_| ())
        .map_err(|status| format!("health: {status:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_handshake_needs_the_right_ca() {
    let pki = TestCa::new("good");
    let other = TestCa::new("other");
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = server_cert(&pki).write(dir.path(), "server");
    let server = TestServer::start_with(config(|c| {
        c.tls_cert = Some(cert);
        c.tls_key = Some(key);
    }))
    .await;

    tls_call(server.addr, "127.0.0.1", &pki, None)
        .await
        .expect("TLS with the server's CA");
    tls_call(server.addr, "localhost", &pki, None)
        .await
        .expect("TLS by name");
    // A client certificate is harmless when none is asked for.
    tls_call(server.addr, "127.0.0.1", &pki, Some(&pki))
        .await
        .expect("TLS with an unrequested client certificate");
    let wrong_ca = tls_call(server.addr, "127.0.0.1", &other, None).await;
    assert!(
        wrong_ca.is_err(),
        "a server cert from another CA was trusted"
    );
    let plaintext = within(plaintext_call(server.addr)).await;
    assert!(
        plaintext.is_err(),
        "plaintext call on the TLS port succeeded"
    );
    // Kubernetes probes cannot do TLS: --health-listen answers them in plaintext.
    within(plaintext_call(server.health_addr))
        .await
        .expect("plaintext health check on the health listener");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_needs_a_client_certificate_from_the_client_ca() {
    let pki = TestCa::new("good");
    let other = TestCa::new("other");
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = server_cert(&pki).write(dir.path(), "server");
    let client_ca = pki.write(dir.path(), "clients.pem");
    let server = TestServer::start_with_unix_socket(config(|c| {
        c.tls_cert = Some(cert);
        c.tls_key = Some(key);
        c.tls_client_ca = Some(client_ca);
    }))
    .await;

    tls_call(server.addr, "127.0.0.1", &pki, Some(&pki))
        .await
        .expect("mTLS with a client cert signed by the client CA");
    let without = tls_call(server.addr, "127.0.0.1", &pki, None).await;
    assert!(
        without.is_err(),
        "mTLS accepted a client with no certificate"
    );
    let foreign = tls_call(server.addr, "127.0.0.1", &pki, Some(&other)).await;
    assert!(
        foreign.is_err(),
        "mTLS accepted a client cert from another CA"
    );
    // A client that does not trust the server fails even with a good certificate.
    let distrust = tls_call(server.addr, "127.0.0.1", &other, Some(&pki)).await;
    assert!(distrust.is_err());

    // The Unix socket stays plaintext (guarded by its file mode).
    let channel = unix_channel(server.unix_socket.clone().expect("unix socket"))
        .await
        .expect("connect over the unix socket");
    let health = within(check_health(channel, ""))
        .await
        .expect("health over the unix socket");
    assert_eq!(health, ServingStatus::Serving);
    server.stop().await;
}

// ---------------------------------------------------------------------------------------
// Bearer tokens

fn with_token<T>(message: T, token: Option<&str>) -> Request<T> {
    let mut request = Request::new(message);
    if let Some(token) = token {
        request.metadata_mut().insert(
            "authorization",
            format!("Bearer {token}").parse().expect("ascii token"),
        );
    }
    request
}

/// One call of each kind on `namespace` with `token` (the timer `id` for Cancel), and its
/// outcome.
async fn every_call(
    client: &mut TimersClient<Channel>,
    namespace: &str,
    token: Option<&str>,
    id: &str,
) -> Vec<(&'static str, Result<(), tonic::Status>)> {
    let new = NewTimeoutRequest {
        timer: Some(spec(namespace, 3_600_000, b"x")),
    };
    let get = GetRequest {
        timer: by_key(namespace, "k"),
    };
    let cancel = CancelRequest {
        timer: by_id(namespace, id),
    };
    let touch = TouchRequest {
        timer: by_key(namespace, "k"),
        ttl: Some(millis(1_000)),
    };
    let subscribe = SubscribeRequest {
        namespace: namespace.into(),
        ..Default::default()
    };
    let ack = AckRequest {
        namespace: namespace.into(),
        delivery_ids: vec!["1".into()],
    };
    let pending = PendingRequest {
        namespace: namespace.into(),
        ..Default::default()
    };
    let reschedule = RescheduleRequest {
        timer: by_key(namespace, "k"),
        delay: Some(millis(1_000)),
        ..Default::default()
    };
    let redrive = RedriveRequest {
        namespace: namespace.into(),
        delivery_ids: Vec::new(),
    };
    vec![
        (
            "NewTimeout",
            client.new_timeout(with_token(new, token)).await.map(drop),
        ),
        ("Get", client.get(with_token(get, token)).await.map(drop)),
        (
            "Cancel",
            client.cancel(with_token(cancel, token)).await.map(drop),
        ),
        (
            "Touch",
            client.touch(with_token(touch, token)).await.map(drop),
        ),
        (
            "Subscribe",
            client
                .subscribe(with_token(subscribe, token))
                .await
                .map(drop),
        ),
        ("Ack", client.ack(with_token(ack, token)).await.map(drop)),
        (
            "Pending",
            client.pending(with_token(pending, token)).await.map(drop),
        ),
        (
            "Reschedule",
            client
                .reschedule(with_token(reschedule, token))
                .await
                .map(drop),
        ),
        (
            "Redrive",
            client.redrive(with_token(redrive, token)).await.map(drop),
        ),
    ]
}

const TOKEN_FILE: &str = "\
# test tokens
admin-secret *
team-a-secret a
team-ab-secret a,c
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_matrix_missing_wrong_namespace_right() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = write_file(dir.path(), "tokens", TOKEN_FILE);
    let server = TestServer::start_with(config(|c| c.auth_token_file = Some(tokens))).await;
    let mut client = server.client().await;
    let new = |namespace: &str| NewTimeoutRequest {
        timer: Some(spec(namespace, 3_600_000, b"x")),
    };

    // Without a token, or with an unknown one (or a malformed header): UNAUTHENTICATED.
    for token in [None, Some("nope"), Some("team-a-secretX")] {
        let error = client
            .new_timeout(with_token(new("a"), token))
            .await
            .expect_err("unauthenticated call");
        assert_eq!(error.code(), Code::Unauthenticated, "{token:?}: {error:?}");
        assert!(
            !error.message().contains("team-a-secret"),
            "token echoed: {error:?}"
        );
    }
    let mut raw = Request::new(new("a"));
    raw.metadata_mut()
        .insert("authorization", "team-a-secret".parse().unwrap());
    assert_eq!(
        client.new_timeout(raw).await.unwrap_err().code(),
        Code::Unauthenticated,
        "a token without the Bearer scheme"
    );
    let error = client
        .pending(with_token(PendingRequest::default(), None))
        .await
        .unwrap_err();
    assert_eq!(error.code(), Code::Unauthenticated);
    for (what, outcome) in every_call(&mut client, "a", None, "00000000deadbeef").await {
        let error = outcome.expect_err(what);
        assert_eq!(error.code(), Code::Unauthenticated, "{what}: {error:?}");
    }

    // The right token on its namespace: OK.
    let a = Some("team-a-secret");
    let timer = client
        .new_timeout(with_token(new("a"), a))
        .await
        .expect("allowed namespace")
        .into_inner()
        .timer
        .unwrap();
    let got = client
        .get(with_token(
            GetRequest {
                timer: by_id("a", &timer.id),
            },
            a,
        ))
        .await
        .expect("get in allowed namespace")
        .into_inner();
    assert_eq!(got.timer.unwrap().id, timer.id);
    let count = client
        .pending(with_token(
            PendingRequest {
                namespace: "a".into(),
                ..Default::default()
            },
            a,
        ))
        .await
        .expect("pending in allowed namespace")
        .into_inner()
        .count;
    assert_eq!(count, 1);
    client
        .subscribe(with_token(
            SubscribeRequest {
                namespace: "a".into(),
                ..Default::default()
            },
            a,
        ))
        .await
        .expect("subscribe in allowed namespace");
    client
        .ack(with_token(
            AckRequest {
                namespace: "a".into(),
                delivery_ids: vec![],
            },
            a,
        ))
        .await
        .expect("ack in allowed namespace");
    // A second grant in the same file works too.
    client
        .new_timeout(with_token(new("c"), Some("team-ab-secret")))
        .await
        .expect("second namespace of a multi-namespace token");

    // The same token outside its namespaces: PERMISSION_DENIED, whatever the call.
    let mut outcomes = every_call(&mut client, "b", a, &timer.id).await;
    let without_namespace = client.pending(with_token(PendingRequest::default(), a));
    outcomes.push((
        "Pending without a namespace",
        without_namespace.await.map(drop),
    ));
    for (what, outcome) in outcomes {
        match outcome {
            Ok(()) => panic!("{what}: allowed outside the token's namespaces"),
            Err(status) => assert_eq!(status.code(), Code::PermissionDenied, "{what}: {status:?}"),
        }
    }

    // A batch mixing namespaces: the allowed item registers, the other fails alone.
    let results = client
        .new_timeouts(with_token(
            NewTimeoutsRequest {
                timers: vec![
                    spec("a", 3_600_000, b"1"),
                    spec("b", 3_600_000, b"2"),
                    spec("a", 3_600_000, b"3"),
                ],
            },
            a,
        ))
        .await
        .expect("batch")
        .into_inner()
        .results;
    assert_eq!(results.len(), 3);
    for (index, result) in results.iter().enumerate() {
        match (index, result.result.as_ref().expect("result")) {
            (1, new_timeout_result::Result::Error(error)) => {
                assert_eq!(error.code, Code::PermissionDenied as i32, "{error:?}")
            }
            (1, other) => panic!("namespace b registered: {other:?}"),
            (_, new_timeout_result::Result::Registered(registered)) => {
                assert_eq!(registered.timer.as_ref().unwrap().namespace, "a")
            }
            (_, other) => panic!("item {index} failed: {other:?}"),
        }
    }

    // The admin token sees everything, and nothing leaked into b.
    let admin = Some("admin-secret");
    let all = client
        .pending(with_token(PendingRequest::default(), admin))
        .await
        .expect("pending for every namespace")
        .into_inner()
        .count;
    assert_eq!(all, 4, "a: 1 + 2 from the batch, c: 1");
    let b = client
        .pending(with_token(
            PendingRequest {
                namespace: "b".into(),
                ..Default::default()
            },
            admin,
        ))
        .await
        .expect("admin may look at b")
        .into_inner()
        .count;
    assert_eq!(b, 0);

    // Kubernetes probes send no metadata: health stays open.
    let health = check_health(server.channel().await, "").await;
    assert_eq!(
        health.expect("health without a token"),
        ServingStatus::Serving
    );
    server.stop().await;
}
