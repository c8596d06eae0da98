//! Why a tool call failed. Each becomes, in one place ([`crate::handler`]), a tool error
//! result whose text a model can act on: berth's own message, and what to do next.

use berth_protocol::{ErrorBody, ErrorCode};
use http::StatusCode;

use crate::api::{BoxError, TransportError};

#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// The arguments do not fit the tool's input schema.
    #[error("invalid arguments for {tool}: {source}")]
    Arguments {
        tool: &'static str,
        #[source]
        source: serde_json::Error,
    },

    #[error("no tool named {name:?}: tools/list shows them")]
    UnknownTool { name: String },

    /// An argument has the right type but a value the tool cannot take.
    #[error("invalid argument {field}: {reason}")]
    Argument {
        field: &'static str,
        reason: &'static str,
    },

    #[error("content is {bytes} bytes; box_write_file writes at most {max} (copy larger files with `berth cp`)")]
    WriteTooLarge { bytes: usize, max: usize },

    #[error("content is not valid base64")]
    Base64(#[source] base64::DecodeError),

    /// berth refused the call, with its error body.
    #[error("{message} (berth answered {} {code}){}", status.as_u16(), hint(*code, message))]
    Api {
        status: StatusCode,
        code: ErrorCode,
        message: String,
    },

    /// Something answered, but not with berth's error body.
    #[error("berth answered {status} without an error body: {excerpt}")]
    Unexpected { status: StatusCode, excerpt: String },

    /// The command could not be started in the box (the exec stream's `error` frame).
    #[error("the command could not run: {message} ({code})")]
    ExecFailed { code: ErrorCode, message: String },

    #[error("cannot reach berth: {0}")]
    Transport(#[from] TransportError),

    #[error("reading berth's answer failed")]
    Body {
        #[source]
        source: BoxError,
    },

    #[error("berth's answer is not the JSON expected ({what})")]
    Decode {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },

    #[error("berth's answer ({what}) is over {limit_bytes} bytes; not read")]
    TooLarge {
        what: &'static str,
        limit_bytes: usize,
    },

    #[error("the exec stream sent a frame over {limit_bytes} bytes")]
    FrameTooLong { limit_bytes: usize },

    #[error("the exec stream ended before the command's exit")]
    ExecCut,

    #[error("the event stream ended before the turn's answer")]
    EventsEnded,

    /// An `/mcp` request reached a tool without the key the daemon's middleware puts there.
    #[error("this MCP request carries no berth API key (send `Authorization: Bearer <key>`)")]
    NoCaller,
}

impl ToolError {
    /// berth's error body, or an excerpt of whatever else answered.
    pub fn from_answer(status: StatusCode, body: &[u8]) -> ToolError {
        match serde_json::from_slice::<ErrorBody>(body) {
            Ok(body) => ToolError::Api {
                status,
                code: body.error.code,
                message: body.error.message,
            },
            Err(_) => {
                let text = String::from_utf8_lossy(body);
                let mut excerpt: String = text.trim().chars().take(200).collect();
                if excerpt.is_empty() {
                    excerpt = "(no body)".into();
                }
                ToolError::Unexpected { status, excerpt }
            }
        }
    }
}

/// What a model should do next, by berth's code (and message, for "no box").
fn hint(code: ErrorCode, message: &str) -> &'static str {
    match code {
        ErrorCode::NotFound if message.starts_with("no box") => {
            "; this API key sees only its own tenant's boxes: box_list shows them"
        }
        ErrorCode::Unauthorized => "; the API key was refused: check the MCP client's key",
        ErrorCode::TooManyRequests => "; retry in a second",
        ErrorCode::Conflict => "; the box changed under the call: retry",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn berth_errors_keep_its_message_and_say_what_next() {
        let body = br#"{"error":{"code":"not_found","message":"no box \"alice\""}}"#;
        let err = ToolError::from_answer(StatusCode::NOT_FOUND, body);
        assert_eq!(
            err.to_string(),
            "no box \"alice\" (berth answered 404 not_found); this API key sees only its own \
             tenant's boxes: box_list shows them"
        );
        let err = ToolError::from_answer(StatusCode::BAD_GATEWAY, b"<html>oops</html>");
        assert_eq!(
            err.to_string(),
            "berth answered 502 Bad Gateway without an error body: <html>oops</html>"
        );
    }
}
