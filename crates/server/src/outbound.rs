//! Requests the daemon makes to URLs that clients chose (Web Push endpoints, webhooks):
//! the URL parsed into an [`Endpoint`], a connection that refuses the host's own network
//! unless the operator allowed the origin ([`connect`]), and one request on a connection of
//! its own whose answer is never followed anywhere ([`post`]): without these checks any
//! client could make the daemon reach its host or its private network (SSRF).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{header, StatusCode};
use http_body_util::Full;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};

/// Longest URL accepted (a push endpoint is a few hundred bytes).
pub const MAX_URL_BYTES: usize = 2048;

/// A URL that parsed as `http(s)://host[:port]/…` with no user info.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub https: bool,
    /// Lower case.
    pub host: String,
    pub port: u16,
    /// `scheme://host:port`, the port always written.
    pub origin: String,
    /// What goes on the request line.
    pub path_and_query: String,
    /// Its origin is one the operator listed (so its addresses are not checked).
    pub allowed_by_config: bool,
}

impl Endpoint {
    /// Parses `url`; `allowed` are the origins the operator listed (normalised).
    pub fn parse(url: &str, allowed: &[String]) -> Option<Endpoint> {
        if url.len() > MAX_URL_BYTES {
            return None;
        }
        let (origin, rest) = origin_of(url)?;
        let uri: http::Uri = url.parse().ok()?;
        let authority = uri.authority()?;
        let https = origin.starts_with("https://");
        Some(Endpoint {
            https,
            host: authority.host().to_ascii_lowercase(),
            port: authority.port_u16().unwrap_or(if https { 443 } else { 80 }),
            allowed_by_config: allowed.contains(&origin),
            origin,
            path_and_query: if rest.is_empty() {
                "/".to_owned()
            } else {
                rest
            },
        })
    }

    /// The host without IPv6 brackets.
    pub fn bare_host(&self) -> &str {
        self.host.trim_start_matches('[').trim_end_matches(']')
    }

