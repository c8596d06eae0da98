//! The Connect request headers berth reads (and envd's keepalive one), and the checks on them
//! that are not the timeout's (see [`crate::timeout`]): protocol version and content encoding.
//!
//! Compression: identity only. Neither pinned SDK compresses a Connect message or asks for a
//! compressed one: the Python SDK (`e2b` 2.63.0, `e2b/envd/client_shared.py`) passes
//! `send_compression=None, accept_compression=()` to connectrpc, so it sends
//! `Connect-Accept-Encoding: identity` (`Accept-Encoding: identity` on unary calls) and no
//! content encoding; the npm SDK (`e2b` 2.51.0) uses connect-web, which has no compression.
//! Their gzip options are for the plain `/files` endpoint, not for Connect. A client that
//! compresses anyway is refused with `unimplemented`, which the Connect protocol prescribes for
//! an encoding the server does not support; the handler adds [`ACCEPTED_ENCODINGS`] as the
//! matching accept header. A client's accept header needs no check: a response in identity is
//! always acceptable.

use http::HeaderName;

use crate::codec::RpcKind;
use crate::error::WireError;

/// `Connect-Protocol-Version`, which Connect clients send (browsers must).
pub const CONNECT_PROTOCOL_VERSION: HeaderName =
    HeaderName::from_static("connect-protocol-version");
/// The only protocol version there is.
pub const CONNECT_PROTOCOL_VERSION_VALUE: &str = "1";
/// `Connect-Timeout-Ms`: the client's deadline for the whole call.
pub const CONNECT_TIMEOUT_MS: HeaderName = HeaderName::from_static("connect-timeout-ms");
/// A streaming call's per-message compression (unary calls use HTTP's `Content-Encoding`).
pub const CONNECT_CONTENT_ENCODING: HeaderName =
    HeaderName::from_static("connect-content-encoding");
/// A streaming call's accepted response compressions (unary calls use `Accept-Encoding`).
pub const CONNECT_ACCEPT_ENCODING: HeaderName = HeaderName::from_static("connect-accept-encoding");
/// envd's own header on a streaming call (`Start`, `Connect`, `WatchDir`): the interval, in
/// whole seconds, at which the client wants a `KeepAlive` event while the stream is quiet. Both
/// SDKs send `50`.
pub const KEEPALIVE_PING_INTERVAL: HeaderName = HeaderName::from_static("keepalive-ping-interval");
/// The value of the accept-encoding header berth answers with when it refuses an encoding.
pub const ACCEPTED_ENCODINGS: &str = "identity";

impl RpcKind {
    /// The header that says how this kind of call's request body is compressed.
    pub fn content_encoding_header(self) -> HeaderName {
        match self {
            RpcKind::Unary => http::header::CONTENT_ENCODING,
            RpcKind::Streaming => CONNECT_CONTENT_ENCODING,
        }
    }

    /// The header that lists the compressions this kind of call accepts.
    pub fn accept_encoding_header(self) -> HeaderName {
        match self {
            RpcKind::Unary => http::header::ACCEPT_ENCODING,
            RpcKind::Streaming => CONNECT_ACCEPT_ENCODING,
        }
    }
}

/// Accepts a request whose `Connect-Protocol-Version` is absent (connect-go and connect-python
/// servers do not require it) or `1`.
pub fn check_protocol_version(value: Option<&str>) -> Result<(), WireError> {
    match value {
        None | Some(CONNECT_PROTOCOL_VERSION_VALUE) => Ok(()),
        Some(other) => Err(WireError::UnsupportedProtocolVersion {
            version: other.to_owned(),
        }),
    }
}

/// Accepts a request body that is not compressed: the value of
/// [`RpcKind::content_encoding_header`] is absent or `identity` (in any case).
pub fn check_content_encoding(value: Option<&str>) -> Result<(), WireError> {
    match value.map(str::trim) {
        None => Ok(()),
        Some(encoding) if encoding.eq_ignore_ascii_case("identity") => Ok(()),
        Some(encoding) => Err(WireError::UnsupportedEncoding {
            encoding: encoding.to_owned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::code::Code;

    #[test]
    fn protocol_version_one_or_absent() {
        assert!(check_protocol_version(None).is_ok());
        assert!(check_protocol_version(Some("1")).is_ok());
        for bad in ["2", "", " 1", "1.0"] {
            let error = check_protocol_version(Some(bad)).unwrap_err();
            assert_eq!(error.code(), Code::InvalidArgument, "{bad:?}");
        }
    }

    #[test]
    fn only_identity_content_encoding() {
        assert!(check_content_encoding(None).is_ok());
        assert!(check_content_encoding(Some("identity")).is_ok());
        assert!(check_content_encoding(Some("Identity ")).is_ok());
        for bad in ["gzip", "br", "zstd", "gzip, identity", ""] {
            let error = check_content_encoding(Some(bad)).unwrap_err();
            assert_eq!(error.code(), Code::Unimplemented, "{bad:?}");
        }
    }

    #[test]
    fn each_kind_reads_its_own_encoding_headers() {
        assert_eq!(
            RpcKind::Unary.content_encoding_header(),
            http::header::CONTENT_ENCODING
        );
        assert_eq!(
            RpcKind::Streaming.content_encoding_header().as_str(),
            "connect-content-encoding"
        );
        assert_eq!(
            RpcKind::Streaming.accept_encoding_header().as_str(),
            "connect-accept-encoding"
        );
    }
}
