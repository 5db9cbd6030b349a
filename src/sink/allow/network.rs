//! One IP or CIDR entry of `--sink-allow`, and whether it holds an address.
//!
//! A network is the top `prefix_length` bits of an address, compared under a mask: for
//! IPv4 in a `u32`, for IPv6 in a `u128`, the two families never matching each other.
//! An IPv4 address written as IPv6 (`::ffff:10.1.2.3`) reaches the IPv4 host, so it is
//! judged as that IPv4 address, by IPv4 networks only: `::/0` holds the IPv6 addresses,
//! not every IPv4 one through its mapped form. An entry written that way
//! (`::ffff:10.0.0.0/104`) is the IPv4 network it names (10.0.0.0/8).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A network as the top `prefix_length` bits of an address, the rest zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum AllowedNetwork {
    V4 { network: u32, prefix_length: u32 },
    V6 { network: u128, prefix_length: u32 },
}

impl AllowedNetwork {
    /// The network of one address (an IP entry).
    pub(super) fn single(address: IpAddr) -> AllowedNetwork {
        match address.to_canonical() {
            IpAddr::V4(address) => AllowedNetwork::V4 {
                network: u32::from(address),
                prefix_length: 32,
            },
            IpAddr::V6(address) => AllowedNetwork::V6 {
                network: u128::from(address),
                prefix_length: 128,
            },
        }
    }

    /// A CIDR entry. Bits set past the prefix are refused rather than cleared:
    /// `10.1.2.3/8` is more likely a mistyped `10.1.2.3/32` than a way to write 10.0.0.0/8.
    pub(super) fn from_cidr(address: IpAddr, prefix_length: u32) -> Result<AllowedNetwork, String> {
        let network = match address {
            IpAddr::V4(address) => {
                if prefix_length > 32 {
                    return Err("a prefix length is at most 32 for IPv4".to_owned());
                }
                AllowedNetwork::V4 {
                    network: u32::from(address),
                    prefix_length,
                }
            }
            IpAddr::V6(address) => {
                if prefix_length > 128 {
                    return Err("a prefix length is at most 128 for IPv6".to_owned());
                }
                AllowedNetwork::V6 {
                    network: u128::from(address),
                    prefix_length,
                }
            }
        };
        let cleared = network.with_host_bits_cleared();
        if cleared != network {
            return Err(format!(
                "{address} has bits set past its first {prefix_length}; the network is \
                 {cleared}, and a single address is written without a prefix length"
            ));
        }
        Ok(network.mapped_to_v4())
    }

    fn with_host_bits_cleared(self) -> AllowedNetwork {
        match self {
            AllowedNetwork::V4 {
                network,
                prefix_length,
            } => AllowedNetwork::V4 {
                network: network & v4_mask(prefix_length),
                prefix_length,
            },
            AllowedNetwork::V6 {
                network,
                prefix_length,
            } => AllowedNetwork::V6 {
                network: network & v6_mask(prefix_length),
                prefix_length,
            },
        }
    }

    /// A network inside `::ffff:0:0/96` (IPv4 written as IPv6) as the IPv4 network it
    /// is, since [`Self::contains`] judges such addresses as IPv4 (see the module's docs).
    fn mapped_to_v4(self) -> AllowedNetwork {
        const MAPPED_PREFIX: u128 = 0xffff << 32;
        match self {
            AllowedNetwork::V6 {
                network,
                prefix_length,
            } if prefix_length >= 96 && network & v6_mask(96) == MAPPED_PREFIX => {
                AllowedNetwork::V4 {
                    // The low 32 bits, which the mask keeps whole: no truncation.
                    network: (network & u128::from(u32::MAX)) as u32,
                    prefix_length: prefix_length - 96,
                }
            }
            other => other,
        }
    }

    /// Whether the network holds `address`, an IPv4 address written as IPv6 being taken
    /// as the IPv4 address it is.
    pub(super) fn contains(self, address: IpAddr) -> bool {
        match (self, address.to_canonical()) {
            (
                AllowedNetwork::V4 {
                    network,
                    prefix_length,
                },
                IpAddr::V4(address),
            ) => u32::from(address) & v4_mask(prefix_length) == network,
            (
                AllowedNetwork::V6 {
                    network,
                    prefix_length,
                },
                IpAddr::V6(address),
            ) => u128::from(address) & v6_mask(prefix_length) == network,
            _ => false,
        }
    }
}

/// `10.0.0.0/8`; a single address without its `/32` or `/128`.
impl fmt::Display for AllowedNetwork {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            AllowedNetwork::V4 {
                network,
                prefix_length: 32,
            } => write!(formatter, "{}", Ipv4Addr::from(network)),
            AllowedNetwork::V4 {
                network,
                prefix_length,
            } => write!(formatter, "{}/{prefix_length}", Ipv4Addr::from(network)),
            AllowedNetwork::V6 {
                network,
                prefix_length: 128,
            } => write!(formatter, "{}", Ipv6Addr::from(network)),
            AllowedNetwork::V6 {
                network,
                prefix_length,
            } => write!(formatter, "{}/{prefix_length}", Ipv6Addr::from(network)),
        }
    }
}

