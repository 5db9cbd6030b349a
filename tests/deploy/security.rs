//! The security pieces of `deploy/`: the NetworkPolicies of the shared variants admit only
//! tickd's own ports, from chosen peers, and the example auth Secret is a token file tickd
//! starts with and enforces.

use std::collections::BTreeSet;
use std::time::Duration;

use clap::Parser;
use tickd::config::Config;
use tickd::proto::timers_client::TimersClient;
use tickd::proto::NewTimeoutRequest;
use tonic::{Code, Request};

use crate::common::daemon::{tickd_command, Daemon};
use crate::common::tooling::{must, repo, skip_polyglot};
use crate::common::{spec, within};
use crate::support::{ensure_venv, manifests_py, render, Facts};

/// One rule port of a NetworkPolicy selecting tickd: (port, protocol, peers), peers 0
/// meaning anyone.
type RulePort = (String, String, usize);

fn rule_ports(facts: &Facts, direction: &str) -> Vec<RulePort> {
    facts
        .all(&[direction])
        .into_iter()
        .map(|rest| {
            let peers = rest[3].parse().expect("peer count");
            (rest[1].clone(), rest[2].clone(), peers)
        })
        .collect()
}

#[test]
fn network_policies_admit_only_tickds_ports_from_chosen_peers() {
    if skip_polyglot("deploy") {
        return;
    }
    let bin = ensure_venv();
    let out = tempfile::tempdir().expect("temp dir");
    for overlay in ["standalone", "replicated"] {
        let rendered = render(
            &bin,
            &repo().join("deploy/overlays").join(overlay),
            out.path(),
        );
        let facts = Facts::from_manifests_py(&bin, &["policies".as_ref(), rendered.as_os_str()]);
        let selecting: Vec<&[String]> = facts
            .all(&["policy"])
            .into_iter()
            .filter(|rest| rest[1] == "tickd")
            .collect();
        assert!(
            !selecting.is_empty(),
            "{overlay}: no NetworkPolicy selects tickd's Pods"
        );
        // Once a policy of each type selects the Pods, whatever no rule admits is refused.
        for kind in ["Ingress", "Egress"] {
            assert!(
                selecting
                    .iter()
                    .any(|rest| rest[2..].iter().any(|t| t == kind)),
                "{overlay}: no policy of type {kind} selects tickd"
            );
        }

        // Ingress: exactly the ports tickd listens on (API, metrics, health if any), each
        // from named peers, never from anyone.
        let args = facts.all(&["arg"]).into_iter().map(|rest| rest.join("\t"));
        let config = Config::try_parse_from(std::iter::once("tickd".to_owned()).chain(args))
            .unwrap_or_else(|error| panic!("{overlay}: tickd's args: {error}"));
        let mut listening: BTreeSet<String> = [config.listen.port(), config.metrics_listen.port()]
            .iter()
            .map(u16::to_string)
            .collect();
        let ingress = rule_ports(&facts, "ingress");
        let admitted: BTreeSet<String> = ingress.iter().map(|(port, ..)| port.clone()).collect();
        if let Some(health) = config.health_listen {
            listening.insert(health.port().to_string());
        }
        assert_eq!(
            admitted, listening,
            "{overlay}: ingress admits ports {admitted:?}; tickd listens on {listening:?}"
        );
        for (port, protocol, peers) in &ingress {
            assert_eq!(protocol, "TCP", "{overlay}: ingress port {port}");
            assert!(*peers > 0, "{overlay}: ingress to {port} is open to anyone");
        }

        // Egress: nothing for a standalone tickd; the database and DNS for replicas.
        let egress: BTreeSet<(String, String)> = rule_ports(&facts, "egress")
            .into_iter()
            .map(|(port, protocol, _)| (port, protocol))
            .collect();
        let expected: BTreeSet<(String, String)> = match overlay {
            "standalone" => BTreeSet::new(),
            _ => [("5432", "TCP"), ("53", "UDP"), ("53", "TCP")]
                .iter()
                .map(|(port, protocol)| (port.to_string(), protocol.to_string()))
                .collect(),
        };
        assert_eq!(egress, expected, "{overlay}: egress");
    }
}

/// A `NewTimeout` in `namespace` with `token` (none: no authorization header).
async fn register_with(
    client: &mut TimersClient<tonic::transport::Channel>,
    namespace: &str,
    token: Option<&str>,
) -> Result<(), Code> {
    let mut request = Request::new(NewTimeoutRequest {
        timer: Some(spec(namespace, 3_600_000, b"deploy")),
    });
    if let Some(token) = token {
        let value = format!("Bearer {token}").parse().expect("ascii token");
        request.metadata_mut().insert("authorization", value);
    }
    client
        .new_timeout(request)
        .await
        .map(drop)
        .map_err(|status| status.code())
}

#[test]
fn the_example_auth_secret_is_a_token_file_tickd_enforces() {
    if skip_polyglot("deploy") {
        return;
    }
    let bin = ensure_venv();
    let mut read = manifests_py(&bin);
    read.arg("secret")
        .arg(repo().join("deploy/examples/secrets.yaml"))
        .args(["tickd-auth", "token"]);
    let content = String::from_utf8(must(read).stdout).expect("utf-8 token file");
    let dir = tempfile::tempdir().expect("temp dir");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, &content).expect("write token file");

    let mut command = tickd_command();
    command
        .arg("--sync=none")
        .arg("--auth-token-file")
        .arg(&token_file);
    // tickd must start with it: a malformed line stops it ("token line N: ...").
    let daemon = Daemon::start(command);

    // The grants, as the file's format has them (comments and blank lines aside).
    let grants: Vec<(String, String)> = content
        .lines()
        .map(|line| line.split('#').next().unwrap_or_default().trim())
        .filter(|line| !line.is_empty())
        .map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(fields.len(), 2, "not `<token> <namespaces>`: {line:?}");
            (fields[0].to_owned(), fields[1].to_owned())
        })
        .collect();
    assert!(!grants.is_empty(), "the example Secret grants nothing");
    run_calls(daemon.addr, &grants);
}

fn run_calls(addr: std::net::SocketAddr, grants: &[(String, String)]) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(async {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .expect("endpoint")
            .connect_timeout(Duration::from_secs(5))
            .connect()
            .await
            .expect("connect");
        let mut client = TimersClient::new(channel);
        let refused = within(register_with(&mut client, "orders", None)).await;
        assert_eq!(
            refused,
            Err(Code::Unauthenticated),
            "a call without a token"
        );
        for (token, namespaces) in grants {
            let allowed: Vec<&str> = namespaces.split(',').collect();
            let first = if allowed == ["*"] {
                "anything"
            } else {
                allowed[0]
            };
            let answer = within(register_with(&mut client, first, Some(token))).await;
            assert_eq!(answer, Ok(()), "{token} in {first}");
            if allowed != ["*"] {
                let outside = within(register_with(&mut client, "not-granted", Some(token))).await;
                assert_eq!(
                    outside,
                    Err(Code::PermissionDenied),
                    "{token} outside {namespaces}"
                );
            }
        }
    });
}
