//! Which resolved addresses the gateway may dial.
//!
//! The gateway resolves every allowed name itself and dials only an address that passes
//! [`forbidden_reason`], so a public name that resolves (or is re-pointed) to the host's
//! loopback, its private network or the cloud metadata service never becomes a way in.
//! The table fails closed: any IPv6 address outside global unicast (2000::/3) is refused
//! unless it is a NAT64 form of a public IPv4 address, and addresses that embed an IPv4
//! address (6to4, Teredo, NAT64) are judged by the embedded address too.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why `ip` must never be dialled, or `None` when it is a public unicast address.
pub fn forbidden_reason(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => forbidden_v4(v4),
        IpAddr::V6(v6) => forbidden_v6(v6),
    }
}

/// Whether `(addr, prefix_len)` contains `ip`.
fn in_v4(ip: Ipv4Addr, net: [u8; 4], prefix_len: u32) -> bool {
    let mask = u32::MAX.checked_shl(32 - prefix_len).unwrap_or(0);
    (u32::from(ip) & mask) == (u32::from(Ipv4Addr::from(net)) & mask)
}

fn in_v6(ip: Ipv6Addr, net: [u16; 8], prefix_len: u32) -> bool {
    let mask = u128::MAX.checked_shl(128 - prefix_len).unwrap_or(0);
    let net = Ipv6Addr::new(
        net[0], net[1], net[2], net[3], net[4], net[5], net[6], net[7],
    );
    (u128::from(ip) & mask) == (u128::from(net) & mask)
}

/// IPv4 ranges refused, most specific first (the first match names the reason).
const V4_TABLE: &[([u8; 4], u32, &str)] = &[
    ([255, 255, 255, 255], 32, "IPv4 limited broadcast"),
    ([0, 0, 0, 0], 32, "unspecified address"),
    (
        [169, 254, 169, 254],
        32,
        "cloud metadata address (169.254.169.254)",
    ),
    // Azure's wireserver/DNS: a public-looking address that only the platform answers.
    (
        [168, 63, 129, 16],
        32,
        "cloud platform address (168.63.129.16)",
    ),
    ([0, 0, 0, 0], 8, "\"this network\" (0.0.0.0/8)"),
    ([10, 0, 0, 0], 8, "private address (RFC 1918, 10.0.0.0/8)"),
    (
        [100, 64, 0, 0],
        10,
        "shared address space / CGNAT (100.64.0.0/10)",
    ),
    ([127, 0, 0, 0], 8, "loopback address (127.0.0.0/8)"),
    ([169, 254, 0, 0], 16, "link-local address (169.254.0.0/16)"),
    (
        [172, 16, 0, 0],
        12,
        "private address (RFC 1918, 172.16.0.0/12)",
    ),
    (
        [192, 0, 0, 0],
        24,
        "IETF protocol assignment (192.0.0.0/24)",
    ),
    ([192, 0, 2, 0], 24, "documentation address (192.0.2.0/24)"),
    ([192, 88, 99, 0], 24, "6to4 relay anycast (192.88.99.0/24)"),
    (
        [192, 168, 0, 0],
        16,
        "private address (RFC 1918, 192.168.0.0/16)",
    ),
    ([198, 18, 0, 0], 15, "benchmarking address (198.18.0.0/15)"),
    (
        [198, 51, 100, 0],
        24,
        "documentation address (198.51.100.0/24)",
    ),
    (
        [203, 0, 113, 0],
        24,
        "documentation address (203.0.113.0/24)",
    ),
    ([224, 0, 0, 0], 4, "multicast address (224.0.0.0/4)"),
    ([240, 0, 0, 0], 4, "reserved address (240.0.0.0/4)"),
];

fn forbidden_v4(ip: Ipv4Addr) -> Option<&'static str> {
    V4_TABLE
        .iter()
        .find(|(net, len, _)| in_v4(ip, *net, *len))
        .map(|(_, _, why)| *why)
}