    /// The `Host` header.
    pub fn host_header(&self) -> String {
        let default = if self.https { 443 } else { 80 };
        if self.port == default {
            self.host.clone()
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// Why a request did not get an answer.
#[derive(Debug, thiserror::Error)]
pub enum OutboundError {
    #[error("cannot resolve {host}")]
    Resolve {
        host: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{host} resolves to {addr}, {reason}: refused")]
    Forbidden {
        host: String,
        addr: SocketAddr,
        reason: &'static str,
    },
    #[error("cannot connect to {host}")]
    Connect {
        host: String,
        #[source]
        source: std::io::Error,
    },
    #[error("TLS with {host} failed")]
    Tls {
        host: String,
        #[source]
        source: std::io::Error,
    },
    #[error("HTTP with the server failed")]
    Http(#[source] hyper::Error),
    #[error("cannot build the request")]
    Request,
    #[error("no answer within {} s", .0.as_secs())]
    Timeout(Duration),
}

/// A connection to the endpoint's host; one that was not allowed by the operator must
/// resolve to public addresses only (a public name re-pointed at the host's own network is
/// refused, not dialled).
pub async fn connect(endpoint: &Endpoint) -> Result<tokio::net::TcpStream, OutboundError> {
    let host = endpoint.bare_host();
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, endpoint.port))
        .await
        .map_err(|source| OutboundError::Resolve {
            host: host.to_owned(),
            source,
        })?
        .collect();
    if !endpoint.allowed_by_config {
        if let Some((addr, reason)) = addrs
            .iter()
            .find_map(|a| berth_egress::address::forbidden_reason(a.ip()).map(|r| (*a, r)))
        {
            return Err(OutboundError::Forbidden {
                host: host.to_owned(),
                addr,
                reason,
            });
        }
    }
    tokio::net::TcpStream::connect(&addrs[..])
        .await
        .map_err(|source| OutboundError::Connect {
            host: host.to_owned(),
            source,
        })
}

/// POSTs `request` (its path, headers and body; `Host` is set here) to the endpoint on a
/// connection of its own, TLS for `https`; the answer's status and headers (its body is
/// not read, and a redirect is an answer like any other: never followed).
pub async fn post(
    endpoint: &Endpoint,
    tls: &Arc<rustls::ClientConfig>,
    mut request: http::Request<Full<Bytes>>,
    within: Duration,
) -> Result<(StatusCode, http::HeaderMap), OutboundError> {
    let host = endpoint
        .host_header()
        .parse()
        .map_err(|_| OutboundError::Request)?;
    request.headers_mut().insert(header::HOST, host);
    let attempt = async {
        let tcp = connect(endpoint).await?;
        if !endpoint.https {
            return send(tcp, request).await;
        }
        let name = ServerName::try_from(endpoint.bare_host().to_owned())
            .map_err(|_| OutboundError::Request)?;
        let stream = tokio_rustls::TlsConnector::from(tls.clone())
            .connect(name, tcp)
            .await
            .map_err(|source| OutboundError::Tls {
                host: endpoint.host.clone(),
                source,
            })?;
        send(stream, request).await
    };
    tokio::time::timeout(within, attempt)
        .await
        .unwrap_or(Err(OutboundError::Timeout(within)))
}

async fn send<IO>(
    io: IO,
    request: http::Request<Full<Bytes>>,
) -> Result<(StatusCode, http::HeaderMap), OutboundError>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(OutboundError::Http)?;
    let conn = tokio::spawn(conn);
    let response = sender
        .send_request(request)
        .await
        .map_err(OutboundError::Http);
    conn.abort();
    let response = response?;
    Ok((response.status(), response.headers().clone()))
}

/// The web's public roots, as the egress gateway trusts upstream.
pub fn tls_config() -> rustls::ClientConfig {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("ring supports the default protocol versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    config
}

/// `(scheme://host:port, the rest)` of an http(s) URL, the origin normalised (lower case,
/// the default port written out); `None` when it is not one.
pub fn origin_of(url: &str) -> Option<(String, String)> {
    let uri: http::Uri = url.parse().ok()?;
    let scheme = uri.scheme_str()?.to_ascii_lowercase();
    let default_port = match scheme.as_str() {
        "https" => 443,
        "http" => 80,
        _ => return None,
    };
    let authority = uri.authority()?;
    if authority.as_str().contains('@') {
        return None;
    }
    let host = authority.host().to_ascii_lowercase();
    if host.is_empty() {
        return None;
    }
    let port = authority.port_u16().unwrap_or(default_port);
    let rest = uri
        .path_and_query()
        .map(|p| p.as_str())
        .filter(|p| *p != "/" || url.ends_with('/'))
        .unwrap_or("")
        .to_owned();
    Some((format!("{scheme}://{host}:{port}"), rest))
}

/// `allow_endpoints` of a config section (`section` names it in errors): each an origin,
/// normalised.
pub fn allowed_origins(entries: &[String], section: &str) -> Result<Vec<String>, String> {
    entries
        .iter()
        .map(|entry| {
            origin_of(entry.trim_end_matches('/'))
                .filter(|(origin, rest)| !origin.is_empty() && rest.is_empty())
                .map(|(origin, _)| origin)
                .ok_or_else(|| {
                    format!(
                        "[{section}] allow_endpoints: {entry:?} must be an origin such as \"http://127.0.0.1:8099\" (scheme, host and port, no path)"
                    )
                })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint(host: &str, port: u16, allowed_by_config: bool) -> Endpoint {
        Endpoint {
            https: !allowed_by_config,
            host: host.to_owned(),
            port,
            origin: format!("https://{host}:{port}"),
            path_and_query: "/".to_owned(),
            allowed_by_config,
        }
    }

    /// A name that passed the URL check but resolves to the host's own network (DNS
    /// re-pointed, or `/etc/hosts`) is refused before any connection.
    #[tokio::test]
    async fn a_name_resolving_to_a_private_address_is_not_dialled() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        match connect(&endpoint("localhost", port, false)).await {
            Err(OutboundError::Forbidden { addr, .. }) => {
                assert!(addr.ip().is_loopback(), "{addr}")
            }
            other => panic!("dialled: {other:?}"),
        }
        // Only an origin the operator listed reaches it.
        let stream = connect(&endpoint("127.0.0.1", port, true)).await.unwrap();
        assert_eq!(stream.peer_addr().unwrap().port(), port);
    }

    #[test]
    fn urls_parse_to_origins_and_paths() {
        let allowed = ["http://127.0.0.1:8099".to_owned()];
        let e = Endpoint::parse("HTTPS://Hooks.Example/in?x=1", &allowed).unwrap();
        assert_eq!(
            (
                e.origin.as_str(),
                e.path_and_query.as_str(),
                e.https,
                e.port
            ),
            ("https://hooks.example:443", "/in?x=1", true, 443)
        );
        assert!(!e.allowed_by_config);
        assert!(
            Endpoint::parse("http://127.0.0.1:8099/x", &allowed)
                .unwrap()
                .allowed_by_config
        );
        for bad in ["ftp://a/x", "https://user@a/x", "not a url", "https:///x"] {
            assert!(Endpoint::parse(bad, &allowed).is_none(), "{bad}");
        }
        let long = format!("https://a.example/{}", "a".repeat(MAX_URL_BYTES));
        assert!(Endpoint::parse(&long, &allowed).is_none());
    }
}
