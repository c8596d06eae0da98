//! THE one place errors become an HTTP status and an [`ErrorBody`]. Server-side failures
//! (5xx) log their full cause chain here, once.

use axum::response::{IntoResponse, Response};
use axum::Json;
use berth_protocol::{ErrorBody, ErrorCode};

use crate::cluster::error::ClusterError;
use berth_runtime::{error_chain, GuestError};
use http::StatusCode;

use crate::desktop::error::Step;
use crate::desktop::DesktopError;
use crate::error::{LinkRefusal, OpError};
use crate::lifecycle::wakeups::error::WakeupError;
use crate::ports::proxy::ProxyError;
use crate::push::PushError;
use crate::secrets::SecretError;
use crate::webhooks::WebhookError;

/// Everything a handler can fail with.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error(transparent)]
    Op(#[from] OpError),

    #[error("a valid API key is required: Authorization: Bearer <key>")]
    Unauthorized,

    /// A port's URL without a key or a share link's cookie.
    #[error("a valid API key (Authorization: Bearer <key>) or a share link is required")]
    NoPortAccess,

    #[error("this call needs an admin API key")]
    AdminRequired,

    /// API keys are managed with an API key, never from a browser's web session.
    #[error(
        "API keys are managed with an API key (`berth tenant key …`), not from a signed-in browser"
    )]
    ApiKeyRequired,

    /// A cookie-authenticated request that changes state, or opens a WebSocket, whose
    /// `Origin` is not berth's own (or is missing).
    #[error("the request's Origin {origin:?} is not this server's: a signed-in browser's changes must come from berth's own pages")]
    BadOrigin { origin: Option<String> },

    /// A pairing code or API key that opens no web session (unknown, used or expired).
    #[error("the pairing code or API key is unknown, already used or expired")]
    SignInRefused,

    #[error("this call needs a signed-in browser (the __Host-berth_session cookie)")]
    NoWebSession,

    /// More than one of berth's session cookies: one was set by a page that is not berth's
    /// (a box's app, a sibling host), so none is used.
    #[error("this request carries {count} berth session cookies, and berth cannot tell which one is yours (a page that is not berth's may have set one): sign out, or clear this site's cookies in the browser's settings, then sign in again; berth has asked the browser to drop the old-named ones, so trying again may already work")]
    DuplicateSessionCookie { count: usize },

    #[error("no web session {id} for this tenant")]
    WebSessionNotFound { id: String },

    /// The body, query or path did not parse; `detail` is the parser's message.
    #[error("invalid {part}: {detail}")]
    Malformed { part: &'static str, detail: String },

    #[error("the request body is over its limit of {limit_bytes} bytes")]
    PayloadTooLarge { limit_bytes: u64 },

    #[error("cannot read the request body")]
    Body(#[source] axum::Error),

    #[error("no route for {method} {path}")]
    NoRoute { method: http::Method, path: String },

    #[error("method {method} is not allowed on {path}")]
    MethodNotAllowed { method: http::Method, path: String },
}

/// Seconds a client told [`OpError::Busy`] waits before retrying.
const RETRY_AFTER_S: u64 = 1;

impl ApiError {
    pub fn status_and_code(&self) -> (StatusCode, ErrorCode) {
        match self {
            ApiError::Op(op) => op_status(op),
            ApiError::Unauthorized | ApiError::NoPortAccess => {
                (StatusCode::UNAUTHORIZED, ErrorCode::Unauthorized)
            }
            ApiError::AdminRequired | ApiError::ApiKeyRequired => {
                (StatusCode::FORBIDDEN, ErrorCode::PermissionDenied)
            }
            ApiError::BadOrigin { .. } => (StatusCode::FORBIDDEN, ErrorCode::BadOrigin),
            ApiError::SignInRefused | ApiError::NoWebSession => {
                (StatusCode::UNAUTHORIZED, ErrorCode::Unauthorized)
            }
            ApiError::WebSessionNotFound { .. } => (StatusCode::NOT_FOUND, ErrorCode::NotFound),
            ApiError::DuplicateSessionCookie { .. } => {
                (StatusCode::BAD_REQUEST, ErrorCode::DuplicateSessionCookie)
            }
            ApiError::Malformed { .. } | ApiError::Body(_) => {
                (StatusCode::BAD_REQUEST, ErrorCode::InvalidRequest)
            }
            ApiError::PayloadTooLarge { .. } => {
                (StatusCode::PAYLOAD_TOO_LARGE, ErrorCode::PayloadTooLarge)
            }
            ApiError::NoRoute { .. } => (StatusCode::NOT_FOUND, ErrorCode::NotFound),
            ApiError::MethodNotAllowed { .. } => {
                (StatusCode::METHOD_NOT_ALLOWED, ErrorCode::InvalidRequest)
            }
        }
    }

    /// What the client reads. Client errors and `unavailable` carry the whole cause chain
    /// (it is about their request or their box); internal errors point to the log.
    pub(crate) fn message(&self, status: StatusCode) -> String {
        if let ApiError::Op(OpError::Guest(guest)) = self {
            if let GuestError::Remote { body, .. } = guest.as_ref() {
                if !status.is_server_error() {
                    // The agent's own words are about the caller's path or process.
                    return body.error.message.clone();
                }
            }
        }
        if status == StatusCode::INSUFFICIENT_STORAGE
            && !matches!(self, ApiError::Op(OpError::DiskLow(_)))
        {
            return format!(
                "the daemon's disk is full, nothing was changed: {}; free space on the data dir's disk, then retry",
                error_chain(self)
            );
        }
        if status == StatusCode::INTERNAL_SERVER_ERROR {
            format!("{self}; the cause is in the daemon's log")
        } else if self.explained_by_the_host() && !crate::api::caller_scope::caller_is_admin() {
            // A tenant learns what went wrong, not where the host keeps its files; the
            // admin, who owns the host, reads the whole cause.
            crate::api::view::redact_host_paths(&error_chain(self))
        } else {
            error_chain(self)
        }
    }

    /// Errors whose causes are the host's (its runtimes, template bases, image files),
    /// not the caller's request or box: their text may name host paths.
    fn explained_by_the_host(&self) -> bool {
        matches!(
            self,
            ApiError::Op(
                OpError::StartFailed { .. }
                    | OpError::StartTemplate { .. }
                    | OpError::StartEgress { .. }
                    | OpError::InvalidRuntime(_)
                    | OpError::BoxRuntime { .. }
                    | OpError::TemplateUnavailable { .. }
                    | OpError::MoveFromUnavailable { .. }
            )
        )
    }
}

fn op_status(op: &OpError) -> (StatusCode, ErrorCode) {
    match op {
        OpError::InvalidName { .. }
        | OpError::InvalidTenantName { .. }
        | OpError::UnknownTemplate { .. }
        | OpError::TemplateUnavailable { .. }
        | OpError::InvalidRuntime(_)
        | OpError::DiskOutOfRange { .. }
        | OpError::BaseNotOnRuntime { .. }
        | OpError::LimitOutOfRange { .. }
        | OpError::SleepOrder(_)
        | OpError::RungUnsupported { .. }
        | OpError::InvalidPath { .. }
        | OpError::InvalidExec { .. }
        | OpError::InvalidTerminal { .. }
        | OpError::InvalidPort { .. }
        | OpError::TooManyPortLinks { .. }
        | OpError::InvalidLabel { .. }
        | OpError::InvalidEnv { .. }
        | OpError::InvalidFilter { .. }
        | OpError::TooMany { .. }
        | OpError::DiskShrink { .. }
        | OpError::InvalidEgress(_)
        | OpError::EgressEnvClash { .. }
        | OpError::InvalidMessageId(_)
        | OpError::NoHarness { .. }
        | OpError::BadSearchLimit { .. } => (StatusCode::BAD_REQUEST, ErrorCode::InvalidRequest),
        OpError::Busy { .. } => (StatusCode::TOO_MANY_REQUESTS, ErrorCode::TooManyRequests),
        OpError::MessageTooLarge { .. } => {
            (StatusCode::PAYLOAD_TOO_LARGE, ErrorCode::PayloadTooLarge)
        }
        OpError::IdempotencyConflict { .. } => (StatusCode::CONFLICT, ErrorCode::Conflict),
        OpError::DiskLow(_) => (
            StatusCode::INSUFFICIENT_STORAGE,
            ErrorCode::InsufficientStorage,
        ),
        OpError::Store(e) if e.is_disk_full() => (
            StatusCode::INSUFFICIENT_STORAGE,
            ErrorCode::InsufficientStorage,
        ),
        OpError::BoxNotFound { .. }
        | OpError::TenantNotFound { .. }
        | OpError::KeyNotFound { .. }
        | OpError::NoSuchProcess { .. }
        | OpError::NoSuchService { .. }
        | OpError::PortLinkNotFound { .. } => (StatusCode::NOT_FOUND, ErrorCode::NotFound),
        OpError::PortNotListening { .. } => {
            (StatusCode::SERVICE_UNAVAILABLE, ErrorCode::Unavailable)
        }
        OpError::PortProxy(e) if matches!(**e, ProxyError::AnswerTimeout { .. }) => {
            (StatusCode::GATEWAY_TIMEOUT, ErrorCode::Timeout)
        }
        OpError::PortProxy(_) => (StatusCode::BAD_GATEWAY, ErrorCode::Unavailable),
        OpError::OnNode { status, code, .. } => (
            StatusCode::from_u16(*status).unwrap_or(StatusCode::BAD_GATEWAY),
            *code,
        ),
        OpError::Join(e) => match **e {
            ClusterError::TokenRefused { .. } => {
                (StatusCode::FORBIDDEN, ErrorCode::PermissionDenied)
            }
            ClusterError::Store(_)
            | ClusterError::Io { .. }
            | ClusterError::Certificate { .. }
            | ClusterError::Random(_) => (StatusCode::INTERNAL_SERVER_ERROR, ErrorCode::Internal),
            _ => (StatusCode::BAD_REQUEST, ErrorCode::InvalidRequest),
        },
        OpError::NodeUnavailable { .. } | OpError::NoNode(_) => {
            (StatusCode::SERVICE_UNAVAILABLE, ErrorCode::Unavailable)
        }
        OpError::LinkRefused(refusal) => match refusal {
            LinkRefusal::Unknown | LinkRefusal::SessionEnded => {
                (StatusCode::UNAUTHORIZED, ErrorCode::Unauthorized)
            }
            LinkRefusal::Expired | LinkRefusal::Revoked | LinkRefusal::Elsewhere => {
                (StatusCode::FORBIDDEN, ErrorCode::PermissionDenied)
            }
        },
        OpError::QuotaExceeded(_) => (StatusCode::FORBIDDEN, ErrorCode::QuotaExceeded),
        OpError::AdminKeyRequired => (StatusCode::FORBIDDEN, ErrorCode::PermissionDenied),
        OpError::LastAdminKey { .. } => (StatusCode::CONFLICT, ErrorCode::Conflict),
        OpError::NoIdSlot { .. } => (StatusCode::SERVICE_UNAVAILABLE, ErrorCode::Unavailable),
        OpError::NameTaken { .. } | OpError::TenantNameTaken { .. } => {
            (StatusCode::CONFLICT, ErrorCode::AlreadyExists)
        }
        OpError::NodeNotFound { .. } => (StatusCode::NOT_FOUND, ErrorCode::NotFound),
        OpError::NodeRefused(_) => (StatusCode::CONFLICT, ErrorCode::Conflict),
        OpError::NoDurableCopies
        | OpError::NoDurableCopy { .. }
        | OpError::RestoreWhileAwake { .. } => (StatusCode::CONFLICT, ErrorCode::Conflict),
        OpError::Restore { source, .. } => restore_status(source),
        OpError::Conflict { .. }
        | OpError::VolumeNotMigrated { .. }
        | OpError::Asleep { .. }
        | OpError::CannotSleep { .. }
        | OpError::ServicesNotRunning { .. }
        | OpError::AgentPredatesServices { .. } => (StatusCode::CONFLICT, ErrorCode::Conflict),
        OpError::StartFailed { .. }
        | OpError::StartTemplate { .. }
        | OpError::StartEgress { .. }
        | OpError::BoxRuntime { .. }
        | OpError::MoveFromUnavailable { .. }
        | OpError::ExecCut => (StatusCode::SERVICE_UNAVAILABLE, ErrorCode::Unavailable),
        OpError::Guest(e) => guest_status(e.code()),
        OpError::Memory(failure) => memory_status(failure.kind),
        OpError::NoVolumeReader => (StatusCode::SERVICE_UNAVAILABLE, ErrorCode::Unavailable),
        OpError::MemoryTimeout { .. } => (StatusCode::GATEWAY_TIMEOUT, ErrorCode::Timeout),
        OpError::NoSuchSnapshot { .. }
        | OpError::NotInSnapshot { .. }
        | OpError::NotIndexed { .. } => (StatusCode::NOT_FOUND, ErrorCode::NotFound),
        OpError::EmptySearch => (StatusCode::BAD_REQUEST, ErrorCode::InvalidRequest),
        OpError::MemoryHistory(berth_chunks::ChunkError::MemoryInput(_)) => {
            (StatusCode::CONFLICT, ErrorCode::Conflict)
        }
        OpError::Backup(e) => backup_status(e),
        OpError::Secret(e) => secret_status(e),
        OpError::Push(e) => push_status(e),
        OpError::Webhook(e) => webhook_status(e),
        OpError::Wakeup(e) => wakeup_status(e),
        OpError::Desktop(e) => desktop_status(e),
        OpError::ExecRefused { code, .. } => guest_status(*code),
        OpError::Runtime { .. }
        | OpError::AuditRead { .. }
        | OpError::NoIdRange { .. }
        | OpError::Store(_)
        | OpError::Random(_)
        | OpError::MemoryReader(_)
        | OpError::MemoryHistory(_)
        | OpError::MemoryIndex(_)
        | OpError::TaskPanicked { .. } => (StatusCode::INTERNAL_SERVER_ERROR, ErrorCode::Internal),
    }
}

fn backup_status(e: &crate::backup::BackupError) -> (StatusCode, ErrorCode) {
    use crate::backup::BackupError as E;
    match e {
        E::Invalid(_) | E::History(berth_chunks::ChunkError::HistoryImport(_)) => {
            (StatusCode::BAD_REQUEST, ErrorCode::InvalidRequest)
        }
        E::TooLarge { .. } => (StatusCode::PAYLOAD_TOO_LARGE, ErrorCode::PayloadTooLarge),
        E::CannotHoldStill { .. } | E::OnReplica => (StatusCode::CONFLICT, ErrorCode::Conflict),
        E::DiskLow(_) => (
            StatusCode::INSUFFICIENT_STORAGE,
            ErrorCode::InsufficientStorage,
        ),
        E::ClientGone => (StatusCode::BAD_REQUEST, ErrorCode::InvalidRequest),
        // Never here: `From<BackupError> for OpError` answers a refusal as the store's own
        // error (a name taken: 409, the quota: 403), the only way an `OpError::Backup` is made.
        E::Refused(_) => (StatusCode::CONFLICT, ErrorCode::Conflict),
        E::Io { .. } | E::History(_) | E::Worker(_) => {
            (StatusCode::INTERNAL_SERVER_ERROR, ErrorCode::Internal)
        }
    }
}

/// How a memory read's refusal answers. A volume image the reader cannot read is a
/// conflict with the box's state: its next start checks (and where it can, repairs) it.
fn memory_status(kind: berth_protocol::memory::VolumeReadFailureKind) -> (StatusCode, ErrorCode) {
    use berth_protocol::memory::VolumeReadFailureKind as Why;
    match kind {
        Why::NotFound => (StatusCode::NOT_FOUND, ErrorCode::NotFound),
        Why::IsADirectory => (StatusCode::BAD_REQUEST, ErrorCode::IsADirectory),
        Why::NotADirectory => (StatusCode::BAD_REQUEST, ErrorCode::NotADirectory),
        Why::NotARegularFile => (StatusCode::BAD_REQUEST, ErrorCode::NotARegularFile),
        Why::TooLarge => (StatusCode::PAYLOAD_TOO_LARGE, ErrorCode::PayloadTooLarge),
        Why::BadPath => (StatusCode::BAD_REQUEST, ErrorCode::InvalidRequest),
        Why::Unreadable => (StatusCode::CONFLICT, ErrorCode::Conflict),
    }
}

/// How a restore from a durable copy that failed answers: a damaged copy is the caller's
/// to work around (another generation), an unreachable store a wait.
fn restore_status(e: &crate::durable::error::DurableError) -> (StatusCode, ErrorCode) {
    use crate::durable::error::DurableError;
    use berth_chunks::ChunkError;
    match e {
        DurableError::Chunks(
            ChunkError::Corrupt { .. }
            | ChunkError::Missing { .. }
            | ChunkError::BadManifest { .. },
        ) => (StatusCode::CONFLICT, ErrorCode::Conflict),
        DurableError::Chunks(ChunkError::Backend { .. }) => {
            (StatusCode::SERVICE_UNAVAILABLE, ErrorCode::Unavailable)
        }
        _ => (StatusCode::INTERNAL_SERVER_ERROR, ErrorCode::Internal),
    }
}

/// How [`WakeupError`]s answer.
fn wakeup_status(e: &WakeupError) -> (StatusCode, ErrorCode) {
    match e {
        WakeupError::ScheduleCount
        | WakeupError::TzWithoutCron
        | WakeupError::BadTime { .. }
        | WakeupError::InPast { .. }
        | WakeupError::TooSoon { .. }
        | WakeupError::TooFar { .. }
        | WakeupError::CronFields { .. }
        | WakeupError::BadCron { .. }
        | WakeupError::CronNeverFires { .. }
        | WakeupError::BadTz { .. }
        | WakeupError::CronTooOften { .. }
        | WakeupError::EmptyMessage => (StatusCode::BAD_REQUEST, ErrorCode::InvalidRequest),
        WakeupError::MessageTooLarge { .. } => {
            (StatusCode::PAYLOAD_TOO_LARGE, ErrorCode::PayloadTooLarge)
        }
        WakeupError::TooManyPending { .. } | WakeupError::TooManyCrons { .. } => {
            (StatusCode::CONFLICT, ErrorCode::Conflict)
        }
        WakeupError::TooManyPerHour { .. } => {
            (StatusCode::TOO_MANY_REQUESTS, ErrorCode::TooManyRequests)
        }
        WakeupError::NotFound { .. } => (StatusCode::NOT_FOUND, ErrorCode::NotFound),
    }
}

/// How [`DesktopError`]s answer: a refused request, or a key name xdotool does not know, is
/// the caller's (400); a box without a desktop, or whose desktop is down, or a program that
/// failed in it, the box's (409); a desktop that took too long, a timeout (504).
fn desktop_status(e: &DesktopError) -> (StatusCode, ErrorCode) {
    match e {
        DesktopError::TooManyActions { .. }
        | DesktopError::InvalidAction { .. }
        | DesktopError::UnknownKey { .. } => (StatusCode::BAD_REQUEST, ErrorCode::InvalidRequest),
        DesktopError::NoDesktop { .. }
        | DesktopError::XvfbFailed { .. }
        | DesktopError::XvfbExited { .. }
        | DesktopError::NotRunning { .. } => (StatusCode::CONFLICT, ErrorCode::Conflict),
        DesktopError::NotSettled { .. } => (StatusCode::GATEWAY_TIMEOUT, ErrorCode::Timeout),
        DesktopError::StepFailed {
            timed_out: true, ..
        } => (StatusCode::GATEWAY_TIMEOUT, ErrorCode::Timeout),
        DesktopError::StepFailed { .. } => (StatusCode::CONFLICT, ErrorCode::Conflict),
        DesktopError::Unreadable { .. } => (StatusCode::BAD_GATEWAY, ErrorCode::Unavailable),
        DesktopError::ScreenshotTooLarge { .. } => {
            (StatusCode::PAYLOAD_TOO_LARGE, ErrorCode::PayloadTooLarge)
        }
    }
}

/// Which action a refused or failed desktop call stopped at, and what its program said,
/// for programs (the message says it for people).
fn desktop_details(e: &DesktopError) -> Option<serde_json::Value> {
    let action = |step: &Step| match step {
        Step::Action { index, kind } => (Some(*index), Some(*kind)),
        Step::Screenshot | Step::Cursor | Step::Geometry => (None, None),
    };
    match e {
        DesktopError::InvalidAction { index, kind, .. } => {
            Some(serde_json::json!({"index": index, "type": kind}))
        }
        DesktopError::UnknownKey { step, said, .. } => {
            let (index, kind) = action(step);
            Some(serde_json::json!({"index": index, "type": kind, "stderr": said}))
        }
        DesktopError::StepFailed {
            step,
            exit_code,
            timed_out,
            stderr,
            ..
        } => {
            let (index, kind) = action(step);
            Some(serde_json::json!({
                "index": index, "type": kind, "exit_code": exit_code,
                "timed_out": timed_out, "stderr": stderr,
            }))
        }
        _ => None,
    }
}

/// How [`PushError`]s answer.
fn push_status(e: &PushError) -> (StatusCode, ErrorCode) {
    match e {
        PushError::Endpoint(_) | PushError::InvalidKey { .. } => {
            (StatusCode::BAD_REQUEST, ErrorCode::InvalidRequest)
        }
        PushError::TooMany { .. } => (StatusCode::CONFLICT, ErrorCode::Conflict),
        PushError::NotFound { .. } => (StatusCode::NOT_FOUND, ErrorCode::NotFound),
    }
}

/// How [`WebhookError`]s answer.
fn webhook_status(e: &WebhookError) -> (StatusCode, ErrorCode) {
    match e {
        WebhookError::Url(_)
        | WebhookError::UnknownEvent { .. }
        | WebhookError::NoEvents
        | WebhookError::Description => (StatusCode::BAD_REQUEST, ErrorCode::InvalidRequest),
        WebhookError::TooMany { .. } => (StatusCode::CONFLICT, ErrorCode::Conflict),
        WebhookError::NotFound { .. } => (StatusCode::NOT_FOUND, ErrorCode::NotFound),
    }
}

/// A secret store error, as the public API shows it. Server-side failures (a row that does
/// not open, the store) are 500: the caller cannot fix them.
fn secret_status(e: &SecretError) -> (StatusCode, ErrorCode) {
    match e {
        SecretError::InvalidName { .. } | SecretError::InvalidValue { .. } => {
            (StatusCode::BAD_REQUEST, ErrorCode::InvalidRequest)
        }
        SecretError::NotFound { .. } => (StatusCode::NOT_FOUND, ErrorCode::NotFound),
        SecretError::Store(e) if e.is_disk_full() => (
            StatusCode::INSUFFICIENT_STORAGE,
            ErrorCode::InsufficientStorage,
        ),
        SecretError::KeyFile { .. }
        | SecretError::KeyNotRegular { .. }
        | SecretError::KeyMode { .. }
        | SecretError::KeyLength { .. }
        | SecretError::KeyMismatch { .. }
        | SecretError::KeyMissing { .. }
        | SecretError::Tampered { .. }
        | SecretError::ForeignKey { .. }
        | SecretError::Crypto { .. }
        | SecretError::Random(_)
        | SecretError::Store(_) => (StatusCode::INTERNAL_SERVER_ERROR, ErrorCode::Internal),
    }
}

/// A code from the box's agent, as the public API shows it.
pub fn guest_status(code: ErrorCode) -> (StatusCode, ErrorCode) {
    let status = match code {
        ErrorCode::InvalidRequest
        | ErrorCode::IsADirectory
        | ErrorCode::NotADirectory
        | ErrorCode::NotARegularFile => StatusCode::BAD_REQUEST,
        ErrorCode::TooManyRequests => StatusCode::TOO_MANY_REQUESTS,
        ErrorCode::NotFound => StatusCode::NOT_FOUND,
        ErrorCode::PermissionDenied => StatusCode::FORBIDDEN,
        ErrorCode::AlreadyExists | ErrorCode::NotEmpty | ErrorCode::Conflict => {
            StatusCode::CONFLICT
        }
        ErrorCode::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        ErrorCode::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        ErrorCode::InsufficientStorage => StatusCode::INSUFFICIENT_STORAGE,
        ErrorCode::Timeout => StatusCode::GATEWAY_TIMEOUT,
        ErrorCode::Unsupported => StatusCode::NOT_IMPLEMENTED,
        // The agent refusing our own boot token, or an answer we cannot place: our bug.
        ErrorCode::Unauthorized
        | ErrorCode::QuotaExceeded
        | ErrorCode::BadOrigin
        | ErrorCode::DuplicateSessionCookie
        | ErrorCode::Internal
        | ErrorCode::Unknown => {
            return (StatusCode::INTERNAL_SERVER_ERROR, ErrorCode::Internal);
        }
    };
    (status, code)
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        if status.is_server_error() {
            tracing::error!(status = status.as_u16(), code = %code, error = %error_chain(&self), "request failed");
        }
        let mut body = serde_json::json!(ErrorBody::new(code, self.message(status)));
        if let ApiError::Op(OpError::QuotaExceeded(e)) = &self {
            // Which limit, and the usage, for programs (the message says it for people).
            body["error"]["details"] = serde_json::json!(e);
        }
        if let Some(details) = match &self {
            ApiError::Op(OpError::Desktop(e)) => desktop_details(e),
            _ => None,
        } {
            body["error"]["details"] = details;
        }
        let mut response = (status, Json(body)).into_response();
        if matches!(self, ApiError::Op(OpError::Busy { .. })) {
            response
                .headers_mut()
                .insert(http::header::RETRY_AFTER, RETRY_AFTER_S.into());
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_runtime::{GuestError, RuntimeError};

    fn status(e: impl Into<ApiError>) -> (u16, ErrorCode) {
        let (s, c) = e.into().status_and_code();
        (s.as_u16(), c)
    }

    fn remote(code: ErrorCode) -> OpError {
        OpError::from(GuestError::Remote {
            status: 0,
            body: ErrorBody::new(code, "m"),
        })
    }

    #[test]
    fn client_mistakes_are_4xx() {
        assert_eq!(
            status(OpError::InvalidName {
                name: "A".into(),
                rule: "r"
            }),
            (400, ErrorCode::InvalidRequest)
        );
        assert_eq!(
            status(OpError::BoxNotFound {
                reference: "x".into()
            }),
            (404, ErrorCode::NotFound)
        );
        assert_eq!(
            status(OpError::NameTaken { name: "x".into() }),
            (409, ErrorCode::AlreadyExists)
        );
        assert_eq!(
            status(ApiError::Unauthorized),
            (401, ErrorCode::Unauthorized)
        );
        assert_eq!(
            status(ApiError::PayloadTooLarge { limit_bytes: 1 }),
            (413, ErrorCode::PayloadTooLarge)
        );
    }

    #[test]
    fn guest_codes_map_to_documented_statuses() {
        assert_eq!(
            status(remote(ErrorCode::NotFound)),
            (404, ErrorCode::NotFound)
        );
        assert_eq!(
            status(remote(ErrorCode::PermissionDenied)),
            (403, ErrorCode::PermissionDenied)
        );
        assert_eq!(
            status(remote(ErrorCode::IsADirectory)),
            (400, ErrorCode::IsADirectory)
        );
        assert_eq!(
            status(remote(ErrorCode::NotADirectory)),
            (400, ErrorCode::NotADirectory)
        );
        assert_eq!(
            status(remote(ErrorCode::NotEmpty)),
            (409, ErrorCode::NotEmpty)
        );
        assert_eq!(
            status(remote(ErrorCode::AlreadyExists)),
            (409, ErrorCode::AlreadyExists)
        );
        assert_eq!(
            status(remote(ErrorCode::PayloadTooLarge)),
            (413, ErrorCode::PayloadTooLarge)
        );
        assert_eq!(
            status(remote(ErrorCode::Unavailable)),
            (503, ErrorCode::Unavailable)
        );
        assert_eq!(
            status(remote(ErrorCode::Unauthorized)),
            (500, ErrorCode::Internal)
        );
        let connect = GuestError::Connect {
            addr: berth_runtime::GuestAddr::Unix("/x".into()),
            source: std::io::Error::from(std::io::ErrorKind::ConnectionRefused),
        };
        assert_eq!(
            status(OpError::from(connect)),
            (503, ErrorCode::Unavailable)
        );
    }

    #[test]
    fn a_failed_start_is_503_and_says_what_to_do() {
        let err = ApiError::Op(OpError::StartFailed {
            name: "alice".into(),
            source: Box::new(RuntimeError::Missing {
                what: "runc".into(),
                hint: "apt install runc".into(),
            }),
        });
        let (s, c) = err.status_and_code();
        assert_eq!((s.as_u16(), c), (503, ErrorCode::Unavailable));
        let message = err.message(s);
        assert!(
            message.contains("POST /v1/boxes/alice/start") && message.contains("apt install runc"),
            "{message}"
        );
    }
}
