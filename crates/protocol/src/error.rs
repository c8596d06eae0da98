//! The error body every berth HTTP surface answers with:
//! `{"error":{"code":"not_found","message":"no box named alice"}}`.

use serde::{Deserialize, Serialize};

/// Machine-readable error codes. Clients match on these; messages are for people.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    InvalidRequest,
    Unauthorized,
    NotFound,
    AlreadyExists,
    PermissionDenied,
    Conflict,
    PayloadTooLarge,
    IsADirectory,
    NotADirectory,
    NotEmpty,
    /// A FIFO, device, socket (or a symlink to one) where a regular file's bytes were asked
    /// for: reading it could block or never end.
    NotARegularFile,
    /// Too many calls of this kind at once (e.g. uploads); retry after the `Retry-After`.
    TooManyRequests,
    Unsupported,
    Timeout,
    Unavailable,
    /// The daemon's disk is (nearly) full: nothing new that takes space is accepted.
    InsufficientStorage,
    /// The call would take the tenant past a limit of its quota (set by the admin).
    QuotaExceeded,
    /// A cookie-authenticated request that changes state (or opens a WebSocket) came from
    /// another origin than berth's own: a cross-site request forgery, refused.
    BadOrigin,
    /// A request carried more than one of berth's session cookies (one was planted by a
    /// page that is not berth's): berth cannot tell which is the user's, so it uses none.
    DuplicateSessionCookie,
    Internal,
    /// A code this build does not know (a newer peer). Lenient inside.
    #[serde(other)]
    Unknown,
}

impl ErrorCode {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidRequest => "invalid_request",
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::NotFound => "not_found",
            ErrorCode::AlreadyExists => "already_exists",
            ErrorCode::PermissionDenied => "permission_denied",
            ErrorCode::Conflict => "conflict",
            ErrorCode::PayloadTooLarge => "payload_too_large",
            ErrorCode::IsADirectory => "is_a_directory",
            ErrorCode::NotADirectory => "not_a_directory",
            ErrorCode::NotEmpty => "not_empty",
            ErrorCode::NotARegularFile => "not_a_regular_file",
            ErrorCode::TooManyRequests => "too_many_requests",
            ErrorCode::Unsupported => "unsupported",
            ErrorCode::Timeout => "timeout",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::InsufficientStorage => "insufficient_storage",
            ErrorCode::QuotaExceeded => "quota_exceeded",
            ErrorCode::BadOrigin => "bad_origin",
            ErrorCode::DuplicateSessionCookie => "duplicate_session_cookie",
            ErrorCode::Internal => "internal",
            ErrorCode::Unknown => "unknown",
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorDetail {
    pub code: ErrorCode,
    pub message: String,
}

impl ErrorBody {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ErrorBody {
            error: ErrorDetail {
                code,
                message: message.into(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_body_has_the_documented_shape() {
        let body = ErrorBody::new(ErrorCode::NotFound, "no box named alice");
        let json = serde_json::to_value(&body).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"error":{"code":"not_found","message":"no box named alice"}})
        );
    }

    #[test]
    fn unknown_codes_from_a_newer_peer_still_parse() {
        let body: ErrorBody =
            serde_json::from_str(r#"{"error":{"code":"brand_new","message":"m"}}"#).unwrap();
        assert_eq!(body.error.code, ErrorCode::Unknown);
    }

    #[test]
    fn as_str_matches_serde() {
        for code in [
            ErrorCode::InvalidRequest,
            ErrorCode::PayloadTooLarge,
            ErrorCode::NotEmpty,
            ErrorCode::NotARegularFile,
            ErrorCode::TooManyRequests,
            ErrorCode::DuplicateSessionCookie,
        ] {
            assert_eq!(serde_json::to_value(code).unwrap(), code.as_str());
        }
    }
}
