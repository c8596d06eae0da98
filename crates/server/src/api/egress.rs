//! `GET /v1/boxes/{ref}/egress`: the box's egress audit log, one record per decision of the
//! gateway (allowed connections with their byte counts, refusals with the reason).

use axum::extract::{Path, State};
use axum::Json;
use serde::Deserialize;

use crate::api::auth::Caller;
use crate::api::error::ApiError;
use crate::api::extract::ApiQuery;
use crate::ctx::Ctx;
use crate::egress::AuditPage;
use crate::error::OpError;
use crate::ops::box_find::find_box;

const DEFAULT_LIMIT: usize = 100;
const MAX_LIMIT: usize = 1000;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    #[serde(default)]
    after: u64,
    #[serde(default)]
    limit: Option<usize>,
}

#[utoipa::path(get, path = "/v1/boxes/{box_ref}/egress", tag = "egress", summary = "The box's egress audit log, oldest first", params(("box_ref" = String, Path, description = "box id (`bx_…`) or name"), ("after" = Option<u64>, Query, description = "skip this many records (the `next` of the previous page)"), ("limit" = Option<usize>, Query, description = "at most this many records (default 100, at most 1000)")), responses((status = 200, body = AuditPage), (status = 400, description = "invalid request", body = berth_protocol::ErrorBody), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 404, description = "no such box", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn audit(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path(box_ref): Path<String>,
    ApiQuery(q): ApiQuery<AuditQuery>,
) -> Result<Json<AuditPage>, ApiError> {
    let limit = q.limit.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(ApiError::Malformed {
            part: "query",
            detail: format!("limit must be 1..={MAX_LIMIT}"),
        });
    }
    let record = find_box(&ctx, &who.tenant_id, &box_ref)?;
    let id = record.id.clone();
    let egress = ctx.egress.clone();
    // Reading a long log is file I/O: off the async workers.
    let page = tokio::task::spawn_blocking(move || egress.audit_page(&id, q.after, limit))
        .await
        .map_err(|_| OpError::AuditRead {
            id: record.id.clone(),
            source: std::io::Error::other("the reader task panicked"),
        })?
        .map_err(|source| OpError::AuditRead {
            id: record.id.clone(),
            source,
        })?;
    Ok(Json(page))
}