/// IPv6 ranges refused outright, most specific first. Embedding forms (mapped, NAT64,
/// 6to4, Teredo) are handled in [`forbidden_v6`] before this table.
const V6_TABLE: &[([u16; 8], u32, &str)] = &[
    ([0, 0, 0, 0, 0, 0, 0, 0], 128, "unspecified address (::)"),
    ([0, 0, 0, 0, 0, 0, 0, 1], 128, "loopback address (::1)"),
    (
        [0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254],
        128,
        "cloud metadata address (fd00:ec2::254)",
    ),
    (
        [0, 0, 0, 0, 0, 0xffff, 0, 0],
        96,
        "IPv4-mapped IPv6 address (::ffff:0:0/96)",
    ),
    (
        [0, 0, 0, 0, 0, 0, 0, 0],
        96,
        "IPv4-compatible IPv6 address (::/96)",
    ),
    (
        [0x64, 0xff9b, 1, 0, 0, 0, 0, 0],
        48,
        "local-use NAT64 prefix (64:ff9b:1::/48)",
    ),
    (
        [0x100, 0, 0, 0, 0, 0, 0, 0],
        64,
        "discard-only address (100::/64)",
    ),
    (
        [0x2001, 0x2, 0, 0, 0, 0, 0, 0],
        48,
        "benchmarking address (2001:2::/48)",
    ),
    (
        [0x2001, 0xdb8, 0, 0, 0, 0, 0, 0],
        32,
        "documentation address (2001:db8::/32)",
    ),
    (
        [0x3fff, 0, 0, 0, 0, 0, 0, 0],
        20,
        "documentation address (3fff::/20)",
    ),
    (
        [0xfc00, 0, 0, 0, 0, 0, 0, 0],
        7,
        "unique local address (fc00::/7)",
    ),
    (
        [0xfe80, 0, 0, 0, 0, 0, 0, 0],
        10,
        "link-local address (fe80::/10)",
    ),
    (
        [0xfec0, 0, 0, 0, 0, 0, 0, 0],
        10,
        "site-local address (fec0::/10)",
    ),
    (
        [0xff00, 0, 0, 0, 0, 0, 0, 0],
        8,
        "multicast address (ff00::/8)",
    ),
];

const NAT64_WKP: [u16; 8] = [0x64, 0xff9b, 0, 0, 0, 0, 0, 0];
const SIX_TO_FOUR: [u16; 8] = [0x2002, 0, 0, 0, 0, 0, 0, 0];
const TEREDO: [u16; 8] = [0x2001, 0, 0, 0, 0, 0, 0, 0];

