//! Protocol versioning of the guest channel. See `docs/protocol.md`.
//!
//! There is one version number. Every message says which version introduced it
//! ([`crate::guest::Call::introduced_in`], matched without a wildcard arm, so adding a call
//! forces a decision). At connect time the host sends its version in the
//! [`VERSION_HEADER`]; `berth-init` answers with its own in `info`; both use the lower one,
//! and neither side sends a call newer than that.

/// A guest-channel protocol version.
pub type ProtocolVersion = u32;

/// The version this build speaks.
pub const PROTOCOL_VERSION: ProtocolVersion = 7;

/// The oldest version this build still speaks.
pub const MIN_PROTOCOL_VERSION: ProtocolVersion = 1;

/// Request header carrying the caller's protocol version.
pub const VERSION_HEADER: &str = "berth-protocol";

/// The version both sides use, or `None` when the peer is too old for us.
pub fn negotiate(peer: ProtocolVersion) -> Option<ProtocolVersion> {
    let agreed = peer.min(PROTOCOL_VERSION);
    (agreed >= MIN_PROTOCOL_VERSION).then_some(agreed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agrees_on_the_lower_version() {
        assert_eq!(negotiate(PROTOCOL_VERSION + 5), Some(PROTOCOL_VERSION));
        assert_eq!(negotiate(PROTOCOL_VERSION), Some(PROTOCOL_VERSION));
        assert_eq!(negotiate(0), None);
    }
}
