//! Push sinks set, read and removed while tickd runs (`tickd.v1.Sinks`), against a real
//! tickd and a real HTTP sink: a sink set through the API pushes, shows its URL with the
//! credentials masked and counts its pushes; removed, the namespace's expirations go to a
//! subscriber instead; set, it survives SIGKILL; refused changes change nothing; a sink
//! of `--sink` is not the API's to change; and across two replicas of one PostgreSQL
//! database, a sink set through one pushes from both and is removed through the other.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::daemon::{tickd_command, Daemon};
use common::http_sink::{always, HttpSink, Push};
use common::replica_set::ReplicaSet;
use common::tooling::skip_postgres;
use common::wait::eventually;
use common::*;
use tickd::proto::sinks_client::SinksClient;
use tickd::proto::timers_client::TimersClient;
use tickd::proto::{
    GetSinkRequest, ListSinksRequest, RemoveSinkRequest, SetSinkRequest, SinkCircuit, SinkOrigin,
    SinkStatusRequest, SinkStatusResponse, SinkView as Sink,
};
use tonic::transport::{Channel, Endpoint};
use tonic::Code;

const NAMESPACE: &str = "pushed";

fn sinks_client(addr: SocketAddr) -> SinksClient<Channel> {
    SinksClient::new(
        Endpoint::from_shared(format!("http://{addr}"))
            .expect("endpoint")
            .connect_lazy(),
    )
}

/// `http://user:secret@ADDR/timers`: a URL whose credentials must never be shown.
fn url_with_credentials(sink: &HttpSink) -> String {
    format!("http://user:secret@{}/timers", sink.addr)
}

async fn set(
    client: &mut SinksClient<Channel>,
    namespace: &str,
    url: &str,
) -> Result<Sink, tonic::Status> {
    client
        .set_sink(SetSinkRequest {
            namespace: namespace.into(),
            url: url.into(),
            ..Default::default()
        })
        .await
        .map(|answer| answer.into_inner().sink.expect("a sink"))
}

async fn get(client: &mut SinksClient<Channel>, namespace: &str) -> Result<Sink, tonic::Status> {
    client
        .get_sink(GetSinkRequest {
            namespace: namespace.into(),
        })
        .await
        .map(|answer| answer.into_inner().sink.expect("a sink"))
}

async fn remove(client: &mut SinksClient<Channel>, namespace: &str) -> Result<(), tonic::Status> {
    client
        .remove_sink(RemoveSinkRequest {
            namespace: namespace.into(),
        })
        .await
        .map(|_| ())
}

async fn status(
    client: &mut SinksClient<Channel>,
    namespace: Option<&str>,
) -> Result<SinkStatusResponse, tonic::Status> {
    client
        .sink_status(SinkStatusRequest {
            namespace: namespace.unwrap_or_default().into(),
            all: namespace.is_none(),
        })
        .await
        .map(tonic::Response::into_inner)
}

/// Whether a push names the timer `id` (its idempotency key is `NAMESPACE/ID/FIRING`).
fn pushed(pushes: &[Push], id: &str) -> bool {
    pushes.iter().any(|push| push.key.contains(id))
}

fn assert_refused(refused: Result<Sink, tonic::Status>, code: Code, naming: &str) {
    let status = refused.expect_err("refused");
    assert_eq!(status.code(), code, "{status:?}");
    assert!(
        status.message().contains(naming),
        "names {naming}: {status:?}"
    );
}

