//! `GET /v1/runtimes`: the runtimes this daemon can run boxes on.

use axum::extract::State;
use axum::Json;

use crate::api::auth::Caller;
use crate::ctx::Ctx;
use crate::runtimes::RuntimeListView;

#[utoipa::path(get, path = "/v1/runtimes", tag = "runtimes", summary = "List the runtimes boxes may run on", responses((status = 200, body = RuntimeListView), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn list(State(ctx): State<Ctx>, Caller(_who): Caller) -> Json<RuntimeListView> {
    Json(RuntimeListView {
        runtimes: ctx.runtimes.views(),
    })
}
