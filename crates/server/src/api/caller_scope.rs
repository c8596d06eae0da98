//! Who called, for the length of one request: an error's text keeps host paths for the
//! admin (who owns the host) and hides them from a tenant, without every error carrying
//! who asked. `api::log_request` opens the scope around every route; [`super::auth::Caller`]
//! records the caller once authenticated.

use std::cell::Cell;
use std::future::Future;

tokio::task_local! {
    static CALLER_IS_ADMIN: Cell<bool>;
}

/// Runs one request's handling where the caller can be recorded.
pub async fn scope<F: Future>(request: F) -> F::Output {
    CALLER_IS_ADMIN.scope(Cell::new(false), request).await
}

/// Records whether the authenticated caller is an admin. Outside [`scope`] (a handler
/// called directly) there is nothing to record, and errors stay redacted.
pub fn record_admin(is_admin: bool) {
    let _ = CALLER_IS_ADMIN.try_with(|admin| admin.set(is_admin));
}

/// Whether this request's caller is an admin; false before authentication and outside a
/// request.
pub fn caller_is_admin() -> bool {
    CALLER_IS_ADMIN.try_with(Cell::get).unwrap_or(false)
}
