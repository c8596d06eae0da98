//! Which push endpoints the daemon will POST to. A subscription's endpoint is a URL a
//! client chose, so without a check any client could make the daemon send requests to
//! its own host or its private network (SSRF). Only `https://` URLs on the known push
//! services pass, plus the exact origins `[push] allow_endpoints` names; and at send time
//! an endpoint that was not explicitly allowed must resolve to public addresses only.

use std::net::IpAddr;

use super::config::PushHostConfig;
pub use crate::outbound::Endpoint;

/// Longest endpoint accepted (real ones are a few hundred bytes).
pub const MAX_ENDPOINT_BYTES: usize = crate::outbound::MAX_URL_BYTES;

/// Host names of the push services browsers use: exact names, and `.`-prefixed suffixes.
const PUSH_SERVICES: &[&str] = &[
    "fcm.googleapis.com",
    ".push.services.mozilla.com",
    ".notify.windows.com",
    "web.push.apple.com",
    ".push.apple.com",
];

/// Why an endpoint is refused: each says what a valid one looks like.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EndpointRefused {
    #[error("the endpoint is longer than {MAX_ENDPOINT_BYTES} bytes")]
    TooLong,
    #[error("the endpoint is not an http(s) URL")]
    NotAUrl,
    #[error("the endpoint must be an https:// URL")]
    NotHttps,
    #[error("the endpoint's host {host:?} is an IP address, not a push service")]
    IpAddress { host: String },
    #[error("the endpoint's host {host:?} is not a known push service (FCM, Mozilla, Windows, Apple); an operator may allow more with [push] allow_endpoints")]
    UnknownService { host: String },
    #[error("the endpoint must use the push service's default port 443")]
    Port,
}

/// Checks a client's endpoint against the known push services and `config`.
pub fn check(endpoint: &str, config: &PushHostConfig) -> Result<Endpoint, EndpointRefused> {
    if endpoint.len() > MAX_ENDPOINT_BYTES {
        return Err(EndpointRefused::TooLong);
    }
    let found =
        Endpoint::parse(endpoint, &config.allow_endpoints).ok_or(EndpointRefused::NotAUrl)?;
    let (https, allowed_by_config) = (found.https, found.allowed_by_config);
    if allowed_by_config {
        return Ok(found);
    }
    if !https {
        return Err(EndpointRefused::NotHttps);
    }
    if found.bare_host().parse::<IpAddr>().is_ok() {
        return Err(EndpointRefused::IpAddress { host: found.host });
    }
    let known = PUSH_SERVICES
        .iter()
        .any(|service| match service.strip_prefix('.') {
            Some(_) => found.host.ends_with(service) && found.host.len() > service.len(),
            None => found.host == *service,
        });
    if !known {
        return Err(EndpointRefused::UnknownService { host: found.host });
    }
    if found.port != 443 {
        return Err(EndpointRefused::Port);
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowing(origins: &[&str]) -> PushHostConfig {
        PushHostConfig {
            allow_endpoints: origins.iter().map(|o| (*o).to_owned()).collect(),
            ..PushHostConfig::default()
        }
    }

    #[test]
    fn only_known_push_services_and_allowed_origins_pass() {
        let none = PushHostConfig::default();
        let refused = |url: &str, config: &PushHostConfig| check(url, config).unwrap_err();
        // The attacks: the daemon's own host, private networks, metadata services, tricks.
        for (url, why) in [
            ("http://127.0.0.1:7070/v1/boxes", EndpointRefused::NotHttps),
            (
                "https://127.0.0.1/x",
                EndpointRefused::IpAddress {
                    host: "127.0.0.1".into(),
                },
            ),
            (
                "https://10.0.0.5/x",
                EndpointRefused::IpAddress {
                    host: "10.0.0.5".into(),
                },
            ),
            (
                "https://169.254.169.254/latest",
                EndpointRefused::IpAddress {
                    host: "169.254.169.254".into(),
                },
            ),
            (
                "https://[::1]/x",
                EndpointRefused::IpAddress {
                    host: "[::1]".into(),
                },
            ),
            (
                "https://localhost/x",
                EndpointRefused::UnknownService {
                    host: "localhost".into(),
                },
            ),
            (
                "https://fcm.googleapis.com.evil.example/x",
                EndpointRefused::UnknownService {
                    host: "fcm.googleapis.com.evil.example".into(),
                },
            ),
            (
                "https://evilpush.apple.com.example/x",
                EndpointRefused::UnknownService {
                    host: "evilpush.apple.com.example".into(),
                },
            ),
            (
                "https://push.apple.com/x",
                EndpointRefused::UnknownService {
                    host: "push.apple.com".into(),
                },
            ),
            ("https://fcm.googleapis.com:8443/x", EndpointRefused::Port),
            (
                "https://user@fcm.googleapis.com/x",
                EndpointRefused::NotAUrl,
            ),
            ("ftp://fcm.googleapis.com/x", EndpointRefused::NotAUrl),
            ("not a url", EndpointRefused::NotAUrl),
        ] {
            assert_eq!(refused(url, &none), why, "{url}");
        }
        let long = format!(
            "https://fcm.googleapis.com/{}",
            "a".repeat(MAX_ENDPOINT_BYTES)
        );
        assert_eq!(refused(&long, &none), EndpointRefused::TooLong);

        for url in [
            "https://fcm.googleapis.com/fcm/send/abc:def",
            "https://updates.push.services.mozilla.com/wpush/v2/gAAA",
            "https://wns2-par02p.notify.windows.com/w/?token=BQYAAA",
            "https://web.push.apple.com/QGuQyavXutnMH",
            "https://api.push.apple.com/3/device/x",
            "HTTPS://FCM.googleapis.com/fcm/send/x",
        ] {
            let ok = check(url, &none).unwrap_or_else(|e| panic!("{url}: {e}"));
            assert!(ok.https && !ok.allowed_by_config && ok.port == 443, "{url}");
        }
        let fcm = check("https://fcm.googleapis.com/fcm/send/x?y=1", &none).unwrap();
        assert_eq!(fcm.origin, "https://fcm.googleapis.com:443");
        assert_eq!(fcm.path_and_query, "/fcm/send/x?y=1");

        // An allowed origin is matched exactly, never as a string prefix.
        let config = allowing(&["http://127.0.0.1:8099"]);
        let local = check("http://127.0.0.1:8099/push/1", &config).unwrap();
        assert!(local.allowed_by_config && !local.https);
        assert_eq!((local.host.as_str(), local.port), ("127.0.0.1", 8099));
        for url in [
            "http://127.0.0.1:8098/push/1",
            "http://127.0.0.1:80990/push/1",
            "http://127.0.0.1/push/1",
            "http://127.0.0.1:8099.evil.example/push",
        ] {
            assert!(check(url, &config).is_err(), "{url}");
        }
    }
}