/// The top `prefix_length` bits set. A shift by the full width overflows, so a zero
/// prefix length (every address) is the zero mask by hand.
fn v4_mask(prefix_length: u32) -> u32 {
    u32::MAX.checked_shl(32 - prefix_length).unwrap_or(0)
}

fn v6_mask(prefix_length: u32) -> u128 {
    u128::MAX.checked_shl(128 - prefix_length).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `10.0.0.0/8` or `10.1.2.3`, as `--sink-allow` parses it.
    fn network(entry: &str) -> AllowedNetwork {
        match entry.split_once('/') {
            Some((address, prefix_length)) => AllowedNetwork::from_cidr(
                address.parse().expect("an IP address"),
                prefix_length.parse().expect("a prefix length"),
            )
            .expect("a valid CIDR"),
            None => AllowedNetwork::single(entry.parse().expect("an IP address")),
        }
    }

    fn holds(entry: &str, address: &str) -> bool {
        network(entry).contains(address.parse().expect("an IP address"))
    }

    #[test]
    fn ipv4_cidr_boundaries() {
        for (entry, first, last, before, after) in [
            (
                "10.0.0.0/8",
                "10.0.0.0",
                "10.255.255.255",
                "9.255.255.255",
                "11.0.0.0",
            ),
            (
                "192.168.1.64/26",
                "192.168.1.64",
                "192.168.1.127",
                "192.168.1.63",
                "192.168.1.128",
            ),
            (
                "192.168.1.7/32",
                "192.168.1.7",
                "192.168.1.7",
                "192.168.1.6",
                "192.168.1.8",
            ),
        ] {
            assert!(holds(entry, first), "{entry} holds {first}");
            assert!(holds(entry, last), "{entry} holds {last}");
            assert!(!holds(entry, before), "{entry} does not hold {before}");
            assert!(!holds(entry, after), "{entry} does not hold {after}");
        }
    }

    #[test]
    fn ipv6_cidr_boundaries() {
        for (entry, first, last, before, after) in [
            (
                "fd00::/8",
                "fd00::",
                "fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
                "fcff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
                "fe00::",
            ),
            (
                "2001:db8::/127",
                "2001:db8::",
                "2001:db8::1",
                "2001:db7:ffff:ffff:ffff:ffff:ffff:ffff",
                "2001:db8::2",
            ),
            ("::1/128", "::1", "::1", "::", "::2"),
        ] {
            assert!(holds(entry, first), "{entry} holds {first}");
            assert!(holds(entry, last), "{entry} holds {last}");
            assert!(!holds(entry, before), "{entry} does not hold {before}");
            assert!(!holds(entry, after), "{entry} does not hold {after}");
        }
    }

    #[test]
    fn zero_prefix_lengths_hold_a_whole_family_only() {
        assert!(holds("0.0.0.0/0", "255.255.255.255"));
        assert!(!holds("0.0.0.0/0", "::1"));
        assert!(holds("::/0", "ffff::1"));
        assert!(!holds("::/0", "10.1.2.3"));
        // A mapped IPv4 address is judged as IPv4, so "all of IPv6" does not reach it.
        assert!(!holds("::/0", "::ffff:10.1.2.3"));
    }

    #[test]
    fn ipv4_written_as_ipv6_is_matched_as_ipv4() {
        assert!(holds("10.0.0.0/8", "::ffff:10.1.2.3"));
        assert!(!holds("10.0.0.0/8", "::ffff:11.1.2.3"));
        assert_eq!(network("::ffff:10.0.0.0/104"), network("10.0.0.0/8"));
        assert_eq!(network("::ffff:192.168.0.1"), network("192.168.0.1"));
        assert!(holds("::ffff:10.0.0.0/104", "10.1.2.3"));
        assert_eq!(network("::ffff:10.0.0.0/104").to_string(), "10.0.0.0/8");
    }

    #[test]
    fn bits_past_the_prefix_are_refused_with_the_network_named() {
        let refusal = AllowedNetwork::from_cidr(IpAddr::from([10, 1, 2, 3]), 8)
            .expect_err("10.1.2.3/8 has host bits");
        assert!(refusal.contains("10.0.0.0/8"), "{refusal}");
        let refusal = AllowedNetwork::from_cidr("fd00::1".parse().expect("an address"), 64)
            .expect_err("fd00::1/64 has host bits");
        assert!(refusal.contains("fd00::/64"), "{refusal}");
    }

    #[test]
    fn single_addresses_show_without_a_prefix_length() {
        assert_eq!(network("10.1.2.3").to_string(), "10.1.2.3");
        assert_eq!(network("fd00::1").to_string(), "fd00::1");
        assert_eq!(network("fd00::/8").to_string(), "fd00::/8");
    }
}
