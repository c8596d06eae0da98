//! HTTP/1.1 heads: reading one (capped), rewriting a request's credentials and framing,
//! and marking a response `Connection: close`. Pure apart from `read_head`.

use tokio::io::{AsyncRead, AsyncReadExt};

use super::body::Framing;
use super::rules::{CredentialRule, Withheld, CREDENTIAL_HEADERS};
use crate::hostname::canonical_host;
use crate::policy::EGRESS_PORT;

/// The largest request or response head the gateway reads.
pub const MAX_HEAD_BYTES: usize = 64 * 1024;
pub(super) const MAX_HEADERS: usize = 128;

/// Hop-by-hop headers the gateway owns: one request per connection, no upgrades.
pub(super) const HOP_HEADERS: [&str; 5] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "upgrade",
    "te",
];

#[derive(Debug, thiserror::Error)]
pub enum HeadReadError {
    #[error("reading the head")]
    Read(#[source] std::io::Error),
    #[error("the stream ended before a complete head")]
    Closed,
    #[error("the head exceeds {MAX_HEAD_BYTES} bytes")]
    TooLarge,
    #[error("the head is not valid HTTP/1.x")]
    Malformed(#[source] httparse::Error),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Request,
    Response,
}

/// Reads until `buf` holds one complete head; returns its length. Bytes after it (the
/// start of the body) stay in `buf`.
pub async fn read_head<R: AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut Vec<u8>,
    kind: Kind,
) -> Result<usize, HeadReadError> {
    let mut chunk = [0u8; 8192];
    loop {
        if let Some(len) = complete(buf, kind)? {
            return Ok(len);
        }
        if buf.len() >= MAX_HEAD_BYTES {
            return Err(HeadReadError::TooLarge);
        }
        let n = r.read(&mut chunk).await.map_err(HeadReadError::Read)?;
        if n == 0 {
            return Err(HeadReadError::Closed);
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

fn complete(buf: &[u8], kind: Kind) -> Result<Option<usize>, HeadReadError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let status = match kind {
        Kind::Request => httparse::Request::new(&mut headers).parse(buf),
        Kind::Response => httparse::Response::new(&mut headers).parse(buf),
    }
    .map_err(HeadReadError::Malformed)?;
    match status {
        httparse::Status::Complete(n) if n > MAX_HEAD_BYTES => Err(HeadReadError::TooLarge),
        httparse::Status::Complete(n) => Ok(Some(n)),
        httparse::Status::Partial => Ok(None),
    }
}

/// Why a request is answered by the gateway instead of being sent upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("TRACE and TRACK are refused")]
    Method,
    #[error("the Host header does not name the TLS server name")]
    HostMismatch,
    #[error("the request has no Host header, several, or a non-origin target")]
    BadRequest,
    #[error("the request body's length is ambiguous or its transfer coding unsupported")]
    BadFraming,
    #[error("the request head is too large")]
    TooLarge,
}

impl Refusal {
    pub fn status(&self) -> &'static str {
        match self {
            Refusal::Method => "405 Method Not Allowed",
            Refusal::HostMismatch => "421 Misdirected Request",
            Refusal::BadRequest | Refusal::BadFraming => "400 Bad Request",
            Refusal::TooLarge => "431 Request Header Fields Too Large",
        }
    }
}

/// The request as the box sent it, for framing its response.
#[derive(Debug, Clone, Copy)]
pub struct RequestShape {
    pub head_method: bool,
    pub http10: bool,
}

/// A request head ready for upstream, and which rule's secret it carries, if any.
pub struct Rewritten {
    pub head: Vec<u8>,
    pub injected: Option<String>,
    /// A rule whose placeholder the request carried but whose methods or paths it is
    /// outside of.
    pub withheld: Option<WithheldFrom>,
    /// How the body that follows the head ends.
    pub framing: Framing,
    /// What the response to it must look like to the box.
    pub shape: RequestShape,
}

impl std::fmt::Debug for Rewritten {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The head may hold a secret.
        f.debug_struct("Rewritten")
            .field("injected", &self.injected)
            .field("withheld", &self.withheld)
            .field("framing", &self.framing)
            .finish_non_exhaustive()
    }
}

