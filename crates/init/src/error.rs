//! Errors of the agent API, and the one place they become an HTTP status and an
//! [`ErrorBody`] (or, inside an exec stream, an `error` frame's code).

use std::io;

use berth_protocol::version::{MIN_PROTOCOL_VERSION, PROTOCOL_VERSION};
use berth_protocol::{ErrorBody, ErrorCode};
use http::StatusCode;

/// Everything an API call can fail with.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("missing or wrong bearer token")]
    Unauthorized,
    #[error(
        "protocol version {peer:?} is not supported: this agent speaks {MIN_PROTOCOL_VERSION} to {PROTOCOL_VERSION}"
    )]
    Version { peer: String },
    #[error("no route for {method} {path}")]
    NoRoute { method: http::Method, path: String },
    #[error("invalid JSON body")]
    BadJson(#[source] serde_json::Error),
    #[error("invalid query parameter {name:?}: {reason}")]
    BadQuery {
        name: &'static str,
        reason: &'static str,
    },
    #[error("path {path:?} must be absolute and contain no NUL byte")]
    BadPath { path: String },
    #[error("argv must name a program")]
    EmptyArgv,
    #[error("argv and env must not contain NUL bytes")]
    NulInExec,
    #[error("body larger than the limit of {limit_bytes} bytes")]
    TooLarge { limit_bytes: u64 },
    #[error("cannot read the request body")]
    Body(#[source] hyper::Error),
    #[error("{op} {path:?}: {source}")]
    Fs {
        op: &'static str,
        path: String,
        #[source]
        source: io::Error,
    },
    #[error("refusing to remove /")]
    RemoveRoot,
    #[error("refusing to move / or onto /")]
    MoveRoot,
    #[error("{path:?} is not a regular file (a FIFO, device or socket, or a symlink to one): its bytes are not read")]
    NotRegularFile { path: String },
    #[error("the file worker stopped unexpectedly")]
    Worker,
    #[error("archive entry {entry:?} {reason}: nothing was written for it or after it")]
    UnsafeEntry { entry: String, reason: &'static str },
    #[error("not a valid tar archive")]
    BadArchive(#[source] io::Error),
    #[error("archive entry {entry:?}: {reason}")]
    UnsupportedEntry { entry: String, reason: &'static str },
    #[error("cannot watch")]
    Watch(#[source] io::Error),
    #[error("{limit} {what} are running already; try again when one has ended")]
    Busy { what: &'static str, limit: usize },
    #[error("the harness is unavailable: {reason}")]
    HarnessUnavailable { reason: String },
    #[error("the harness did not take message {id} within {after_ms} ms")]
    DeliverTimeout { id: String, after_ms: u64 },
    #[error("cannot {op}")]
    Journal {
        op: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("this call is an HTTP upgrade: send `Connection: upgrade` and `Upgrade: {protocol}`")]
    NeedsUpgrade { protocol: &'static str },
    #[error("port {port} is berth's egress listener, not a program of the box")]
    ReservedPort { port: u16 },
    #[error("nothing accepts connections on port {port} in the box: {source}")]
    PortClosed {
        port: u16,
        #[source]
        source: io::Error,
    },
    #[error("cannot hand the port's connection to the host")]
    Handoff(#[source] io::Error),
    #[error("invalid terminal request: {reason}")]
    BadTerminal { reason: &'static str },
    #[error("the box already has {limit} terminals")]
    TooManyTerminals { limit: usize },
    #[error("no terminal {id} (it ended and was forgotten, or the box restarted)")]
    NoTerminal { id: String },
    #[error("cannot set up a terminal")]
    Pty(#[source] io::Error),
    #[error("{reason}")]
    Start { code: ErrorCode, reason: String },
    #[error(
        "unknown signal {name:?}: use one of HUP INT QUIT KILL USR1 USR2 TERM CONT STOP TSTP WINCH"
    )]
    BadSignal { name: String },
    #[error("no process {id} (it was forgotten to make room, or the box restarted)")]
    NoProcess { id: String },
    #[error("the box already runs {limit} background processes")]
    TooManyProcesses { limit: usize },
    #[error("stdin text and open_stdin exclude each other: send the text through the stdin call")]
    StdinTwice,
    #[error("a tag is 1 to {limit_bytes} bytes of text without control characters")]
    BadTag { limit_bytes: usize },
    #[error("the stdin of process {id} is not open (it was not asked for, is closed, or another writer has it)")]
    StdinNotOpen { id: String },
    #[error("process {id} no longer reads its stdin (it closed it or exited)")]
    StdinClosed { id: String },
    #[error("no service {name:?} in this box's template")]
    NoService { name: String },
    #[error("service {name:?} cannot run: {reason}")]
    ServiceRefused { name: String, reason: String },
    #[error("the box is stopping: its services are not restarted")]
    ServicesStopping,
}

impl ApiError {
    pub fn code(&self) -> ErrorCode {
        match self {
            ApiError::Unauthorized => ErrorCode::Unauthorized,
            ApiError::Version { .. }
            | ApiError::BadJson(_)
            | ApiError::BadQuery { .. }
            | ApiError::BadPath { .. }
            | ApiError::EmptyArgv
            | ApiError::NulInExec
            | ApiError::RemoveRoot
            | ApiError::MoveRoot
            | ApiError::UnsafeEntry { .. }
            | ApiError::BadArchive(_)
            | ApiError::UnsupportedEntry { .. }
            | ApiError::Body(_)
            | ApiError::NeedsUpgrade { .. }
            | ApiError::ReservedPort { .. }
            | ApiError::BadTerminal { .. }
            | ApiError::BadSignal { .. }
            | ApiError::StdinTwice
            | ApiError::BadTag { .. } => ErrorCode::InvalidRequest,
            ApiError::NoProcess { .. } | ApiError::NoService { .. } => ErrorCode::NotFound,
            ApiError::ServiceRefused { .. } | ApiError::ServicesStopping => ErrorCode::Conflict,
            ApiError::TooManyProcesses { .. } => ErrorCode::TooManyRequests,
            ApiError::StdinNotOpen { .. } | ApiError::StdinClosed { .. } => ErrorCode::Conflict,
            ApiError::PortClosed { .. } => ErrorCode::Unavailable,
            ApiError::TooManyTerminals { .. } => ErrorCode::TooManyRequests,
            ApiError::NoTerminal { .. } => ErrorCode::NotFound,
            ApiError::Pty(_) | ApiError::Handoff(_) => ErrorCode::Internal,
            ApiError::Start { code, .. } => *code,
            ApiError::NoRoute { .. } => ErrorCode::NotFound,
            ApiError::NotRegularFile { .. } => ErrorCode::NotARegularFile,
            ApiError::TooLarge { .. } => ErrorCode::PayloadTooLarge,
            ApiError::Fs { source, .. } => io_code(source),
            ApiError::Worker | ApiError::Journal { .. } => ErrorCode::Internal,
            ApiError::Watch(source) => io_code(source),
            ApiError::Busy { .. } => ErrorCode::TooManyRequests,
            ApiError::HarnessUnavailable { .. } => ErrorCode::Unavailable,
            ApiError::DeliverTimeout { .. } => ErrorCode::Timeout,
        }
    }

    pub fn status(&self) -> StatusCode {
        status_of(self.code())
    }

    pub fn body(&self) -> ErrorBody {
        ErrorBody::new(self.code(), self.to_string())
    }
}

/// The error code of a failed system call, by errno.
pub fn io_code(err: &io::Error) -> ErrorCode {
    match err.raw_os_error() {
        Some(libc::ENOENT) => ErrorCode::NotFound,
        Some(libc::EACCES | libc::EPERM | libc::EROFS) => ErrorCode::PermissionDenied,
        Some(libc::EISDIR) => ErrorCode::IsADirectory,
        Some(libc::ENOTDIR) => ErrorCode::NotADirectory,
        Some(libc::ENOTEMPTY) => ErrorCode::NotEmpty,
        Some(libc::EEXIST) => ErrorCode::AlreadyExists,
        Some(libc::EFBIG) => ErrorCode::PayloadTooLarge,
        // The box's own volume is full: the caller may free space, unlike an internal error.
        Some(libc::ENOSPC | libc::EDQUOT) => ErrorCode::InsufficientStorage,
        Some(libc::EINVAL | libc::ENAMETOOLONG | libc::ELOOP) => ErrorCode::InvalidRequest,
        _ => ErrorCode::Internal,
    }
}

/// The HTTP status of an error code: the one mapping of the agent.
pub fn status_of(code: ErrorCode) -> StatusCode {
    match code {
        ErrorCode::InvalidRequest
        | ErrorCode::IsADirectory
        | ErrorCode::NotADirectory
        | ErrorCode::NotARegularFile
        | ErrorCode::DuplicateSessionCookie => StatusCode::BAD_REQUEST,
        ErrorCode::TooManyRequests => StatusCode::TOO_MANY_REQUESTS,
        ErrorCode::Unauthorized => StatusCode::UNAUTHORIZED,
        ErrorCode::PermissionDenied | ErrorCode::QuotaExceeded | ErrorCode::BadOrigin => {
            StatusCode::FORBIDDEN
        }
        ErrorCode::NotFound => StatusCode::NOT_FOUND,
        ErrorCode::AlreadyExists | ErrorCode::Conflict | ErrorCode::NotEmpty => {
            StatusCode::CONFLICT
        }
        ErrorCode::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        ErrorCode::Unsupported => StatusCode::NOT_IMPLEMENTED,
        ErrorCode::Timeout => StatusCode::GATEWAY_TIMEOUT,
        ErrorCode::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        ErrorCode::InsufficientStorage => StatusCode::INSUFFICIENT_STORAGE,
        ErrorCode::Internal | ErrorCode::Unknown => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errno(n: i32) -> ErrorCode {
        io_code(&io::Error::from_raw_os_error(n))
    }

    #[test]
    fn errno_maps_to_codes_and_statuses() {
        assert_eq!(errno(libc::ENOENT), ErrorCode::NotFound);
        assert_eq!(errno(libc::EACCES), ErrorCode::PermissionDenied);
        assert_eq!(errno(libc::EPERM), ErrorCode::PermissionDenied);
        assert_eq!(errno(libc::EISDIR), ErrorCode::IsADirectory);
        assert_eq!(errno(libc::ENOTDIR), ErrorCode::NotADirectory);
        assert_eq!(errno(libc::ENOTEMPTY), ErrorCode::NotEmpty);
        assert_eq!(errno(libc::EEXIST), ErrorCode::AlreadyExists);
        assert_eq!(errno(libc::EIO), ErrorCode::Internal);
        assert_eq!(errno(libc::ENOSPC), ErrorCode::InsufficientStorage);
        assert_eq!(
            status_of(ErrorCode::InsufficientStorage),
            StatusCode::INSUFFICIENT_STORAGE
        );
        assert_eq!(status_of(ErrorCode::NotEmpty), StatusCode::CONFLICT);
        assert_eq!(status_of(ErrorCode::AlreadyExists), StatusCode::CONFLICT);
        assert_eq!(
            status_of(ErrorCode::PermissionDenied),
            StatusCode::FORBIDDEN
        );
        assert_eq!(
            status_of(ErrorCode::PayloadTooLarge),
            StatusCode::PAYLOAD_TOO_LARGE
        );
    }

    #[test]
    fn api_errors_carry_their_status() {
        assert_eq!(ApiError::Unauthorized.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(
            ApiError::BadPath { path: "a".into() }.status(),
            StatusCode::BAD_REQUEST
        );
        let body = ApiError::TooLarge { limit_bytes: 3 }.body();
        assert_eq!(body.error.code, ErrorCode::PayloadTooLarge);
        let fs = ApiError::Fs {
            op: "read",
            path: "/x".into(),
            source: io::Error::from_raw_os_error(libc::ENOENT),
        };
        assert_eq!(fs.status(), StatusCode::NOT_FOUND);
    }
}
