//! The two codecs a Connect message travels in (binary protobuf and proto3 JSON), chosen by the
//! request's Content-Type, and the one limit on a message's size.

use std::fmt;

use crate::error::WireError;

/// The largest message, in bytes, berth decodes: a unary request body, or one envelope's payload
/// in a stream (before decompression, were any accepted).
///
/// envd itself sets no limit (connect-go's handlers accept any size unless `WithReadMaxBytes` is
/// given, and envd's `Handle` functions give none), so the number is ours. 4 MiB is gRPC's
/// default receive limit, which the Connect ecosystem inherits: no SDK call sends more in one
/// message. The largest requests are `SendInput`/`StreamInput` chunks of stdin or PTY input,
/// which the SDKs send as the caller writes them, and file contents never travel through
/// Connect (they go over the plain `/files` HTTP endpoint). Responses are not bounded by this:
/// berth builds them.
pub const MAX_MESSAGE_BYTES: usize = 4 << 20;

/// What a generated envd message can do: both codecs and a default.
pub trait WireMessage:
    prost::Message + serde::Serialize + serde::de::DeserializeOwned + Default
{
}

impl<M> WireMessage for M where
    M: prost::Message + serde::Serialize + serde::de::DeserializeOwned + Default
{
}

/// Whether a call sends bare messages (unary) or enveloped ones (streaming). A method's kind
/// comes from its proto definition; Content-Type must agree with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RpcKind {
    Unary,
    Streaming,
}

impl fmt::Display for RpcKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RpcKind::Unary => "unary",
            RpcKind::Streaming => "streaming",
        })
    }
}

/// A message encoding. Both pinned SDKs send JSON; binary protobuf is served for any other
/// Connect client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Codec {
    Json,
    Proto,
}

impl Codec {
    /// The codec a request's Content-Type names for a call of `kind`. Parameters after `;`
    /// (`charset=utf-8`) are tolerated, as connect-go and connect-python tolerate them; the
    /// media type is matched without regard to case.
    pub fn from_content_type(content_type: &str, kind: RpcKind) -> Result<Codec, WireError> {
        let media_type = content_type
            .split(';')
            .next()
            .unwrap_or_default()
            .trim()
            .to_ascii_lowercase();
        [Codec::Json, Codec::Proto]
            .into_iter()
            .find(|codec| codec.content_type(kind) == media_type)
            .ok_or_else(|| WireError::UnsupportedContentType {
                content_type: content_type.to_owned(),
                kind,
            })
    }

    /// The Content-Type of a response in this codec.
    pub const fn content_type(self, kind: RpcKind) -> &'static str {
        match (self, kind) {
            (Codec::Json, RpcKind::Unary) => "application/json",
            (Codec::Proto, RpcKind::Unary) => "application/proto",
            (Codec::Json, RpcKind::Streaming) => "application/connect+json",
            (Codec::Proto, RpcKind::Streaming) => "application/connect+proto",
        }
    }

    /// A message's bytes in this codec. JSON is proto3 JSON: camelCase names, fields at their
    /// default left out, bytes as base64, 64-bit integers as strings, enums by name.
    pub fn encode<M: WireMessage>(self, message: &M) -> Result<Vec<u8>, WireError> {
        match self {
            Codec::Proto => Ok(message.encode_to_vec()),
            Codec::Json => serde_json::to_vec(message).map_err(WireError::EncodeJson),
        }
    }

    /// A message read from `bytes`. Unknown fields are skipped in both codecs (a newer SDK's
    /// additions), as envd's connect-go codecs skip them; JSON accepts the proto field names
    /// as well as the camelCase ones.
    pub fn decode<M: WireMessage>(self, bytes: &[u8]) -> Result<M, WireError> {
        if bytes.len() > MAX_MESSAGE_BYTES {
            return Err(WireError::MessageTooLarge {
                len_bytes: bytes.len() as u64,
                limit_bytes: MAX_MESSAGE_BYTES,
            });
        }
        match self {
            Codec::Proto => M::decode(bytes).map_err(WireError::MalformedProto),
            Codec::Json => serde_json::from_slice(bytes).map_err(WireError::MalformedJson),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::{process_selector::Selector, ProcessSelector, SendSignalRequest, Signal};

    #[test]
    fn content_types_pick_codec_and_must_match_the_call_kind() {
        let pick = Codec::from_content_type;
        assert_eq!(
            pick("application/json", RpcKind::Unary).unwrap(),
            Codec::Json
        );
        assert_eq!(
            pick("application/proto", RpcKind::Unary).unwrap(),
            Codec::Proto
        );
        let streaming = RpcKind::Streaming;
        assert_eq!(
            pick("application/connect+json", streaming).unwrap(),
            Codec::Json
        );
        assert_eq!(
            pick("application/connect+proto", streaming).unwrap(),
            Codec::Proto
        );
        assert_eq!(
            pick("Application/JSON; charset=utf-8", RpcKind::Unary).unwrap(),
            Codec::Json
        );
        for (content_type, kind) in [
            ("application/connect+json", RpcKind::Unary),
            ("application/json", RpcKind::Streaming),
            ("application/grpc", RpcKind::Streaming),
            ("application/grpc-web+proto", RpcKind::Streaming),
            ("text/plain", RpcKind::Unary),
            ("application/jsonx", RpcKind::Unary),
            ("", RpcKind::Unary),
        ] {
            let error = pick(content_type, kind).unwrap_err();
            assert!(
                matches!(error, WireError::UnsupportedContentType { .. }),
                "{content_type} {kind}: {error}"
            );
        }
    }

    #[test]
    fn json_decode_skips_unknown_fields_and_enum_names_and_takes_proto_names() {
        let json = br#"{"process":{"pid":7,"futurePid":8},"signal":"SIGNAL_SIGTERM","extra":[1,{"a":null}]}"#;
        let request: SendSignalRequest = Codec::Json.decode(json).unwrap();
        assert_eq!(request.signal(), Signal::Sigterm);
        assert_eq!(request.process.unwrap().selector, Some(Selector::Pid(7)));

        let newer_signal = br#"{"signal":"SIGNAL_SIGHUP"}"#;
        let request: SendSignalRequest = Codec::Json.decode(newer_signal).unwrap();
        assert_eq!(request.signal(), Signal::Unspecified);

        let snake: crate::filesystem::CreateWatcherResponse =
            Codec::Json.decode(br#"{"watcher_id":"w1"}"#).unwrap();
        assert_eq!(snake.watcher_id, "w1");
    }

    #[test]
    fn malformed_messages_are_invalid_argument() {
        for bytes in [&b""[..], b"{", b"[]", b"null", br#"{"signal":true}"#] {
            let error = Codec::Json.decode::<SendSignalRequest>(bytes).unwrap_err();
            assert!(matches!(error, WireError::MalformedJson(_)), "{bytes:?}");
        }
        // Field 1 says "length-delimited, 100 bytes", and 2 follow.
        let error = Codec::Proto
            .decode::<SendSignalRequest>(&[0x0a, 100, 1, 2])
            .unwrap_err();
        assert!(matches!(error, WireError::MalformedProto(_)), "{error}");
    }

    #[test]
    fn an_oversized_unary_body_is_refused_before_parsing() {
        let body = vec![b' '; MAX_MESSAGE_BYTES + 1];
        let error = Codec::Json.decode::<ProcessSelector>(&body).unwrap_err();
        assert!(
            matches!(error, WireError::MessageTooLarge { .. }),
            "{error}"
        );
    }
}
