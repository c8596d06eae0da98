//! What the gateway decided about one stream, and why it refused.

use std::net::SocketAddr;

/// Where an allowed stream goes. Only `Passthrough` exists today: the gateway replays the
/// ClientHello to the vetted address and splices bytes without seeing inside TLS. A
/// credential rule will add an intercepting route (terminate TLS with the box's CA, rewrite
/// headers, re-encrypt upstream) as a second variant.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Route {
    Passthrough { addr: SocketAddr },
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