/// Which rule's secret was withheld from a request, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WithheldFrom {
    pub rule: String,
    pub why: Withheld,
}

/// Checks and rewrites one request head for the TLS server name `sni` (canonical):
/// refuses TRACE/TRACK, a Host other than `sni`, absolute-form targets; strips every
/// credential header and the hop-by-hop ones; sets a rule's secret where the box sent
/// that rule's placeholder and `sni` is one of its hosts; adds `Connection: close`.
pub fn rewrite_request(
    head: &[u8],
    sni: &str,
    rules: &[CredentialRule],
) -> Result<Rewritten, Refusal> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        Err(httparse::Error::TooManyHeaders) => return Err(Refusal::TooLarge),
        _ => return Err(Refusal::BadRequest),
    }
    let (Some(method), Some(path), Some(version)) = (req.method, req.path, req.version) else {
        return Err(Refusal::BadRequest);
    };
    if method.eq_ignore_ascii_case("TRACE") || method.eq_ignore_ascii_case("TRACK") {
        return Err(Refusal::Method);
    }
    // Origin form only (or `OPTIONS *`): an absolute URI would name its own authority,
    // which servers prefer over Host.
    if !(path.starts_with('/') || (path == "*" && method == "OPTIONS")) {
        return Err(Refusal::BadRequest);
    }
    let mut hosts = req
        .headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("host"));
    let host = match (hosts.next(), hosts.next()) {
        (Some(h), None) => h.value,
        _ => return Err(Refusal::BadRequest),
    };
    if !host_matches(host, sni) {
        return Err(Refusal::HostMismatch);
    }
    let framing = framing(req.headers)?;
    let applicable: Vec<&CredentialRule> = rules.iter().filter(|r| r.applies_to(sni)).collect();
    let mut out = Vec::with_capacity(head.len() + 64);
    out.extend_from_slice(method.as_bytes());
    out.push(b' ');
    out.extend_from_slice(path.as_bytes());
    out.extend_from_slice(if version == 0 {
        b" HTTP/1.0\r\n"
    } else {
        b" HTTP/1.1\r\n"
    });
    let mut injected: Option<&CredentialRule> = None;
    let mut withheld = None;
    for h in req.headers.iter() {
        let name = h.name.to_ascii_lowercase();
        if HOP_HEADERS.contains(&name.as_str()) {
            continue;
        }
        let mut rules_here = applicable.iter().filter(|r| r.header == name).peekable();
        if rules_here.peek().is_some() {
            if let Some(rule) = rules_here.find(|r| r.is_placeholder(h.value)) {
                match rule.covers(method, path) {
                    Ok(()) => injected = injected.or(Some(rule)),
                    // Outside the rule's methods or paths the placeholder goes on as it
                    // came: upstream sees a credential that works nowhere.
                    Err(why) => {
                        withheld = Some(WithheldFrom {
                            rule: rule.name.clone(),
                            why,
                        });
                        push_header(&mut out, h.name.as_bytes(), h.value);
                    }
                }
            }
            continue;
        }
        // The gateway asks for `identity` itself: an encoded response could hide a secret
        // from the scrubber (`super::response`).
        if CREDENTIAL_HEADERS.contains(&name.as_str()) || name == "accept-encoding" {
            continue;
        }
        push_header(&mut out, h.name.as_bytes(), h.value);
    }
    if let Some(rule) = injected {
        push_header(&mut out, rule.header.as_bytes(), rule.secret.as_bytes());
    }
    out.extend_from_slice(b"accept-encoding: identity\r\nconnection: close\r\n\r\n");
    Ok(Rewritten {
        head: out,
        injected: injected.map(|r| r.name.clone()),
        withheld,
        framing,
        shape: RequestShape {
            head_method: method == "HEAD",
            http10: version == 0,
        },
    })
}

