//! The wire of E2B's in-sandbox API ("envd"), so that berth can serve the official E2B SDKs:
//! the message types of its two Connect services and the Connect protocol's encodings. Types and
//! encoding only: no I/O, no HTTP server, no async.
//!
//! - [`process`], [`filesystem`]: the messages of `process.Process` and `filesystem.Filesystem`,
//!   generated from E2B's own `.proto` files (vendored in `proto/`, see its README), with both
//!   codecs: binary protobuf (prost) and proto3 JSON (serde).
//! - [`Codec`]: which of the two a call uses, from its Content-Type, and
//!   [`encode`](Codec::encode)/[`decode`](Codec::decode) of a message in it.
//! - [`envelope`]: a streaming body's framing: [`EnvelopeDecoder`] reads a request stream from
//!   chunks as they arrive; [`envelope::encode_message`] and [`envelope::encode_end_stream`]
//!   write a response stream.
//! - [`headers`]: the Connect header names and the checks of `Connect-Protocol-Version` and of
//!   the content encoding (identity only: neither SDK compresses, see that module).
//! - [`parse_timeout`] reads `Connect-Timeout-Ms`.
//! - [`Timestamp`]: `google.protobuf.Timestamp` (`EntryInfo.modified_time`), written as the
//!   SDKs' parsers require.
//! - [`ConnectError`] (a [`Code`] and a message) is what a client is told; [`WireError`] is
//!   what this crate refuses, each with its code.
//!
//! # Serving a call
//!
//! A method's path is `/<service>/<Method>` ([`process::SERVICE`], [`filesystem::SERVICE`]);
//! whether it is unary or streaming comes from the proto (`Start`, `Connect`, `WatchDir` stream
//! responses; `StreamInput` streams its request). For a request:
//!
//! 1. [`Codec::from_content_type`] with the method's [`RpcKind`]; its error is answered with
//!    HTTP 415.
//! 2. [`headers::check_protocol_version`], [`headers::check_content_encoding`] (of
//!    [`RpcKind::content_encoding_header`]), and [`parse_timeout`] when
//!    [`headers::CONNECT_TIMEOUT_MS`] is present.
//! 3. Unary: read the body with a limit of [`MAX_MESSAGE_BYTES`] (a longer one is
//!    [`WireError::MessageTooLarge`]), then [`Codec::decode`]. Streaming request: feed the body's
//!    chunks to an [`EnvelopeDecoder`] and decode each [`Frame::Message`].
//! 4. Unary answer: 200 with [`Codec::encode`] of the response and
//!    [`Codec::content_type`]; or [`ConnectError::http_status`] with
//!    [`ConnectError::unary_body`] as `application/json`. Streaming answer: 200 with
//!    [`Codec::content_type`], then [`envelope::encode_message`] per message and one
//!    [`envelope::encode_end_stream`], which carries the error if there was one.
//!
//! Every [`WireError`] becomes a client's error through `ConnectError::from`, which keeps the
//! error's cause chain in the message.
//!
//! # Limits
//!
//! One message is at most [`MAX_MESSAGE_BYTES`] (4 MiB; why that number is at its definition),
//! refused from an envelope's header before its payload is buffered.
//!
//! # Compatibility notes
//!
//! The protos are those of E2B commit `b8029973a`. The pinned Python SDK (2.63.0) was generated
//! from a later `filesystem.proto` that adds `bool is_symlink = 12` to `EntryInfo`, which the
//! npm SDK (2.51.0) does not know. Without it the Python SDK takes a symlink's type from
//! `type`, as it does for an older envd, so the handlers report a symlink as `FILE_TYPE_SYMLINK`
//! in `type`, which both SDKs read the same way. A field or enum name this crate does not know is
//! skipped when decoding either codec, as envd's own codecs skip it.

pub mod code;
pub mod codec;
pub mod envelope;
pub mod error;
pub mod filesystem;
pub mod headers;
pub mod process;
pub mod timeout;
pub mod timestamp;

pub use code::Code;
pub use codec::{Codec, RpcKind, WireMessage, MAX_MESSAGE_BYTES};
pub use envelope::{EnvelopeDecoder, Frame};
pub use error::{ConnectError, WireError};
pub use timeout::parse_timeout;
pub use timestamp::Timestamp;
