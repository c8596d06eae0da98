//! What the gateway decided about one stream, and why it refused.

use std::net::SocketAddr;

/// Where an allowed stream goes. `Passthrough`: the gateway replays the ClientHello to the
/// vetted address and splices bytes without seeing inside TLS. `Intercept` (the host has a
/// credential rule): it terminates TLS with the box's CA, rewrites the request head and
/// re-encrypts to the vetted address (`crate::intercept`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Route {
    Passthrough { addr: SocketAddr },
    Intercept { addr: SocketAddr },
}

/// Why a stream was refused. [`DenyReason::code`] is the `reason` field of the audit line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DenyReason {
    /// The name is not on the box's allowlist.
    NotAllowed,
    /// The CONNECT target's port is not 443.
    Port,
    /// The CONNECT request is malformed (bad request line, no port, too long).
    BadConnect,
    /// The ClientHello carries no server_name.
    NoSni,
    /// The SNI differs from the CONNECT host.
    SniMismatch,
    /// The client offers Encrypted ClientHello, which would hide the real name.
    Ech,
    /// The SNI or CONNECT host is an IP address literal.
    IpLiteral,
    /// The SNI or CONNECT host is not a valid public DNS name.
    BadHost,
    /// Every address the name resolves to is forbidden; this is the first one's class.
    ForbiddenAddress(&'static str),
    ResolveFailed,
    DialFailed,
    /// The box was too slow sending the preamble or the ClientHello, or the dial timed out.
    Timeout,
    /// The first bytes are not a TLS ClientHello (or one too large or malformed).
    BadClientHello,
    /// The box closed the stream before a decision could be made.
    ClosedEarly,
    /// The gateway is shutting down this box's listener.
    Shutdown,
    /// Intercepted: the request is TRACE or TRACK.
    MethodRefused,
    /// Intercepted: the `Host` header does not name the TLS server name.
    HostMismatch,
    /// Intercepted: the request head is malformed, too large, has no single `Host`, or an
    /// absolute-form target.
    BadRequest,
    /// Intercepted: the box's TLS handshake failed (it does not trust its CA, no common
    /// ALPN protocol, …).
    BoxTls,
    /// Intercepted: the TLS handshake with upstream failed (untrusted certificate, …) or
    /// the request could not be written.
    UpstreamTls,
    /// Intercepted: the gateway could not set up interception (leaf minting, TLS config).
    InterceptFailed,
    /// Intercepted: the response was encoded (`Content-Encoding` other than `identity`,
    /// although the gateway asked for `identity`), so it could hide a secret from the
    /// scrubber; the box got a 502. The request had gone upstream.
    EncodedResponse,
    /// The box already has `max_connections_per_box` connections open.
    TooManyConnections,
    /// A socket was handed over by a process that is not the box's init, or not as one
    /// connected TCP socket with the marker byte (`berth_handoff`): closed unread.
    HandoffRefused,
}

impl DenyReason {
    pub fn code(&self) -> String {
        match self {
            DenyReason::NotAllowed => "not_allowed".into(),
            DenyReason::Port => "port".into(),
            DenyReason::BadConnect => "bad_connect".into(),
            DenyReason::NoSni => "no_sni".into(),
            DenyReason::SniMismatch => "sni_mismatch".into(),
            DenyReason::Ech => "ech".into(),
            DenyReason::IpLiteral => "ip_literal".into(),
            DenyReason::BadHost => "bad_host".into(),
            DenyReason::ForbiddenAddress(class) => format!("forbidden_address:{class}"),
            DenyReason::ResolveFailed => "resolve_failed".into(),
            DenyReason::DialFailed => "dial_failed".into(),
            DenyReason::Timeout => "timeout".into(),
            DenyReason::BadClientHello => "bad_client_hello".into(),
            DenyReason::ClosedEarly => "closed_early".into(),
            DenyReason::Shutdown => "shutdown".into(),
            DenyReason::MethodRefused => "method_refused".into(),
            DenyReason::HostMismatch => "host_mismatch".into(),
            DenyReason::BadRequest => "bad_request".into(),
            DenyReason::BoxTls => "box_tls".into(),
            DenyReason::UpstreamTls => "upstream_tls".into(),
            DenyReason::InterceptFailed => "intercept_failed".into(),
            DenyReason::EncodedResponse => "encoded_response".into(),
            DenyReason::TooManyConnections => "too_many_connections".into(),
            DenyReason::HandoffRefused => "handoff_refused".into(),
        }
    }

    /// The status line berth-init's CONNECT proxy passes back to the client.
    pub(crate) fn connect_status(&self) -> &'static str {
        match self {
            DenyReason::BadConnect => "400 Bad Request",
            DenyReason::ResolveFailed | DenyReason::DialFailed => "502 Bad Gateway",
            DenyReason::Timeout => "408 Request Timeout",
            DenyReason::Shutdown => "503 Service Unavailable",
            _ => "403 Forbidden",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_the_audit_vocabulary() {
        assert_eq!(
            DenyReason::ForbiddenAddress("loopback").code(),
            "forbidden_address:loopback"
        );
        assert_eq!(DenyReason::SniMismatch.code(), "sni_mismatch");
        assert_eq!(DenyReason::Port.connect_status(), "403 Forbidden");
    }
}
