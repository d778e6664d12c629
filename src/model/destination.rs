//! Which addresses a webhook may be sent to: globally routable unicast only. Pure, so the whole
//! rule is one table and one function, unit-tested against addresses; the webhook client applies
//! it to the resolved address when an output is saved and again on every connection.
//!
//! It is an allow-list in spirit: an IPv6 address must lie in 2000::/3 (the only block IANA
//! allocates as global unicast), and neither family may fall in any special-purpose range of
//! IANA's registries that is not marked globally reachable. A denylist of "private" ranges had
//! gaps (NAT64, 6to4, multicast, reserved blocks); listing what is *not* allowed in a registry
//! that says so for every block, plus requiring 2000::/3, leaves nothing unclassified.
//!
//! IPv6 forms that carry an IPv4 address (IPv4-mapped, IPv4-compatible, NAT64's well-known
//! prefix, 6to4, Teredo) are judged by the IPv4 address they lead to, since that is where the
//! packets end up (through the host's own stack, a NAT64 gateway or a relay).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A block of addresses: its first address and prefix length, and what it is for.
#[derive(Debug, Clone, Copy)]
struct Block<A> {
    start: A,
    prefix: u8,
    purpose: &'static str,
}

const fn v4(a: u8, b: u8, c: u8, d: u8, prefix: u8, purpose: &'static str) -> Block<Ipv4Addr> {
    Block {
        start: Ipv4Addr::new(a, b, c, d),
        prefix,
        purpose,
    }
}

const fn v6(segments: [u16; 8], prefix: u8, purpose: &'static str) -> Block<Ipv6Addr> {
    let [a, b, c, d, e, f, g, h] = segments;
    Block {
        start: Ipv6Addr::new(a, b, c, d, e, f, g, h),
        prefix,
        purpose,
    }
}

/// IANA's IPv4 special-purpose blocks that are not globally reachable, plus multicast and the
/// reserved class E (which includes the limited broadcast address).
const IPV4_REFUSED: &[Block<Ipv4Addr>] = &[
    v4(0, 0, 0, 0, 8, "\"this network\""),
    v4(10, 0, 0, 0, 8, "private use"),
    v4(
        100,
        64,
        0,
        0,
        10,
        "shared address space (carrier-grade NAT)",
    ),
    v4(127, 0, 0, 0, 8, "loopback"),
    v4(169, 254, 0, 0, 16, "link-local"),
    v4(172, 16, 0, 0, 12, "private use"),
    v4(192, 0, 0, 0, 24, "IETF protocol assignments"),
    v4(192, 0, 2, 0, 24, "documentation (TEST-NET-1)"),
    v4(192, 88, 99, 0, 24, "deprecated 6to4 relay anycast"),
    v4(192, 168, 0, 0, 16, "private use"),
    v4(198, 18, 0, 0, 15, "benchmarking"),
    v4(198, 51, 100, 0, 24, "documentation (TEST-NET-2)"),
    v4(203, 0, 113, 0, 24, "documentation (TEST-NET-3)"),
    v4(224, 0, 0, 0, 4, "multicast"),
    v4(240, 0, 0, 0, 4, "reserved (and the broadcast address)"),
];

/// IANA's IPv6 special-purpose blocks inside 2000::/3 that are not globally reachable. Teredo
/// (2001::/32) and 6to4 (2002::/16) are decoded before this table is consulted.
const IPV6_REFUSED_IN_GLOBAL: &[Block<Ipv6Addr>] = &[
    v6([0x2001, 0x2, 0, 0, 0, 0, 0, 0], 48, "benchmarking"),
    v6([0x2001, 0x10, 0, 0, 0, 0, 0, 0], 28, "deprecated ORCHID"),
    v6([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0], 32, "documentation"),
    v6([0x3fff, 0, 0, 0, 0, 0, 0, 0], 20, "documentation"),
];

/// The globally reachable exceptions inside 2001::/23 (anycast services and AMT, ORCHIDv2,
/// drone remote ID); the rest of 2001::/23 is for IETF protocols and not globally reachable.
const IPV6_GLOBAL_IN_IETF: &[Block<Ipv6Addr>] = &[
    v6(
        [0x2001, 0x1, 0, 0, 0, 0, 0, 0x1],
        128,
        "port control protocol anycast",
    ),
    v6([0x2001, 0x1, 0, 0, 0, 0, 0, 0x2], 128, "TURN anycast"),
    v6(
        [0x2001, 0x1, 0, 0, 0, 0, 0, 0x3],
        128,
        "DNS-SD service registration anycast",
    ),
    v6([0x2001, 0x3, 0, 0, 0, 0, 0, 0], 32, "AMT"),
    v6([0x2001, 0x4, 0x112, 0, 0, 0, 0, 0], 48, "AS112-v6"),
    v6([0x2001, 0x20, 0, 0, 0, 0, 0, 0], 28, "ORCHIDv2"),
    v6([0x2001, 0x30, 0, 0, 0, 0, 0, 0], 28, "drone remote ID"),
];