/// Registers one timer due at once in `namespace`; its id.
async fn fire_one(timers: &mut TimersClient<Channel>, namespace: &str) -> String {
    register(timers, spec(namespace, 10, b"api sink")).await.id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_set_through_the_api_pushes_shows_no_credentials_and_counts() {
    let sink = HttpSink::start(always(200)).await;
    let server = TestServer::start().await;
    let mut sinks = sinks_client(server.addr);
    let mut timers = server.client().await;
    let url = url_with_credentials(&sink);
    let shown = format!("http://***@{}/timers", sink.addr);

    let answered = set(&mut sinks, NAMESPACE, &url).await.expect("set");
    assert_eq!(answered.url, shown);
    assert_eq!(answered.origin, SinkOrigin::Api as i32);
    let ids = [
        fire_one(&mut timers, NAMESPACE).await,
        fire_one(&mut timers, NAMESPACE).await,
    ];
    sink.wait_for("both expirations", |pushes| {
        ids.iter().all(|id| pushed(pushes, id))
    })
    .await;
    let expected = format!("Basic {}", "dXNlcjpzZWNyZXQ="); // user:secret
    assert!(sink
        .pushes()
        .iter()
        .all(|push| push.authorization.as_deref() == Some(expected.as_str())));

    let got = get(&mut sinks, NAMESPACE).await.expect("get");
    assert_eq!(got.url, shown);
    assert!(!got.url.contains("secret"));
    // Counted once each push has been answered.
    eventually(
        "the status counts both pushes delivered",
        PATIENCE,
        Duration::from_millis(20),
        || {
            let mut sinks = sinks.clone();
            async move {
                let state = status(&mut sinks, Some(NAMESPACE))
                    .await
                    .map_err(|status| status.to_string())?
                    .sinks
                    .remove(0);
                if state.delivered >= 2 {
                    Ok(())
                } else {
                    Err(format!("{state:?}"))
                }
            }
        },
        || async { String::new() },
    )
    .await;
    let all = status(&mut sinks, None).await.expect("status of all");
    assert_eq!(all.sinks.len(), 1);
    let state = &all.sinks[0];
    let state_sink = state.sink.as_ref().expect("its sink");
    assert_eq!(state_sink.url, shown);
    assert_eq!(state_sink.origin, SinkOrigin::Api as i32);
    assert_eq!(state.circuit, SinkCircuit::Closed as i32);
    assert_eq!((state.retry, state.rejected, state.unreachable), (0, 0, 0));
    assert!(state.last_error.is_empty(), "{state:?}");
    // The same URL again is no change.
    let again = sinks
        .set_sink(SetSinkRequest {
            namespace: NAMESPACE.into(),
            url: url.clone(),
            ..Default::default()
        })
        .await
        .expect("set again")
        .into_inner();
    assert!(!again.changed);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_sink_pushes_no_more_and_a_subscriber_gets_the_expirations() {
    let sink = HttpSink::start(always(200)).await;
    let server = TestServer::start().await;
    let mut sinks = sinks_client(server.addr);
    let mut timers = server.client().await;
    set(&mut sinks, NAMESPACE, &sink.url("/"))
        .await
        .expect("set");
    let first = fire_one(&mut timers, NAMESPACE).await;
    sink.wait_for("the first expiration", |pushes| pushed(pushes, &first))
        .await;

    let circuit = format!("tickd_sink_circuit{{namespace=\"{NAMESPACE}\"}}");
    let scrape = common::metrics::scrape(server.metrics_addr).await;
    assert_eq!(
        scrape.get(&circuit),
        Some(0.0),
        "{circuit} served while set"
    );

    remove(&mut sinks, NAMESPACE).await.expect("remove");
    assert_eq!(
        get(&mut sinks, NAMESPACE).await.unwrap_err().code(),
        Code::NotFound
    );
    assert_eq!(
        remove(&mut sinks, NAMESPACE).await.unwrap_err().code(),
        Code::NotFound
    );
    let listed = status(&mut sinks, None).await.expect("status");
    assert!(listed.sinks.is_empty(), "{listed:?}");
    // Its series leave /metrics with it.
    let scrape = common::metrics::scrape(server.metrics_addr).await;
    assert_eq!(scrape.get(&circuit), None, "{circuit} still served");

    let mut stream = subscribe(&mut timers, NAMESPACE, 0, 10).await;
    let later = fire_one(&mut timers, NAMESPACE).await;
    let received = within(next_expiration(&mut stream)).await;
    assert_eq!(timer_id(&received), later);
    assert!(!pushed(&sink.pushes(), &later), "pushed after its removal");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_set_survives_sigkill() {
    let data_dir = tempfile::tempdir().unwrap();
    let sink = HttpSink::start(always(200)).await;
    let start = || {
        let mut command = tickd_command();
        command.arg("--data-dir").arg(data_dir.path());
        Daemon::start(command)
    };
    let mut daemon = start();
    set(
        &mut sinks_client(daemon.addr),
        NAMESPACE,
        &url_with_credentials(&sink),
    )
    .await
    .expect("set");
    daemon.kill();

    let daemon = start();
    let mut sinks = sinks_client(daemon.addr);
    let kept = get(&mut sinks, NAMESPACE).await.expect("kept");
    assert_eq!(kept.url, format!("http://***@{}/timers", sink.addr));
    let mut timers = TimersClient::connect(format!("http://{}", daemon.addr))
        .await
        .unwrap();
    let id = fire_one(&mut timers, NAMESPACE).await;
    sink.wait_for("the expiration, after the restart", |pushes| {
        pushed(pushes, &id)
    })
    .await;
    // The file in the data directory holds the URL, readable by its owner only.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(data_dir.path().join("sinks.json"))
            .expect("sinks.json")
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0, "{mode:o}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_changes_change_nothing() {
    let sink = HttpSink::start(always(200)).await;
    let server = TestServer::start().await;
    let mut sinks = sinks_client(server.addr);
    let good = sink.url("/good");
    set(&mut sinks, NAMESPACE, &good).await.expect("set");

    assert_refused(
        set(&mut sinks, NAMESPACE, "ftp://127.0.0.1/x").await,
        Code::InvalidArgument,
        "url",
    );
    assert_refused(
        set(&mut sinks, NAMESPACE, "").await,
        Code::InvalidArgument,
        "url",
    );
    assert_refused(
        set(&mut sinks, NAMESPACE, "http://127.0.0.1/x#yaml").await,
        Code::InvalidArgument,
        "url",
    );
    assert_refused(
        set(&mut sinks, "bad\nnamespace", &good).await,
        Code::InvalidArgument,
        "namespace",
    );
    // Outside `--sink-allow` (loopback only by default).
    assert_refused(
        set(&mut sinks, NAMESPACE, "http://10.1.2.3:8080/x").await,
        Code::FailedPrecondition,
        "--sink-allow",
    );
    assert_refused(
        set(&mut sinks, "elsewhere", "http://10.1.2.3:8080/x").await,
        Code::FailedPrecondition,
        "--sink-allow",
    );
    assert_eq!(
        get(&mut sinks, NAMESPACE).await.expect("still set").url,
        good
    );
    assert_eq!(
        get(&mut sinks, "elsewhere").await.unwrap_err().code(),
        Code::NotFound
    );
    let listed = status(&mut sinks, None).await.expect("status");
    assert_eq!(listed.sinks.len(), 1, "{listed:?}");
    let both = sinks
        .sink_status(SinkStatusRequest {
            namespace: NAMESPACE.into(),
            all: true,
        })
        .await
        .unwrap_err();
    assert_eq!(both.code(), Code::InvalidArgument);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_of_the_flag_is_not_changed_through_the_api() {
    let sink = HttpSink::start(always(200)).await;
    let other = HttpSink::start(always(200)).await;
    let flag = sink.url("/flag");
    let server = TestServer::start_with(config(|config| {
        config.sinks = vec![format!("{NAMESPACE}={flag}").parse().expect("a valid sink")];
    }))
    .await;
    let mut sinks = sinks_client(server.addr);
    assert_refused(
        set(&mut sinks, NAMESPACE, &other.url("/")).await,
        Code::FailedPrecondition,
        "--sink",
    );
    let refused = remove(&mut sinks, NAMESPACE).await.unwrap_err();
    assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
    assert!(refused.message().contains("--sink"), "{refused:?}");
    let kept = get(&mut sinks, NAMESPACE).await.expect("the flag's sink");
    assert_eq!(
        (kept.url.as_str(), kept.origin),
        (flag.as_str(), SinkOrigin::Flag as i32)
    );
    let kept = sinks
        .list_sinks(ListSinksRequest {})
        .await
        .expect("list")
        .into_inner()
        .sinks;
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(
        (kept[0].url.as_str(), kept[0].origin),
        (flag.as_str(), SinkOrigin::Flag as i32)
    );
    let listed = status(&mut sinks, None).await.expect("status");
    assert_eq!(listed.sinks.len(), 1);
    assert_eq!(
        listed.sinks[0].sink.as_ref().unwrap().origin,
        SinkOrigin::Flag as i32
    );
    // And it still pushes to the flag's sink.
    let mut timers = server.client().await;
    let id = fire_one(&mut timers, NAMESPACE).await;
    sink.wait_for("the expiration", |pushes| pushed(pushes, &id))
        .await;
    assert!(other.pushes().is_empty());
    server.stop().await;
}

/// Whether replica `id`'s status shows [`NAMESPACE`]'s sink (`shown`) or, with None, none.
async fn replica_shows(set: &ReplicaSet, id: &str, shown: Option<&str>) -> Result<(), String> {
    let mut sinks = sinks_client(set.daemon(id).addr);
    let listed = status(&mut sinks, None)
        .await
        .map_err(|status| status.to_string())?;
    let urls: Vec<&str> = listed
        .sinks
        .iter()
        .filter_map(|state| state.sink.as_ref())
        .filter(|sink| sink.namespace == NAMESPACE)
        .map(|sink| sink.url.as_str())
        .collect();
    match (shown, urls.as_slice()) {
        (Some(shown), [url]) if *url == shown => Ok(()),
        (None, []) => Ok(()),
        _ => Err(format!("{id} shows {urls:?}")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_follow_a_sink_set_through_one_and_removed_through_the_other() {
    if skip_postgres("replicas_follow_a_sink_set_through_one_and_removed_through_the_other") {
        return;
    }
    const IDS: [&str; 2] = ["a", "b"];
    let sink = HttpSink::start(always(200)).await;
    let set_of = ReplicaSet::start(&IDS, &[]).await;
    set_of
        .eventually("both replicas own partitions", || {
            set_of.each_owns_a_partition(&IDS)
        })
        .await;
    let url = url_with_credentials(&sink);
    let shown = format!("http://***@{}/timers", sink.addr);
    set(&mut sinks_client(set_of.daemon("a").addr), NAMESPACE, &url)
        .await
        .expect("set through a");
    // b reads it from the database: its get at once, its pusher within a poll.
    let through_b = get(&mut sinks_client(set_of.daemon("b").addr), NAMESPACE)
        .await
        .expect("b's get");
    assert_eq!(through_b.url, shown);
    // And lists it, from the database, credentials masked.
    let listed = sinks_client(set_of.daemon("b").addr)
        .list_sinks(ListSinksRequest {})
        .await
        .expect("b's list")
        .into_inner()
        .sinks;
    assert_eq!(
        listed
            .iter()
            .map(|sink| (sink.namespace.as_str(), sink.url.as_str(), sink.origin))
            .collect::<Vec<_>>(),
        [(NAMESPACE, shown.as_str(), SinkOrigin::Api as i32)]
    );
    set_of
        .eventually("b runs the sink set through a", || {
            replica_shows(&set_of, "b", Some(&shown))
        })
        .await;
    // Timers on both replicas' partitions: every one is pushed.
    let mut ids = Vec::new();
    for index in 0..20 {
        let replica = IDS[index % 2];
        ids.push(fire_one(&mut set_of.client(replica), NAMESPACE).await);
    }
    sink.wait_for("every expiration", |pushes| {
        ids.iter().all(|id| pushed(pushes, id))
    })
    .await;

    remove(&mut sinks_client(set_of.daemon("b").addr), NAMESPACE)
        .await
        .expect("remove through b");
    set_of
        .eventually("a stops the sink removed through b", || {
            replica_shows(&set_of, "a", None)
        })
        .await;
    // Nobody pushes it now: the expiration waits for a subscriber, on either replica.
    let mut client = set_of.client("a");
    let mut stream = subscribe(&mut client, NAMESPACE, 0, 10).await;
    let later = fire_one(&mut set_of.client("b"), NAMESPACE).await;
    let received = within(next_expiration(&mut stream)).await;
    assert_eq!(timer_id(&received), later);
    assert!(!pushed(&sink.pushes(), &later), "pushed after its removal");
}

fn with_token<T>(message: T, token: &str) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.metadata_mut().insert(
        "authorization",
        format!("Bearer {token}").parse().expect("ascii token"),
    );
    request
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_manages_the_sinks_of_its_namespaces_only() {
    let sink = HttpSink::start(always(200)).await;
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "admin-secret *\nteam-a-secret a\n").unwrap();
    let server = TestServer::start_with(config(|c| c.auth_token_file = Some(tokens))).await;
    let mut sinks = sinks_client(server.addr);
    let set_as = |namespace: &str, token: &str| {
        with_token(
            SetSinkRequest {
                namespace: namespace.into(),
                url: sink.url("/"),
                ..Default::default()
            },
            token,
        )
    };
    sinks
        .set_sink(set_as("a", "team-a-secret"))
        .await
        .expect("its own namespace");
    let denied = sinks
        .set_sink(set_as("b", "team-a-secret"))
        .await
        .unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied, "{denied:?}");
    sinks
        .set_sink(set_as("b", "admin-secret"))
        .await
        .expect("the admin's");
    let denied = sinks
        .remove_sink(with_token(
            RemoveSinkRequest {
                namespace: "b".into(),
            },
            "team-a-secret",
        ))
        .await
        .unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied, "{denied:?}");
    let unauthenticated = sinks
        .get_sink(GetSinkRequest {
            namespace: "a".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(unauthenticated.code(), Code::Unauthenticated);
    // `all` lists what the token allows.
    let listed = |token: &'static str| {
        let mut sinks = sinks.clone();
        async move {
            let mut namespaces: Vec<String> = sinks
                .sink_status(with_token(
                    SinkStatusRequest {
                        namespace: String::new(),
                        all: true,
                    },
                    token,
                ))
                .await
                .expect("status")
                .into_inner()
                .sinks
                .into_iter()
                .map(|state| state.sink.unwrap().namespace)
                .collect();
            namespaces.sort();
            namespaces
        }
    };
    assert_eq!(listed("team-a-secret").await, ["a"]);
    assert_eq!(listed("admin-secret").await, ["a", "b"]);
    // ListSinks likewise.
    let kept = |token: &'static str| {
        let mut sinks = sinks.clone();
        async move {
            let answer = sinks
                .list_sinks(with_token(ListSinksRequest {}, token))
                .await
                .expect("list");
            let kept = answer.into_inner().sinks.into_iter();
            kept.map(|sink| sink.namespace).collect::<Vec<_>>()
        }
    };
    assert_eq!(kept("team-a-secret").await, ["a"]);
    assert_eq!(kept("admin-secret").await, ["a", "b"]);
    server.stop().await;
}
