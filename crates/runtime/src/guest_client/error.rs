//! What a guest-channel call can fail with, and the code a client is shown.

use std::path::PathBuf;

use berth_protocol::guest::Call;
use berth_protocol::{ErrorBody, ErrorCode, ProtocolVersion};

use super::GuestAddr;

/// A boxed error from an upload's source body (the HTTP client of the daemon).
pub type BodyError = Box<dyn std::error::Error + Send + Sync>;

#[derive(Debug, thiserror::Error)]
pub enum GuestError {
    #[error("cannot connect to the guest agent at {addr:?}")]
    Connect {
        addr: GuestAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("hybrid vsock handshake with {path:?} failed: {reply}")]
    Handshake { path: PathBuf, reply: String },
    #[error("guest channel HTTP error")]
    Http(#[from] hyper::Error),
    /// The agent answered with an error body.
    #[error("guest agent answered {status}: {} ({})", body.error.message, body.error.code)]
    Remote { status: u16, body: ErrorBody },
    #[error("cannot decode the guest agent's answer")]
    Decode(#[from] serde_json::Error),
    #[error(
        "guest agent speaks protocol {agent}, this host needs at least {}",
        berth_protocol::version::MIN_PROTOCOL_VERSION
    )]
    Version { agent: ProtocolVersion },
    /// The call came with a later protocol version than the one agreed with this agent.
    #[error("the box's agent speaks protocol {agent}; {call:?} needs protocol {needs}")]
    Unsupported {
        call: Call,
        needs: ProtocolVersion,
        agent: ProtocolVersion,
    },
    /// The agent sent more than the protocol allows in one piece: everything the host reads
    /// from a guest is bounded, since a VM's root controls the agent's side.
    #[error("the box's agent sent a {what} longer than {limit_bytes} bytes")]
    TooLong {
        what: &'static str,
        limit_bytes: u64,
    },
    /// An upload passed the largest file the channel carries.
    #[error("the upload is larger than the limit of {limit_bytes} bytes")]
    UploadTooLarge { limit_bytes: u64 },
    /// The upload's own body failed (the client went away, or sent a broken body).
    #[error("cannot read the upload")]
    UploadBody(#[source] BodyError),
    /// An upgrade call did not become a stream as the protocol says.
    #[error("the box's agent broke an upgrade: {reason}")]
    BadUpgrade { reason: &'static str },
    /// A streamed answer ended before the part every such answer starts with.
    #[error("the box's agent ended its answer before the {what}")]
    Cut { what: &'static str },
}

impl GuestError {
    /// The error code to show a client: the agent's own for remote errors.
    pub fn code(&self) -> ErrorCode {
        match self {
            GuestError::Remote { body, .. } => body.error.code,
            GuestError::Connect { .. }
            | GuestError::Handshake { .. }
            | GuestError::Http(_)
            | GuestError::Cut { .. } => ErrorCode::Unavailable,
            GuestError::Unsupported { .. } => ErrorCode::Unsupported,
            GuestError::TooLong { .. } | GuestError::UploadTooLarge { .. } => {
                ErrorCode::PayloadTooLarge
            }
            GuestError::UploadBody(_) => ErrorCode::InvalidRequest,
            GuestError::Decode(_) | GuestError::Version { .. } | GuestError::BadUpgrade { .. } => {
                ErrorCode::Internal
            }
        }
    }
}
