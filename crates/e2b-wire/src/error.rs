//! What can go wrong on the wire ([`WireError`], each with its Connect [`Code`]) and the error a
//! Connect peer is sent ([`ConnectError`]: a code and a message, as a unary error body or inside
//! a stream's end message).

use serde::{Deserialize, Serialize};

use crate::code::Code;

/// A request the wire layer refuses, or a response it cannot encode.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// Not one of Connect's four content types, or a unary one on a streaming method (or the
    /// reverse). The handler answers HTTP 415 rather than a Connect error body.
    #[error("unsupported content type {content_type:?} for a {kind} call")]
    UnsupportedContentType {
        content_type: String,
        kind: crate::RpcKind,
    },
    /// `Connect-Protocol-Version` present with a value other than `1`.
    #[error("unsupported Connect protocol version {version:?} (only \"1\" is served)")]
    UnsupportedProtocolVersion { version: String },
    /// A `Connect-Timeout-Ms` that is not 1 to 10 ASCII digits.
    #[error("invalid Connect-Timeout-Ms {value:?}: must be 1 to 10 ASCII digits")]
    InvalidTimeout { value: String },
    /// A request body compressed with anything but `identity`.
    #[error("unsupported content encoding {encoding:?} (only identity is accepted)")]
    UnsupportedEncoding { encoding: String },
    /// A message longer than [`crate::MAX_MESSAGE_BYTES`], refused before it is buffered.
    #[error("message of {len_bytes} bytes is over the {limit_bytes}-byte limit")]
    MessageTooLarge { len_bytes: u64, limit_bytes: usize },
    /// An envelope whose compressed flag is set although no compression was negotiated.
    #[error("envelope marked compressed, but the request negotiated no compression")]
    CompressedWithoutEncoding,
    /// An envelope with flag bits Connect does not define.
    #[error("envelope with unknown flags {flags:#04x}")]
    UnknownEnvelopeFlags { flags: u8 },
    /// The body ended inside an envelope.
    #[error("stream ended inside an envelope ({buffered_bytes} bytes of it received)")]
    TruncatedEnvelope { buffered_bytes: usize },
    /// A message that is not valid binary protobuf for its type.
    #[error("malformed protobuf message")]
    MalformedProto(#[source] prost::DecodeError),
    /// A message that is not valid proto3 JSON for its type.
    #[error("malformed JSON message")]
    MalformedJson(#[source] serde_json::Error),
    /// A message the server built that proto3 JSON cannot express (an enum number with no name).
    #[error("response message cannot be encoded as JSON")]
    EncodeJson(#[source] serde_json::Error),
}

impl WireError {
    /// The Connect code this error is reported with.
    pub fn code(&self) -> Code {
        match self {
            WireError::UnsupportedContentType { .. } | WireError::UnsupportedEncoding { .. } => {
                Code::Unimplemented
            }
            WireError::UnsupportedProtocolVersion { .. }
            | WireError::InvalidTimeout { .. }
            | WireError::CompressedWithoutEncoding
            | WireError::UnknownEnvelopeFlags { .. }
            | WireError::TruncatedEnvelope { .. }
            | WireError::MalformedProto(_)
            | WireError::MalformedJson(_) => Code::InvalidArgument,
            WireError::MessageTooLarge { .. } => Code::ResourceExhausted,
            WireError::EncodeJson(_) => Code::Internal,
        }
    }
}

/// An error as a Connect peer receives it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ConnectError {
    pub code: Code,
    /// For the developer reading it: the SDKs put it into the exception they raise.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

impl ConnectError {
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        ConnectError {
            code,
            message: message.into(),
        }
    }

    /// The HTTP status of a unary response carrying this error.
    pub fn http_status(&self) -> http::StatusCode {
        self.code.http_status()
    }

    /// The body of a unary error response, served as `application/json` whatever the request's
    /// codec was: `{"code":"not_found","message":"…"}`.
    pub fn unary_body(&self) -> Vec<u8> {
        serde_json::json!(self).to_string().into_bytes()
    }
}

impl From<WireError> for ConnectError {
    fn from(error: WireError) -> Self {
        let mut message = error.to_string();
        let mut source = std::error::Error::source(&error);
        while let Some(cause) = source {
            message.push_str(": ");
            message.push_str(&cause.to_string());
            source = cause.source();
        }
        ConnectError::new(error.code(), message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unary_body_is_code_and_message() {
        let error = ConnectError::new(Code::NotFound, "process with pid 7 not found");
        let body: serde_json::Value = serde_json::from_slice(&error.unary_body()).unwrap();
        assert_eq!(
            body,
            serde_json::json!({"code": "not_found", "message": "process with pid 7 not found"})
        );
        assert_eq!(error.http_status(), http::StatusCode::NOT_FOUND);

        let bare = ConnectError::new(Code::Canceled, "");
        assert_eq!(bare.unary_body(), br#"{"code":"canceled"}"#);
    }

    #[test]
    fn wire_errors_map_to_their_codes_and_keep_the_cause() {
        let malformed = serde_json::from_slice::<serde_json::Value>(b"{").unwrap_err();
        let error = ConnectError::from(WireError::MalformedJson(malformed));
        assert_eq!(error.code, Code::InvalidArgument);
        assert!(
            error.message.starts_with("malformed JSON message: EOF"),
            "{}",
            error.message
        );

        let too_large = WireError::MessageTooLarge {
            len_bytes: 1 << 30,
            limit_bytes: 4 << 20,
        };
        assert_eq!(too_large.code(), Code::ResourceExhausted);
        let encoding = WireError::UnsupportedEncoding {
            encoding: "br".into(),
        };
        assert_eq!(encoding.code(), Code::Unimplemented);
    }
}
