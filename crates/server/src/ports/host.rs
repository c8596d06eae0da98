//! `<port>-<box name>.<base_domain>`: the host name of one box's port.
//!
//! Box names are DNS labels already (`validate::box_name`), so the mapping is the name
//! itself: `8000-alice.boxes.example.com` is port 8000 of the box named `alice` in the
//! caller's tenant (a box id, which holds `_`, is no DNS label and is not accepted here).
//! The port is the digits before the first `-`; names may hold `-` themselves. A DNS label
//! is at most 63 bytes, so a box whose name is longer than 63 minus the port's digits and
//! the `-` is reached by path only.

/// Where a host name under the base domain points.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortHost {
    pub port: u16,
    pub box_name: String,
}

/// What the `Host` header says about the base domain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostMatch {
    /// Not under the base domain (or no base domain): the API itself.
    Api,
    /// A port's host name.
    Port(PortHost),
    /// Under the base domain, but not `<port>-<name>`: `why`.
    Malformed { why: &'static str },
}

/// Reads `host` (the `Host` header, maybe with `:port`) against `base_domain`.
pub fn match_host(host: &str, base_domain: Option<&str>) -> HostMatch {
    let Some(base) = base_domain else {
        return HostMatch::Api;
    };
    let host = strip_port(host).to_ascii_lowercase();
    let host = host.strip_suffix('.').unwrap_or(&host);
    if host == base {
        return HostMatch::Api;
    }
    let Some(label) = host
        .strip_suffix(base)
        .and_then(|rest| rest.strip_suffix('.'))
    else {
        return HostMatch::Api;
    };
    if label.contains('.') {
        return HostMatch::Malformed {
            why: "a port's host name is one label, <port>-<box name>, under the base domain",
        };
    }
    let Some((digits, name)) = label.split_once('-') else {
        return HostMatch::Malformed {
            why: "a port's host name is <port>-<box name>",
        };
    };
    let port = match digits.parse::<u16>() {
        Ok(port) if port != 0 && digits.bytes().all(|b| b.is_ascii_digit()) => port,
        _ => {
            return HostMatch::Malformed {
                why: "the host name must start with a port number from 1 to 65535",
            }
        }
    };
    if crate::dns_label::label_rule(name).is_some() {
        return HostMatch::Malformed {
            why: "after the port comes a box name (a-z, 0-9 and -)",
        };
    }
    HostMatch::Port(PortHost {
        port,
        box_name: name.to_owned(),
    })
}

/// `example.com:8080` → `example.com`; `[::1]:80` → `[::1]`.
pub(crate) fn strip_port(host: &str) -> &str {
    match host.rfind(':') {
        Some(i)
            if !host[i..].contains(']') && host[i + 1..].bytes().all(|b| b.is_ascii_digit()) =>
        {
            &host[..i]
        }
        _ => host,
    }
}

/// The host name of `port` of box `name`, when the mapping can give it one.
pub fn host_for(port: u16, name: &str, base_domain: &str) -> Option<String> {
    let label = format!("{port}-{name}");
    (label.len() <= 63).then(|| format!("{label}.{base_domain}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: Option<&str> = Some("boxes.example.com");

    fn port(port: u16, name: &str) -> HostMatch {
        HostMatch::Port(PortHost {
            port,
            box_name: name.into(),
        })
    }

    #[test]
    fn port_host_names_are_read_and_everything_else_is_the_api() {
        assert_eq!(
            match_host("8000-alice.boxes.example.com", BASE),
            port(8000, "alice")
        );
        assert_eq!(
            match_host("3000-my-box.Boxes.Example.com:8443", BASE),
            port(3000, "my-box")
        );
        assert_eq!(match_host("80-a.boxes.example.com.", BASE), port(80, "a"));
        for api in [
            "boxes.example.com",
            "127.0.0.1:7070",
            "example.com",
            "xboxes.example.com",
        ] {
            assert_eq!(match_host(api, BASE), HostMatch::Api, "{api}");
        }
        assert_eq!(
            match_host("8000-alice.boxes.example.com", None),
            HostMatch::Api
        );
        for bad in [
            "alice.boxes.example.com",
            "0-alice.boxes.example.com",
            "70000-alice.boxes.example.com",
            "+80-alice.boxes.example.com",
            "80-.boxes.example.com",
            "80-bx_1.boxes.example.com",
            "a.80-alice.boxes.example.com",
        ] {
            assert!(
                matches!(match_host(bad, BASE), HostMatch::Malformed { .. }),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_host_name_is_given_only_when_its_label_fits() {
        assert_eq!(
            host_for(8000, "alice", "b.test").as_deref(),
            Some("8000-alice.b.test")
        );
        assert_eq!(
            host_for(65535, &"a".repeat(57), "b.test"),
            Some(format!("65535-{}.b.test", "a".repeat(57)))
        );
        assert_eq!(host_for(65535, &"a".repeat(58), "b.test"), None);
    }
}
