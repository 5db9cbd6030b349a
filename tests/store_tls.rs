//! Replicated mode over TLS to PostgreSQL: a real server with `ssl=on` and a certificate
//! for `localhost` only, from a CA made for the test, and each libpq `sslmode` held to
//! its meaning (see `src/cluster/tls.rs`):
//!
//! - `verify-full` with the right CA: a replica starts, joins and fires a timer, on a
//!   server that refuses plaintext; with another CA it is refused, naming the failed
//!   verification, and the replica exits instead of serving;
//! - a host name the certificate does not list (`127.0.0.1`) is refused under
//!   `verify-full` and accepted under `verify-ca`;
//! - `require` encrypts without a CA, and checks the chain when given one; `disable` is
//!   refused by a server whose `pg_hba.conf` has `hostssl` lines only; the CA may also be
//!   given as `sslrootcert=` in the URL; `prefer` falls back to plaintext only where the
//!   server offers no TLS;
//! - the password in `TICKD_STORE` shows neither in `--help` nor in a replica's log.
//!
//! Waits poll for the awaited event with a generous deadline; nothing here depends on how
//! fast the machine is.

mod common;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::daemon::{tickd_command, Daemon};
use common::pki::TestCa;
use common::postgres::{Postgres, ServerTls};
use common::tooling::skip_postgres;
use common::wait;
use common::*;
use tempfile::TempDir;
use tickd::cluster::Database;
use tickd::proto::timers_client::TimersClient;
use tonic::transport::{Channel, Endpoint};

/// In every URL below. The server trusts its clients and never asks for it: it is there
/// only to be kept out of sight.
const PASSWORD: &str = "secretpw";
const NAMESPACE: &str = "tls";
/// How long any awaited event may take before the test gives up.
const PATIENCE: Duration = Duration::from_secs(60);
/// How often an awaited condition is checked again.
const POLL: Duration = Duration::from_millis(50);

