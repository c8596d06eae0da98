//! `GET /v1/runtimes`: the runtimes this daemon can run boxes on.

use axum::extract::State;
use axum::Json;

use crate::api::auth::Caller;
use crate::api::view::redact_host_paths;
use crate::ctx::Ctx;
use crate::runtimes::RuntimeListView;

#[utoipa::path(get, path = "/v1/runtimes", tag = "runtimes", summary = "List the runtimes boxes may run on (`details` for the admin only)", responses((status = 200, body = RuntimeListView), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn list(State(ctx): State<Ctx>, Caller(who): Caller) -> Json<RuntimeListView> {
    let mut runtimes = ctx.runtimes.views();
    if !who.is_admin {
        // A tenant needs which runtimes it may use, not the host's binaries, kernel and
        // image paths (`details`) or the paths in a reason.
        for view in &mut runtimes {
            view.details = None;
            view.reason = view.reason.as_deref().map(redact_host_paths);
        }
    }
    Json(RuntimeListView { runtimes })
}