const IETF_PROTOCOLS: Block<Ipv6Addr> = v6(
    [0x2001, 0, 0, 0, 0, 0, 0, 0],
    23,
    "IETF protocol assignments",
);
const GLOBAL_UNICAST: Block<Ipv6Addr> = v6([0x2000, 0, 0, 0, 0, 0, 0, 0], 3, "global unicast");

/// Why an address is not a destination: the address judged (the embedded IPv4 address for
/// the IPv6 forms that carry one), the block it falls in, and the form it was embedded in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NotGlobal {
    /// The address the rule refused (for an embedding form, the embedded IPv4 address).
    pub(crate) address: IpAddr,
    /// The refused block, `address/prefix`, or a description when no single block applies.
    pub(crate) block: String,
    /// What the block is for.
    pub(crate) purpose: &'static str,
    /// The IPv6 form the address was carried in, if any.
    pub(crate) embedded_in: Option<&'static str>,
}

impl fmt::Display for NotGlobal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(form) = self.embedded_in {
            write!(f, "{form} carrying {}: ", self.address)?;
        }
        write!(
            f,
            "{} is {}, not a globally routable unicast address",
            self.block, self.purpose
        )
    }
}

/// Whether `ip` is a globally routable unicast address (for IPv6 forms that carry an IPv4
/// address, whether that IPv4 address is).
pub(crate) fn is_global_unicast(ip: IpAddr) -> bool {
    not_global(ip).is_none()
}

/// Why `ip` may not be a webhook destination, or `None` when it may.
pub(crate) fn not_global(ip: IpAddr) -> Option<NotGlobal> {
    match ip {
        IpAddr::V4(v4) => not_global_v4(v4),
        IpAddr::V6(v6) => match embedded_ipv4(v6) {
            Some(Embedded::One(form, v4)) => embedded(form, v4),
            Some(Embedded::Teredo { server, client }) => {
                embedded(TEREDO, client).or_else(|| embedded(TEREDO, server))
            }
            None => not_global_v6(v6),
        },
    }
}

fn embedded(form: &'static str, v4: Ipv4Addr) -> Option<NotGlobal> {
    not_global_v4(v4).map(|refusal| NotGlobal {
        embedded_in: Some(form),
        ..refusal
    })
}

fn not_global_v4(ip: Ipv4Addr) -> Option<NotGlobal> {
    let bits = u32::from(ip);
    IPV4_REFUSED
        .iter()
        .find(|block| in_v4(bits, block))
        .map(|block| NotGlobal {
            address: IpAddr::V4(ip),
            block: format!("{}/{}", block.start, block.prefix),
            purpose: block.purpose,
            embedded_in: None,
        })
}

fn not_global_v6(ip: Ipv6Addr) -> Option<NotGlobal> {
    let refusal = |block: &Block<Ipv6Addr>| NotGlobal {
        address: IpAddr::V6(ip),
        block: format!("{}/{}", block.start, block.prefix),
        purpose: block.purpose,
        embedded_in: None,
    };
    let bits = u128::from(ip);
    if !in_v6(bits, &GLOBAL_UNICAST) {
        // Loopback, unspecified, unique local, link-local, site-local, multicast, discard-only,
        // NAT64's local-use prefix, SRv6 SIDs, and everything IANA has not allocated.
        return Some(NotGlobal {
            address: IpAddr::V6(ip),
            block: "outside 2000::/3".to_owned(),
            purpose: "not global unicast (loopback, local, multicast, reserved or unallocated)",
            embedded_in: None,
        });
    }
    if in_v6(bits, &IETF_PROTOCOLS) && !IPV6_GLOBAL_IN_IETF.iter().any(|b| in_v6(bits, b)) {
        return Some(refusal(&IETF_PROTOCOLS));
    }
    IPV6_REFUSED_IN_GLOBAL
        .iter()
        .find(|block| in_v6(bits, block))
        .map(refusal)
}

const TEREDO: &str = "a Teredo address (2001::/32)";

