//! `--sink-allow`: the addresses a sink may connect to, judged on resolved addresses.
//!
//! A sink's URL names a host, and a host name can resolve to anything: a name that pointed
//! at a webhook yesterday can point at the cloud metadata address (169.254.169.254) or an
//! internal database today. So the list is checked not against the URL but against every
//! address the host resolves to, at each connection, and the connector dials only the
//! addresses that pass ([`super::connect`]).
//!
//! Entries are IP addresses (`10.1.2.3`, `fd00::1`), networks in CIDR notation
//! (`10.0.0.0/8`, `fd00::/8`) or host names (`hooks.internal`). A host name allows the
//! addresses it resolves to at the moment of the connection, looked up again each time,
//! so that the entry follows its service when it moves. With no entries only loopback is
//! allowed (127.0.0.0/8 and ::1): a sidecar in the same pod, and nothing else. Entries
//! replace that default rather than add to it, so that an operator who lists networks
//! lists everything a sink may reach.
//!
//! An IPv4 address written as IPv6 (`::ffff:10.1.2.3`) is judged as the IPv4 address it
//! reaches, by the IPv4 entries ([`network`] matches IP and CIDR entries).

mod network;

use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use network::AllowedNetwork;

/// The flag every message names, so that an operator knows what to change.
const FLAG: &str = "--sink-allow";

/// The forms an entry may take, for the messages that refuse one.
const ENTRY_FORMS: &str = "an entry is an IP address (10.1.2.3, fd00::1), a CIDR \
    (10.0.0.0/8, fd00::/8) or a host name (letters, digits, '-' and '.')";

/// The parsed `--sink-allow` list; the connector shares one in an `Arc`.
#[derive(Clone, Debug)]
pub(crate) struct SinkAllow {
    /// The IP and CIDR entries; an IP entry is a network of one address.
    networks: Vec<AllowedNetwork>,
    /// The host-name entries, lower-cased and without a trailing dot, resolved again at
    /// each connection.
    host_names: Vec<String>,
    /// No entry was given, so `networks` is loopback. Refusals say so, since an operator
    /// who never set the flag may not know that it exists.
    loopback_default: bool,
}

impl SinkAllow {
    /// Parses the flag's entries; none means loopback only. An error names the flag and
    /// quotes the entry: `--sink-allow "10.0.0.0/33": a prefix length is at most 32 for IPv4`.
    pub(crate) fn parse(entries: &[String]) -> Result<SinkAllow, String> {
        if entries.is_empty() {
            return Ok(Self::loopback_only());
        }
        let mut networks = Vec::new();
        let mut host_names = Vec::new();
        for entry in entries {
            match parse_entry(entry).map_err(|reason| format!("{FLAG} {entry:?}: {reason}"))? {
                AllowEntry::Network(network) => networks.push(network),
                AllowEntry::HostName(name) => {
                    // Each name listed once is looked up once per connection.
                    if !host_names.contains(&name) {
                        host_names.push(name);
                    }
                }
            }
        }
        Ok(SinkAllow {
            networks,
            host_names,
            loopback_default: false,
        })
    }

    fn loopback_only() -> SinkAllow {
        SinkAllow {
            networks: vec![
                AllowedNetwork::V4 {
                    network: u32::from(Ipv4Addr::new(127, 0, 0, 0)),
                    prefix_length: 8,
                },
                AllowedNetwork::V6 {
                    network: u128::from(Ipv6Addr::LOCALHOST),
                    prefix_length: 128,
                },
            ],
            host_names: Vec::new(),
            loopback_default: true,
        }
    }