/// RFC 9112 §6.3, strictly: both Transfer-Encoding and Content-Length (the classic
/// smuggling ambiguity), a coding other than plain `chunked`, or differing lengths are
/// refused rather than guessed at.
fn framing(headers: &[httparse::Header<'_>]) -> Result<Framing, Refusal> {
    let mut chunked = false;
    let mut length: Option<u64> = None;
    for h in headers {
        if h.name.eq_ignore_ascii_case("transfer-encoding") {
            let value = std::str::from_utf8(h.value).map_err(|_| Refusal::BadFraming)?;
            if chunked || !value.trim().eq_ignore_ascii_case("chunked") {
                return Err(Refusal::BadFraming);
            }
            chunked = true;
        } else if h.name.eq_ignore_ascii_case("content-length") {
            let value = std::str::from_utf8(h.value).map_err(|_| Refusal::BadFraming)?;
            for part in value.split(',') {
                let part = part.trim();
                if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(Refusal::BadFraming);
                }
                let n: u64 = part.parse().map_err(|_| Refusal::BadFraming)?;
                if length.is_some_and(|l| l != n) {
                    return Err(Refusal::BadFraming);
                }
                length = Some(n);
            }
        }
    }
    match (chunked, length) {
        (true, Some(_)) => Err(Refusal::BadFraming),
        (true, None) => Ok(Framing::Chunked),
        (false, Some(n)) => Ok(Framing::Length(n)),
        (false, None) => Ok(Framing::Empty),
    }
}

/// `Host` as the box sent it, against the canonical SNI: same name, port absent or 443.
fn host_matches(host: &[u8], sni: &str) -> bool {
    let Ok(host) = std::str::from_utf8(host) else {
        return false;
    };
    let host = host.trim();
    let name = match host.rsplit_once(':') {
        Some((name, port)) if !name.contains(':') => {
            if port.parse::<u16>() != Ok(EGRESS_PORT) {
                return false;
            }
            name
        }
        _ => host,
    };
    canonical_host(name).is_ok_and(|c| c == sni)
}