/// An IPv4 address an IPv6 address leads to.
enum Embedded {
    One(&'static str, Ipv4Addr),
    /// Teredo carries two: the relay server, and the client's public address (inverted).
    Teredo {
        server: Ipv4Addr,
        client: Ipv4Addr,
    },
}

/// The IPv4 address(es) carried by an IPv4-mapped, IPv4-compatible, NAT64 (64:ff9b::/96),
/// 6to4 or Teredo address.
fn embedded_ipv4(ip: Ipv6Addr) -> Option<Embedded> {
    let bits = u128::from(ip);
    // `as` keeps the low 32 bits, which is where these forms put the IPv4 address.
    let low = Ipv4Addr::from(bits as u32);
    let forms: [(Block<Ipv6Addr>, &'static str); 3] = [
        (
            v6([0, 0, 0, 0, 0, 0xffff, 0, 0], 96, ""),
            "an IPv4-mapped address (::ffff:0:0/96)",
        ),
        (
            v6([0, 0, 0, 0, 0, 0, 0, 0], 96, ""),
            "an IPv4-compatible address (::/96)",
        ),
        (
            v6([0x64, 0xff9b, 0, 0, 0, 0, 0, 0], 96, ""),
            "a NAT64 address (64:ff9b::/96)",
        ),
    ];
    if let Some((_, form)) = forms.iter().find(|(block, _)| in_v6(bits, block)) {
        return Some(Embedded::One(form, low));
    }
    if in_v6(bits, &v6([0x2002, 0, 0, 0, 0, 0, 0, 0], 16, "")) {
        // 2002:AABB:CCDD::/48 is the 6to4 site of AA.BB.CC.DD.
        return Some(Embedded::One(
            "a 6to4 address (2002::/16)",
            Ipv4Addr::from((bits >> 80) as u32),
        ));
    }
    if in_v6(bits, &v6([0x2001, 0, 0, 0, 0, 0, 0, 0], 32, "")) {
        // 2001:0:SSSS:SSSS:flags:port:CCCC:CCCC, the client's address stored inverted.
        return Some(Embedded::Teredo {
            server: Ipv4Addr::from((bits >> 64) as u32),
            client: Ipv4Addr::from(!(bits as u32)),
        });
    }
    None
}

fn in_v4(bits: u32, block: &Block<Ipv4Addr>) -> bool {
    let mask = u32::MAX
        .checked_shl(32 - u32::from(block.prefix))
        .unwrap_or(0);
    bits & mask == u32::from(block.start) & mask
}

fn in_v6(bits: u128, block: &Block<Ipv6Addr>) -> bool {
    let mask = u128::MAX
        .checked_shl(128 - u32::from(block.prefix))
        .unwrap_or(0);
    bits & mask == u128::from(block.start) & mask
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every address the security review got through, and an address in every refused range.
    const REFUSED: &[&str] = &[
        // The review's findings.
        "::127.0.0.1",
        "64:ff9b::7f00:1",
        "64:ff9b::a9fe:a9fe",
        "2002:7f00:1::",
        "0.1.2.3",
        "198.18.0.1",
        "198.19.255.255",
        "224.0.0.1",
        "239.255.255.250",
        "240.0.0.1",
        "fec0::1",
        "ff02::1",
        "ff0e::1",
        // What was refused before stays refused.
        "127.0.0.1",
        "10.1.2.3",
        "172.16.0.1",
        "172.31.255.255",
        "192.168.1.1",
        "169.254.169.254",
        "100.64.0.1",
        "100.127.255.255",
        "0.0.0.0",
        "255.255.255.255",
        "::1",
        "::",
        "fd00::1",
        "fc00::1",
        "fe80::1",
        "::ffff:127.0.0.1",
        "::ffff:10.0.0.1",
        // The rest of the special-purpose registries.
        "192.0.0.8",
        "192.0.2.1",
        "192.88.99.1",
        "198.51.100.7",
        "203.0.113.9",
        "2001:db8::1",
        "100::1",
        "2001:2::1",
        "2001:10::1",
        "2001:100::1",
        "3fff::1",
        "64:ff9b:1::1",
        "5f00::1",
        "1::1",
        "4000::1",
        // Embedded IPv4 in other forms: 6to4 of 192.168.1.1, Teredo to client 127.0.0.1.
        "2002:c0a8:101::1",
        "2001:0:4136:e378:8000:63bf:80ff:fffe",
    ];

    const ACCEPTED: &[&str] = &[
        "93.184.216.34",
        "8.8.8.8",
        "1.1.1.1",
        "100.63.255.255",
        "100.128.0.1",
        "172.32.0.1",
        "192.0.1.1",
        "198.20.0.1",
        "223.255.255.254",
        "2606:2800:220:1::1",
        "2606:4700::1111",
        "2a00:1450:4001:80b::200e",
        "2001:4860:4860::8888",
        "2001:3::1",
        // Embedding forms that lead to 93.184.216.34.
        "64:ff9b::5db8:d822",
        "::ffff:93.184.216.34",
        "2002:5db8:d822::1",
        "2001:0:4136:e378:8000:63bf:a247:27dd",
    ];

    #[test]
    fn only_globally_routable_unicast_addresses_are_destinations() {
        for ip in REFUSED {
            let ip: IpAddr = ip.parse().unwrap();
            assert!(!is_global_unicast(ip), "{ip} must be refused");
        }
        for ip in ACCEPTED {
            let ip: IpAddr = ip.parse().unwrap();
            assert_eq!(not_global(ip), None, "{ip} must be accepted");
        }
    }

    #[test]
    fn a_refusal_names_the_embedded_address_and_its_range() {
        let refusal = not_global("64:ff9b::a9fe:a9fe".parse().unwrap()).unwrap();
        let message = refusal.to_string();
        assert!(message.contains("NAT64"), "{message}");
        assert!(message.contains("169.254.169.254"), "{message}");
        assert!(
            message.contains("169.254.0.0/16 is link-local"),
            "{message}"
        );
        let refusal = not_global("198.18.3.4".parse().unwrap()).unwrap();
        assert_eq!(refusal.block, "198.18.0.0/15");
    }
}