    /// The addresses of `host` that a connection may go to, in the resolver's order (the
    /// order to try them in). `host` is a name, looked up now, or an IP literal, taken as
    /// is (with or without the brackets a URL puts around IPv6). An address passes if an
    /// IP or CIDR entry holds it, or if a host-name entry resolves to it now.
    ///
    /// Refused with [`SinkRefused::NotAllowed`] when no address passes, and with
    /// [`SinkRefused::LookupFailed`] when `host` does not resolve, or when nothing passed
    /// and a host-name entry that might have allowed it did not resolve.
    pub(crate) async fn allowed_addresses(
        &self,
        host: &str,
        port: u16,
    ) -> Result<Vec<SocketAddr>, SinkRefused> {
        let resolved = resolve_sink_host(host, port).await?;
        let mut addresses_of_allowed_names: Vec<IpAddr> = Vec::new();
        let mut failed_name_lookup = None;
        for name in &self.host_names {
            // Names are looked up only while some address is still undecided: a sink on
            // an allowed network costs no lookups beyond its own.
            let every_address_allowed = resolved
                .iter()
                .all(|address| self.allows(address.ip(), &addresses_of_allowed_names));
            if every_address_allowed {
                break;
            }
            match tokio::net::lookup_host((name.as_str(), 0)).await {
                Ok(found) => {
                    addresses_of_allowed_names
                        .extend(found.map(|address| address.ip().to_canonical()));
                }
                Err(error) => {
                    failed_name_lookup = Some(io::Error::new(
                        error.kind(),
                        format!(
                            "the {FLAG} entry {name:?} did not resolve ({error}), so whether \
                             {host} may be reached is unknown"
                        ),
                    ));
                }
            }
        }
        let allowed: Vec<SocketAddr> = resolved
            .iter()
            .copied()
            .filter(|address| self.allows(address.ip(), &addresses_of_allowed_names))
            .collect();
        if !allowed.is_empty() {
            return Ok(allowed);
        }
        // Nothing passed; if an entry could not be looked up, the answer is "not known
        // yet" rather than "never", and the caller retries instead of giving up.
        if let Some(source) = failed_name_lookup {
            return Err(SinkRefused::LookupFailed {
                host: host.to_owned(),
                source,
            });
        }
        Err(SinkRefused::NotAllowed {
            host: host.to_owned(),
            resolved: resolved.iter().map(SocketAddr::ip).collect(),
            allowed: self.to_string(),
        })
    }

    /// Whether an IP or CIDR entry holds `address`, or it is one of the addresses the
    /// host-name entries resolved to (already in canonical form).
    fn allows(&self, address: IpAddr, addresses_of_allowed_names: &[IpAddr]) -> bool {
        let address = address.to_canonical();
        self.networks
            .iter()
            .any(|network| network.contains(address))
            || addresses_of_allowed_names.contains(&address)
    }
}

/// The entries as a refusal shows them: `10.0.0.0/8, 10.1.2.3, hooks.internal`.
impl fmt::Display for SinkAllow {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        let entries: Vec<String> = self
            .networks
            .iter()
            .map(ToString::to_string)
            .chain(self.host_names.iter().cloned())
            .collect();
        formatter.write_str(&entries.join(", "))?;
        if self.loopback_default {
            formatter.write_str(" (loopback, the default when no entry is given)")?;
        }
        Ok(())
    }
}

/// Why a sink may not connect now. [`Self::NotAllowed`] is the configuration's answer:
/// it stands until `--sink-allow`, the sink's URL or its host's DNS changes, so a sink
/// being configured is refused. [`Self::LookupFailed`] is the resolver's, worth retrying.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SinkRefused {
    #[error("{}", not_allowed_message(.host, .resolved, .allowed))]
    NotAllowed {
        /// The host as the sink's URL gives it.
        host: String,
        /// Every address it resolved to, none of them allowed.
        resolved: Vec<IpAddr>,
        /// The allow list as [`SinkAllow`]'s `Display` shows it.
        allowed: String,
    },
    #[error("a lookup failed for the sink host {host}: {source}")]
    LookupFailed {
        /// The host as the sink's URL gives it.
        host: String,
        /// The failed lookup: of `host` itself, or of a host-name entry that might have
        /// allowed it (the message says which).
        #[source]
        source: io::Error,
    },
}

impl SinkRefused {
    /// True for a failed lookup, which may succeed later; false for a refusal by the list.
    pub(crate) fn is_retryable(&self) -> bool {
        matches!(self, SinkRefused::LookupFailed { .. })
    }
}

fn not_allowed_message(host: &str, resolved: &[IpAddr], allowed: &str) -> String {
    let addresses: Vec<String> = resolved.iter().map(ToString::to_string).collect();
    let addresses = addresses.join(", ");
    let destination = if addresses == host.trim_start_matches('[').trim_end_matches(']') {
        format!("the sink address {addresses} is not allowed by {FLAG}")
    } else {
        format!("the sink host {host} resolved to {addresses}, none of which {FLAG} allows")
    };
    format!(
        "{destination}; it allows {allowed}. Add the address, a network holding it or a host \
         name resolving to it to {FLAG}"
    )
}