fn forbidden_v6(ip: Ipv6Addr) -> Option<&'static str> {
    if let Some((_, _, why)) = V6_TABLE.iter().find(|(net, len, _)| in_v6(ip, *net, *len)) {
        return Some(why);
    }
    let s = ip.segments();
    let v4 = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    if in_v6(ip, NAT64_WKP, 96) {
        // RFC 6052: the IPv4 address is the last 32 bits. A NAT64 form of a public address
        // is fine (DNS64 networks hand these out); a form of a refused one is not.
        return forbidden_v4(v4(s[6], s[7]))
            .map(|_| "NAT64 form (64:ff9b::/96) of a refused IPv4 address");
    }
    if in_v6(ip, SIX_TO_FOUR, 16) {
        // RFC 3056: 2002:AABB:CCDD::/48 carries AA.BB.CC.DD.
        return forbidden_v4(v4(s[1], s[2]))
            .map(|_| "6to4 form (2002::/16) of a refused IPv4 address");
    }
    if in_v6(ip, TEREDO, 32) {
        // RFC 4380: the server address in bits 32..64, the client's public address
        // bit-inverted in the last 32 bits. Either one refused refuses the whole address.
        let server = v4(s[2], s[3]);
        let client = v4(!s[6], !s[7]);
        if forbidden_v4(server).is_some() || forbidden_v4(client).is_some() {
            return Some("Teredo form (2001::/32) of a refused IPv4 address");
        }
        return None;
    }
    if in_v6(ip, [0x2001, 0, 0, 0, 0, 0, 0, 0], 23) {
        return Some("IETF protocol assignment (2001::/23)");
    }
    if !in_v6(ip, [0x2000, 0, 0, 0, 0, 0, 0, 0], 3) {
        return Some("not global unicast (outside 2000::/3)");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(s: &str) -> Option<&'static str> {
        forbidden_reason(s.parse().unwrap())
    }

    #[test]
    fn public_addresses_are_allowed() {
        for ok in [
            "1.1.1.1",
            "8.8.8.8",
            "93.184.216.34",
            "100.63.255.255",
            "100.128.0.0",
            "172.15.255.255",
            "172.32.0.0",
            "192.167.255.255",
            "192.169.0.0",
            "169.253.255.255",
            "198.17.255.255",
            "198.20.0.0",
            "223.255.255.255",
            "2606:4700::1111",
            "2001:4860:4860::8888",
            "2a00:1450:4001::200e",
            "64:ff9b::1.1.1.1",
            "2002:0101:0101::1",
        ] {
            assert_eq!(reason(ok), None, "{ok}");
        }
    }

    #[test]
    fn every_refused_ipv4_range() {
        let cases = [
            ("0.0.0.0", "unspecified"),
            ("0.1.2.3", "this network"),
            ("10.0.0.1", "RFC 1918"),
            ("10.255.255.255", "RFC 1918"),
            ("172.16.0.1", "RFC 1918"),
            ("172.31.255.255", "RFC 1918"),
            ("192.168.1.1", "RFC 1918"),
            ("100.64.0.1", "CGNAT"),
            ("100.127.255.255", "CGNAT"),
            ("127.0.0.1", "loopback"),
            ("127.255.255.254", "loopback"),
            ("169.254.169.254", "metadata"),
            ("169.254.1.1", "link-local"),
            ("168.63.129.16", "platform"),
            ("192.0.0.170", "IETF"),
            ("192.0.2.1", "documentation"),
            ("198.51.100.7", "documentation"),
            ("203.0.113.9", "documentation"),
            ("198.18.0.1", "benchmarking"),
            ("198.19.255.255", "benchmarking"),
            ("192.88.99.1", "6to4 relay"),
            ("224.0.0.1", "multicast"),
            ("239.255.255.250", "multicast"),
            ("240.0.0.1", "reserved"),
            ("254.1.1.1", "reserved"),
            ("255.255.255.255", "broadcast"),
        ];
        for (ip, want) in cases {
            let got = reason(ip).unwrap_or_else(|| panic!("{ip} was allowed"));
            assert!(got.contains(want), "{ip}: {got:?} should mention {want:?}");
        }
    }

    #[test]
    fn every_refused_ipv6_range() {
        let cases = [
            ("::", "unspecified"),
            ("::1", "loopback"),
            ("fd00:ec2::254", "metadata"),
            ("fd00:ec2::123", "unique local"),
            ("fc00::1", "unique local"),
            ("fdff:ffff::1", "unique local"),
            ("fe80::1", "link-local"),
            ("febf::1", "link-local"),
            ("fec0::1", "site-local"),
            ("ff02::1", "multicast"),
            ("ff0e::1", "multicast"),
            ("100::1", "discard"),
            ("2001:db8::1", "documentation"),
            ("3fff::1", "documentation"),
            ("2001:2::1", "benchmarking"),
            ("2001:10::1", "IETF"),
            ("::ffff:127.0.0.1", "IPv4-mapped"),
            ("::ffff:1.1.1.1", "IPv4-mapped"),
            ("::127.0.0.1", "IPv4-compatible"),
            ("::10.0.0.1", "IPv4-compatible"),
            ("64:ff9b:1::a00:1", "local-use NAT64"),
            ("64:ff9b::127.0.0.1", "NAT64"),
            ("64:ff9b::10.0.0.1", "NAT64"),
            ("64:ff9b::169.254.169.254", "NAT64"),
            ("2002:7f00:0001::1", "6to4"),
            ("2002:a9fe:a9fe::1", "6to4"),
            ("2002:c0a8:0101::1", "6to4"),
            ("4000::1", "not global unicast"),
            ("5f00::1", "not global unicast"),
            ("e000::1", "not global unicast"),
        ];
        for (ip, want) in cases {
            let got = reason(ip).unwrap_or_else(|| panic!("{ip} was allowed"));
            assert!(got.contains(want), "{ip}: {got:?} should mention {want:?}");
        }
    }

    #[test]
    fn teredo_is_judged_by_both_embedded_addresses() {
        // Server 65.54.227.120 (public), client 1.1.1.1 inverted = fefe:fefe.
        assert_eq!(reason("2001:0:4136:e378:8000:63bf:fefe:fefe"), None);
        // Client 127.0.0.1 inverted = 80ff:fffe.
        assert!(reason("2001:0:4136:e378:8000:63bf:80ff:fffe")
            .unwrap()
            .contains("Teredo"));
        // Server 10.0.0.1.
        assert!(reason("2001:0:a00:1:8000:63bf:fefe:fefe")
            .unwrap()
            .contains("Teredo"));
    }

    #[test]
    fn range_edges() {
        assert!(in_v4("1.2.3.4".parse().unwrap(), [0, 0, 0, 0], 0));
        assert!(in_v6("::".parse().unwrap(), [0; 8], 0));
        assert!(!in_v4("172.32.0.0".parse().unwrap(), [172, 16, 0, 0], 12));
        assert!(in_v4("172.31.0.0".parse().unwrap(), [172, 16, 0, 0], 12));
    }
}
