//! berth's errors as an envd client is told them: the code and message berth's own API
//! would answer with (`api/error.rs` decides both, and logs server failures once), in
//! Connect's vocabulary.

use berth_e2b_wire::{Code, ConnectError};
use berth_protocol::ErrorCode;
use http::StatusCode;

use crate::api::error::ApiError;

/// `error` as a Connect error, with the same words berth's API would use.
pub fn connect_error(error: impl Into<ApiError>) -> ConnectError {
    let error = error.into();
    let (status, code) = error.status_and_code();
    if status.is_server_error() {
        tracing::error!(status = status.as_u16(), code = %code, error = %berth_runtime::error_chain(&error), "envd call failed");
    }
    ConnectError::new(connect_code(code, status), error.message(status))
}

/// berth's error code in Connect's terms. The SDKs raise by code: `not_found` becomes
/// `NotFoundException`, `invalid_argument` `InvalidArgumentException`, `deadline_exceeded`
/// `TimeoutException`, and so on.
pub fn connect_code(code: ErrorCode, status: StatusCode) -> Code {
    match code {
        ErrorCode::InvalidRequest
        | ErrorCode::IsADirectory
        | ErrorCode::NotADirectory
        | ErrorCode::NotARegularFile
        | ErrorCode::BadOrigin
        | ErrorCode::DuplicateSessionCookie => Code::InvalidArgument,
        ErrorCode::Unauthorized => Code::Unauthenticated,
        ErrorCode::NotFound => Code::NotFound,
        ErrorCode::AlreadyExists => Code::AlreadyExists,
        ErrorCode::PermissionDenied => Code::PermissionDenied,
        ErrorCode::Conflict | ErrorCode::NotEmpty => Code::FailedPrecondition,
        ErrorCode::PayloadTooLarge
        | ErrorCode::TooManyRequests
        | ErrorCode::InsufficientStorage
        | ErrorCode::QuotaExceeded => Code::ResourceExhausted,
        ErrorCode::Unsupported => Code::Unimplemented,
        ErrorCode::Timeout => Code::DeadlineExceeded,
        ErrorCode::Unavailable => Code::Unavailable,
        ErrorCode::Internal => Code::Internal,
        ErrorCode::Unknown if status.is_server_error() => Code::Internal,
        ErrorCode::Unknown => Code::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sdks_exceptions_follow_berths_codes() {
        let ok = StatusCode::BAD_REQUEST;
        assert_eq!(connect_code(ErrorCode::NotFound, ok), Code::NotFound);
        assert_eq!(connect_code(ErrorCode::Timeout, ok), Code::DeadlineExceeded);
        assert_eq!(
            connect_code(ErrorCode::IsADirectory, ok),
            Code::InvalidArgument
        );
        assert_eq!(
            connect_code(ErrorCode::Unknown, StatusCode::BAD_GATEWAY),
            Code::Internal
        );
    }
}
