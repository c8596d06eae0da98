//! The egress gateway (ARCHITECTURE.md "Egress"): every byte a box sends out arrives here
//! over the box's own egress channel, is checked (TLS ClientHello SNI against the box's
//! allowlist, 443 only, the resolved address against private ranges), dialled and spliced,
//! and each decision is one JSON line in the audit log.
//!
//! Pure checks, no I/O: [`client_hello`], [`hostname`], [`policy`], [`address`].
//! The gateway's I/O: [`gateway`]; TLS interception for credential rules: [`intercept`].

pub mod address;
pub mod client_hello;
pub mod gateway;
pub mod hostname;
pub mod intercept;
pub mod policy;
