//! The `--sink-allow` list's tests: the loopback default, IP, CIDR and host-name entries,
//! and the refusals that name the flag.

use super::*;

fn allow_list(entries: &[&str]) -> SinkAllow {
    let entries: Vec<String> = entries.iter().map(|entry| entry.to_string()).collect();
    SinkAllow::parse(&entries).expect("a valid allow list")
}

fn parse_error(entry: &str) -> String {
    SinkAllow::parse(&[entry.to_owned()]).expect_err("a malformed entry")
}

#[tokio::test]
async fn loopback_is_the_default_and_nothing_else() {
    let allow = allow_list(&[]);
    for host in ["127.0.0.1", "127.5.5.5", "::1", "[::1]", "::ffff:127.0.0.1"] {
        let addresses = allow
            .allowed_addresses(host, 8080)
            .await
            .unwrap_or_else(|refusal| panic!("{host}: {refusal}"));
        assert_eq!(addresses.len(), 1, "{host}");
        assert!(addresses[0].ip().to_canonical().is_loopback(), "{host}");
        assert_eq!(addresses[0].port(), 8080);
    }
    for host in ["10.1.2.3", "128.0.0.1", "::2", "0.0.0.0"] {
        match allow.allowed_addresses(host, 8080).await {
            Err(refusal @ SinkRefused::NotAllowed { .. }) => {
                let message = refusal.to_string();
                assert!(message.contains(host), "{message}");
                assert!(message.contains("--sink-allow"), "{message}");
                assert!(message.contains("loopback, the default"), "{message}");
                assert!(!refusal.is_retryable());
            }
            other => panic!("{host} should be refused, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn localhost_resolves_to_loopback_and_is_allowed_by_default() {
    let addresses = allow_list(&[])
        .allowed_addresses("localhost", 9000)
        .await
        .expect("localhost is loopback");
    assert!(!addresses.is_empty());
    for address in addresses {
        assert!(address.ip().is_loopback(), "{address}");
        assert_eq!(address.port(), 9000);
    }
}

#[tokio::test]
async fn an_ip_entry_allows_exactly_that_ip() {
    let allow = allow_list(&["10.1.2.3"]);
    let addresses = allow
        .allowed_addresses("10.1.2.3", 80)
        .await
        .expect("the listed address");
    assert_eq!(addresses, vec![SocketAddr::from(([10, 1, 2, 3], 80))]);
    for neighbour in ["10.1.2.2", "10.1.2.4", "127.0.0.1"] {
        assert!(
            matches!(
                allow.allowed_addresses(neighbour, 80).await,
                Err(SinkRefused::NotAllowed { .. })
            ),
            "{neighbour}"
        );
    }
}

#[tokio::test]
async fn a_host_name_entry_allows_the_addresses_it_resolves_to() {
    let without_name = allow_list(&["10.0.0.0/8"]);
    assert!(without_name.allowed_addresses("10.1.2.3", 80).await.is_ok());
    assert!(matches!(
        without_name.allowed_addresses("127.0.0.1", 80).await,
        Err(SinkRefused::NotAllowed { .. })
    ));
    let with_name = allow_list(&["10.0.0.0/8", "LocalHost."]);
    assert_eq!(with_name.host_names, vec!["localhost".to_owned()]);
    let addresses = with_name
        .allowed_addresses("127.0.0.1", 80)
        .await
        .expect("localhost resolves to 127.0.0.1");
    assert_eq!(addresses, vec![SocketAddr::from(([127, 0, 0, 1], 80))]);
    // The name allows its addresses, not its network: 127.0.0.2 is not localhost.
    assert!(matches!(
        with_name.allowed_addresses("127.0.0.2", 80).await,
        Err(SinkRefused::NotAllowed { .. })
    ));
}

#[tokio::test]
async fn a_lookup_failure_is_retryable_and_not_a_refusal() {
    // `.invalid` never resolves (RFC 6761).
    let refusal = allow_list(&[])
        .allowed_addresses("no-such-sink.invalid", 80)
        .await
        .expect_err("an unresolvable host");
    assert!(
        matches!(&refusal, SinkRefused::LookupFailed { host, .. } if host == "no-such-sink.invalid"),
        "{refusal:?}"
    );
    assert!(refusal.is_retryable());

    // An entry that does not resolve leaves the answer unknown, not "never".
    let refusal = allow_list(&["no-such-entry.invalid"])
        .allowed_addresses("127.0.0.1", 80)
        .await
        .expect_err("nothing allows 127.0.0.1 for sure");
    assert!(refusal.is_retryable(), "{refusal:?}");
    assert!(
        refusal.to_string().contains("no-such-entry.invalid"),
        "{refusal}"
    );
}

#[test]
fn malformed_entries_name_the_flag_and_quote_the_entry() {
    assert_eq!(
        parse_error("10.0.0.0/33"),
        r#"--sink-allow "10.0.0.0/33": a prefix length is at most 32 for IPv4"#
    );
    assert_eq!(
        parse_error("fd00::/129"),
        r#"--sink-allow "fd00::/129": a prefix length is at most 128 for IPv6"#
    );
    let malformed = [
        "",
        "10.0.0.0/",
        "10.0.0.0/x",
        "10.0.0.0/+8",
        "10.0.0.0/99999999999",
        "10.1.2.3/8",
        "hooks/8",
        "10.0.0.256",
        "10.1",
        "fd00::zz",
        "[::1]",
        "not a host!",
        "hooks_internal",
        "-hooks.internal",
        "hooks..internal",
        ".hooks",
    ];
    for entry in malformed {
        let message = parse_error(entry);
        assert!(
            message.starts_with(&format!("--sink-allow {entry:?}: ")),
            "{message}"
        );
    }
    assert!(parse_error("10.1.2.3/8").contains("10.0.0.0/8"));
    // One bad entry spoils the list, wherever it is.
    let entries = ["10.0.0.0/8".to_owned(), "bad entry".to_owned()];
    assert!(SinkAllow::parse(&entries).is_err());
}

#[test]
fn host_names_are_case_insensitive_and_listed_once() {
    let allow = allow_list(&["Hooks.Internal", "hooks.internal.", "a-1.b2"]);
    assert_eq!(allow.host_names, vec!["hooks.internal", "a-1.b2"]);
    assert!(allow.networks.is_empty());
    assert_eq!(allow.to_string(), "hooks.internal, a-1.b2");
}