/// The addresses `host` names: itself if it is an IP literal, else what it resolves to
/// now, without repeats, in the resolver's order.
async fn resolve_sink_host(host: &str, port: u16) -> Result<Vec<SocketAddr>, SinkRefused> {
    // A URL writes an IPv6 address in brackets (`http://[::1]:8080/`), and
    // `Uri::host` keeps them.
    let unbracketed = host
        .strip_prefix('[')
        .and_then(|inner| inner.strip_suffix(']'))
        .unwrap_or(host);
    if let Ok(address) = unbracketed.parse::<IpAddr>() {
        return Ok(vec![SocketAddr::new(address, port)]);
    }
    let lookup_failed = |source| SinkRefused::LookupFailed {
        host: host.to_owned(),
        source,
    };
    let mut resolved = Vec::new();
    for address in tokio::net::lookup_host((unbracketed, port))
        .await
        .map_err(lookup_failed)?
    {
        if !resolved.contains(&address) {
            resolved.push(address);
        }
    }
    if resolved.is_empty() {
        return Err(lookup_failed(io::Error::new(
            io::ErrorKind::NotFound,
            "the lookup found no address",
        )));
    }
    Ok(resolved)
}

enum AllowEntry {
    Network(AllowedNetwork),
    HostName(String),
}

fn parse_entry(entry: &str) -> Result<AllowEntry, String> {
    if entry.is_empty() {
        return Err(format!("the entry is empty; {ENTRY_FORMS}"));
    }
    if let Some((address, prefix_length)) = entry.split_once('/') {
        let address: IpAddr = address
            .parse()
            .map_err(|_| format!("{address:?} before the '/' is not an IP address"))?;
        // All digits: `u32::from_str` would also take a sign (`/+8`).
        if prefix_length.is_empty() || !prefix_length.bytes().all(|byte| byte.is_ascii_digit()) {
            return Err(format!(
                "the prefix length {prefix_length:?} after the '/' is not a number"
            ));
        }
        let prefix_length: u32 = prefix_length
            .parse()
            .map_err(|_| format!("the prefix length {prefix_length} is too long"))?;
        return AllowedNetwork::from_cidr(address, prefix_length).map(AllowEntry::Network);
    }
    if let Ok(address) = entry.parse::<IpAddr>() {
        return Ok(AllowEntry::Network(AllowedNetwork::single(address)));
    }
    if entry.contains(':') {
        return Err(format!("not a valid IPv6 address; {ENTRY_FORMS}"));
    }
    parse_host_name(entry).map(AllowEntry::HostName)
}

/// A host name (RFC 1123): dot-separated labels of letters, digits and '-', not starting
/// or ending with '-'. Lower-cased, since DNS names are case-insensitive.
fn parse_host_name(entry: &str) -> Result<String, String> {
    // A fully-qualified name may end with a dot; it names the same host.
    let name = entry.strip_suffix('.').unwrap_or(entry);
    if let Some(character) = name
        .chars()
        .find(|character| !(character.is_ascii_alphanumeric() || matches!(character, '-' | '.')))
    {
        return Err(format!(
            "{character:?} cannot appear in a host name; {ENTRY_FORMS}"
        ));
    }
    if name.len() > 253 {
        return Err("a host name is at most 253 characters".to_owned());
    }
    for label in name.split('.') {
        if label.is_empty() {
            return Err(
                "a host name has no empty label (no leading dot, no two dots in a row)".to_owned(),
            );
        }
        if label.len() > 63 {
            return Err(format!("the label {label:?} is longer than 63 characters"));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(format!("the label {label:?} starts or ends with '-'"));
        }
    }
    // No top-level domain is numeric, so `10.0.0.256` or `10.1` is a mistyped IPv4
    // address, not a name to look up.
    if name
        .rsplit('.')
        .next()
        .is_some_and(|top_level| top_level.bytes().all(|byte| byte.is_ascii_digit()))
    {
        return Err(format!("not a valid IPv4 address; {ENTRY_FORMS}"));
    }
    Ok(name.to_ascii_lowercase())
}

#[cfg(test)]
mod tests;