// ---------------------------------------------------------------- the tests

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verification_follows_the_sslmode() {
    if skip_postgres("verification_follows_the_sslmode") {
        return;
    }
    let fixture = Fixture::start(false).await;
    let (right, wrong) = (Some(fixture.ca_file()), Some(fixture.wrong_ca_file()));

    let cases = [
        ("localhost", "verify-full", right.as_deref(), Ok(true)),
        (
            "localhost",
            "verify-full",
            wrong.as_deref(),
            Err("UnknownIssuer"),
        ),
        (
            "localhost",
            "verify-ca",
            wrong.as_deref(),
            Err("UnknownIssuer"),
        ),
        (
            "127.0.0.1",
            "verify-full",
            right.as_deref(),
            Err("not valid for name"),
        ),
        ("127.0.0.1", "verify-ca", right.as_deref(), Ok(true)),
        ("127.0.0.1", "require", None, Ok(true)),
        (
            "localhost",
            "require",
            wrong.as_deref(),
            Err("UnknownIssuer"),
        ),
        ("127.0.0.1", "prefer", None, Ok(true)),
        ("127.0.0.1", "disable", None, Ok(false)),
    ];
    for (host, mode, ca, expected) in cases {
        let outcome = try_connect(&fixture.url(host, mode), ca).await;
        let what = format!("sslmode={mode} to {host} with CA {ca:?}");
        match (expected, &outcome) {
            (Ok(encrypted), Ok(actual)) => assert_eq!(*actual, encrypted, "{what}: encrypted?"),
            (Err(reason), Err(error)) => {
                assert!(
                    error.contains("error performing TLS handshake: invalid peer certificate")
                        && error.contains(reason)
                        && error.contains(&format!("(sslmode={mode})")),
                    "{what}: refused for the wrong reason: {error}"
                );
                assert!(!error.contains(PASSWORD), "{what}: {error}");
            }
            _ => panic!("{what}: expected {expected:?}, got {outcome:?}"),
        }
    }
    // The CA may come with the URL instead, as libpq's sslrootcert.
    let in_url = format!(
        "{}&sslrootcert={}",
        fixture.url("localhost", "verify-full"),
        fixture.ca_file().display()
    );
    assert_eq!(try_connect(&in_url, None).await, Ok(true));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plaintext_is_refused_where_the_server_requires_tls() {
    if skip_postgres("plaintext_is_refused_where_the_server_requires_tls") {
        return;
    }
    let fixture = Fixture::start(true).await;
    let refused = try_connect(&fixture.url("127.0.0.1", "disable"), None)
        .await
        .expect_err("plaintext to a hostssl-only server");
    assert!(
        refused.contains("no pg_hba.conf entry") && refused.contains("no encryption"),
        "{refused}"
    );
    assert!(!refused.contains(PASSWORD), "{refused}");
    let required = try_connect(&fixture.url("127.0.0.1", "require"), None).await;
    assert_eq!(required, Ok(true));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefer_falls_back_to_plaintext_where_the_server_has_no_tls() {
    if skip_postgres("prefer_falls_back_to_plaintext_where_the_server_has_no_tls") {
        return;
    }
    let postgres = Postgres::start().await;
    let url = |mode: &str| {
        let port = postgres.port();
        format!("postgres://postgres:{PASSWORD}@127.0.0.1:{port}/postgres?sslmode={mode}")
    };
    assert_eq!(try_connect(&url("prefer"), None).await, Ok(false));
    let refused = try_connect(&url("require"), None)
        .await
        .expect_err("require from a server without TLS");
    assert!(
        refused.contains("(sslmode=require)") && refused.contains("server does not support TLS"),
        "{refused}"
    );
}

/// The whole replica over `verify-full`, on a server that accepts TLS only, so every
/// connection it opens (API calls, listener, leases, firing, delivery) must have used it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_starts_only_with_a_database_it_can_verify() {
    if skip_postgres("a_replica_starts_only_with_a_database_it_can_verify") {
        return;
    }
    let fixture = Fixture::start(true).await;
    let url = fixture.url("localhost", "verify-full");

    let refused = fixture.replica(&url, &fixture.wrong_ca_file());
    let (status, log) = tokio::task::spawn_blocking(move || Daemon::refused(refused, PATIENCE))
        .await
        .expect("wait for exit");
    assert!(!status.success(), "{status}");
    assert!(
        log.contains("tickd failed")
            && log.contains("(sslmode=verify-full)")
            && log.contains("invalid peer certificate: UnknownIssuer"),
        "the failed start does not say why:\n{log}"
    );
    assert!(!log.contains(PASSWORD), "{log}");

    let replica = Daemon::start(fixture.replica(&url, &fixture.ca_file()));
    let mut client = client_for(&replica);
    eventually(&replica, "the replica answers calls", || {
        answers_calls(client.clone(), NAMESPACE)
    })
    .await;
    let timer = register(&mut client, spec(NAMESPACE, 100, b"over tls")).await;
    let mut stream = subscribe(&mut client, NAMESPACE, 30_000, 10).await;
    let expiration = tokio::time::timeout(PATIENCE, next_expiration(&mut stream))
        .await
        .unwrap_or_else(|_| panic!("no expiration; log:\n{}", replica.log_text()));
    let fired = expiration.timer.expect("the fired timer");
    assert_eq!(fired.id, timer.id);
    assert_eq!(&fired.payload[..], b"over tls");
    ack(&mut client, NAMESPACE, vec![expiration.delivery_id]).await;

    let replicas = fixture
        .postgres
        .query("SELECT replica FROM tickd_replicas")
        .await;
    let ids: Vec<String> = replicas.iter().map(|row| row.get(0)).collect();
    assert_eq!(ids, ["tls-replica"]);
    let joined = replica.lines_with(&["replica joined the cluster"]);
    assert!(
        joined.len() == 1
            && joined[0].contains("store_tls=on")
            && joined[0].contains("(sslmode=verify-full)"),
        "{joined:?}"
    );
    assert!(
        !replica.log_text().contains(PASSWORD),
        "{}",
        replica.log_text()
    );
}

#[test]
fn help_does_not_show_the_store_password() {
    let store = format!("postgres://tickd:{PASSWORD}@db.example:5432/tickd");
    let output = Command::new(env!("CARGO_BIN_EXE_tickd"))
        .arg("--help")
        .env("TICKD_STORE", &store)
        .env("TICKD_STORE_CA_FILE", "/etc/tickd/store-ca.pem")
        .output()
        .expect("run tickd --help");
    assert!(output.status.success(), "{output:?}");
    let help = String::from_utf8_lossy(&output.stdout);
    assert!(
        help.contains("TICKD_STORE") && help.contains("--store-ca-file"),
        "{help}"
    );
    assert!(
        !help.contains(PASSWORD),
        "--help shows the password:\n{help}"
    );
}

// ---------------------------------------------------------------- the fixture

/// A TLS-serving PostgreSQL with a certificate for `localhost` from `ca`, and the PEM files
/// of `ca` and of another CA that signed nothing here.
struct Fixture {
    postgres: Postgres,
    files: TempDir,
    /// Working directory of the replicas, so nothing they write lands in the source tree.
    work_dir: TempDir,
}

impl Fixture {
    async fn start(tls_only: bool) -> Fixture {
        let ca = TestCa::new("store");
        let postgres =
            Postgres::start_tls(ServerTls::signed_by(&ca, &["localhost"], tls_only)).await;
        let files = tempfile::tempdir().expect("temp dir");
        std::fs::write(files.path().join("ca.pem"), &ca.pem).expect("write ca.pem");
        let wrong = TestCa::new("another");
        std::fs::write(files.path().join("wrong-ca.pem"), &wrong.pem).expect("write wrong CA");
        Fixture {
            postgres,
            files,
            work_dir: tempfile::tempdir().expect("temp dir"),
        }
    }

    fn ca_file(&self) -> PathBuf {
        self.files.path().join("ca.pem")
    }

    fn wrong_ca_file(&self) -> PathBuf {
        self.files.path().join("wrong-ca.pem")
    }

    fn url(&self, host: &str, sslmode: &str) -> String {
        format!(
            "postgres://postgres:{PASSWORD}@{host}:{}/postgres?sslmode={sslmode}",
            self.postgres.port()
        )
    }

    /// One replica on `store` (given by TICKD_STORE, as from a Secret) with `ca_file`.
    fn replica(&self, store: &str, ca_file: &Path) -> Command {
        let mut command = tickd_command();
        command
            .args([
                "--metrics-listen",
                "127.0.0.1:0",
                "--replica-id",
                "tls-replica",
            ])
            .args(["--lease-ttl", "2s", "--load-horizon", "5s"])
            .arg("--store-ca-file")
            .arg(ca_file)
            .env("TICKD_STORE", store)
            .current_dir(self.work_dir.path());
        command
    }
}

/// Connects as a replica does: whether the connection is encrypted, or why it failed.
async fn try_connect(url: &str, ca_file: Option<&Path>) -> Result<bool, String> {
    let database = Database::new(url, ca_file).map_err(|error| error.to_string())?;
    let client = database
        .connect()
        .await
        .map_err(|error| error.to_string())?;
    Ok(Database::encrypted(&client)
        .await
        .expect("PostgreSQL has pg_stat_ssl"))
}

fn client_for(daemon: &Daemon) -> TimersClient<Channel> {
    let endpoint = Endpoint::from_shared(format!("http://{}", daemon.addr))
        .expect("endpoint")
        .connect_timeout(Duration::from_secs(1))
        .timeout(Duration::from_secs(5));
    TimersClient::new(endpoint.connect_lazy())
}

/// Checks `condition` every [`POLL`] until it holds; after [`PATIENCE`], panics with its
/// last explanation and the replica's log.
async fn eventually<F, Fut>(daemon: &Daemon, what: &str, condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    let log = || async { format!("log:\n{}", daemon.log_text()) };
    wait::eventually(what, PATIENCE, POLL, condition, log).await
}