fn push_header(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    const SNI: &str = "api.example.test";

    fn rules() -> Vec<CredentialRule> {
        vec![
            CredentialRule::new("k", &[SNI], "x-api-key", "berth-ph-1", "sk-real").unwrap(),
            CredentialRule::new(
                "a",
                &["auth.test"],
                "authorization",
                "berth-ph-2",
                "Bearer gh",
            )
            .unwrap(),
        ]
    }

    fn rewrite(head: &str, sni: &str) -> Result<String, Refusal> {
        rewrite_request(head.as_bytes(), sni, &rules()).map(|r| String::from_utf8(r.head).unwrap())
    }

    #[test]
    fn injects_only_for_the_placeholder_on_a_rule_host() {
        let head = "POST /v1 HTTP/1.1\r\nHost: api.example.test\r\nX-API-Key: berth-ph-1\r\nCookie: a=b\r\nAuthorization: Bearer x\r\nConnection: keep-alive\r\n\r\n";
        let out = rewrite(head, SNI).unwrap();
        assert!(out.contains("x-api-key: sk-real\r\n"), "{out}");
        assert!(!out.contains("berth-ph-1"));
        assert!(!out.to_ascii_lowercase().contains("cookie"));
        assert!(!out.contains("Bearer x"));
        assert!(out.ends_with("accept-encoding: identity\r\nconnection: close\r\n\r\n"));
        assert_eq!(out.matches("onnection").count(), 1);

        let wrong = "GET / HTTP/1.1\r\nHost: api.example.test\r\nx-api-key: other\r\n\r\n";
        let out = rewrite(wrong, SNI).unwrap();
        assert!(!out.contains("x-api-key"), "{out}");

        let bearer =
            "GET / HTTP/1.1\r\nHost: auth.test:443\r\nAuthorization: Bearer berth-ph-2\r\n\r\n";
        let out = rewrite(bearer, "auth.test").unwrap();
        assert!(out.contains("authorization: Bearer gh\r\n"), "{out}");
    }

    #[test]
    fn placeholder_of_another_hosts_rule_is_stripped_not_injected() {
        let head = "GET / HTTP/1.1\r\nHost: auth.test\r\nx-api-key: berth-ph-1\r\n\r\n";
        let out = rewrite(head, "auth.test").unwrap();
        assert!(
            !out.contains("x-api-key") && !out.contains("sk-real"),
            "{out}"
        );
    }

    #[test]
    fn refusals() {
        let trace = "TRACE / HTTP/1.1\r\nHost: api.example.test\r\n\r\n";
        assert_eq!(rewrite(trace, SNI), Err(Refusal::Method));
        let track = "track / HTTP/1.1\r\nHost: api.example.test\r\n\r\n";
        assert_eq!(rewrite(track, SNI), Err(Refusal::Method));
        let other = "GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n";
        assert_eq!(rewrite(other, SNI), Err(Refusal::HostMismatch));
        let port = "GET / HTTP/1.1\r\nHost: api.example.test:8443\r\n\r\n";
        assert_eq!(rewrite(port, SNI), Err(Refusal::HostMismatch));
        let none = "GET / HTTP/1.1\r\n\r\n";
        assert_eq!(rewrite(none, SNI), Err(Refusal::BadRequest));
        let two = "GET / HTTP/1.1\r\nHost: api.example.test\r\nhost: api.example.test\r\n\r\n";
        assert_eq!(rewrite(two, SNI), Err(Refusal::BadRequest));
        let abs = "GET http://evil.test/ HTTP/1.1\r\nHost: api.example.test\r\n\r\n";
        assert_eq!(rewrite(abs, SNI), Err(Refusal::BadRequest));
        // Upper case and a trailing dot are the same name.
        let spelled = "GET / HTTP/1.1\r\nHost: API.example.test.\r\n\r\n";
        assert!(rewrite(spelled, SNI).is_ok());
    }

    #[test]
    fn framing_is_strict() {
        let f = |extra: &str| {
            let head = format!("POST / HTTP/1.1\r\nHost: api.example.test\r\n{extra}\r\n");
            rewrite_request(head.as_bytes(), SNI, &rules()).map(|r| r.framing)
        };
        assert_eq!(f(""), Ok(Framing::Empty));
        assert_eq!(f("Content-Length: 12\r\n"), Ok(Framing::Length(12)));
        assert_eq!(f("content-length: 3, 3\r\n"), Ok(Framing::Length(3)));
        assert_eq!(f("Transfer-Encoding: Chunked\r\n"), Ok(Framing::Chunked));
        for bad in [
            "Content-Length: 3\r\nContent-Length: 4\r\n",
            "Content-Length: -1\r\n",
            "Content-Length: +3\r\n",
            "Transfer-Encoding: chunked\r\nContent-Length: 3\r\n",
            "Transfer-Encoding: gzip, chunked\r\n",
            "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
        ] {
            assert_eq!(f(bad), Err(Refusal::BadFraming), "{bad}");
        }
    }

    #[tokio::test]
    async fn read_head_keeps_the_body_start_and_caps() {
        let mut src: &[u8] = b"GET / HTTP/1.1\r\nHost: a\r\n\r\nbody";
        let mut buf = Vec::new();
        let n = read_head(&mut src, &mut buf, Kind::Request).await.unwrap();
        assert_eq!(&buf[n..], b"body");
        let big = format!("GET / HTTP/1.1\r\nx: {}\r\n", "a".repeat(MAX_HEAD_BYTES));
        let mut src = big.as_bytes();
        let err = read_head(&mut src, &mut Vec::new(), Kind::Request).await;
        assert!(matches!(err, Err(HeadReadError::TooLarge)), "{err:?}");
    }
}
