//! `/v1/boxes`: create, list, get, delete, start, stop (`PATCH`: `box_update.rs`).

use std::collections::BTreeMap;

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use http::StatusCode;
use serde::Deserialize;

use crate::api::auth::Caller;
use crate::api::error::ApiError;
use crate::api::extract::{ApiJson, ApiQuery, OptionalJson};
use crate::api::old_names;
use crate::api::view::{BoxListView, BoxView};
use crate::box_labels::BoxFilter;
use crate::ctx::Ctx;
use crate::egress::policy::EgressPolicy;
use crate::ops::{box_create, box_delete, box_find, box_move, service};
use crate::validate::{LimitsInput, SleepInput};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[derive(utoipa::ToSchema)]
#[schema(as = CreateBox)]
pub struct CreateBody {
    name: String,
    #[serde(default)]
    template: Option<String>,
    #[serde(default)]
    limits: Option<LimitsBody>,
    /// Idle seconds before the box is paused (frozen in memory), 0..=604800; 0: never.
    #[serde(default)]
    pause_after_s: Option<u64>,
    /// Idle seconds before the box is snapshotted (memory saved to disk, no RAM held);
    /// 0: never. Only on runtimes whose `capabilities.snapshot` is true.
    #[serde(default)]
    snapshot_after_s: Option<u64>,
    /// Idle seconds before the box is stopped (its processes end, its disk stays); 0: never.
    /// Rungs that are on must grow: pause, then snapshot, then stop.
    #[serde(default)]
    stop_after_s: Option<u64>,
    /// The old name of `stop_after_s` (before the sleep ladder): still read, with a
    /// warning in the daemon's log; `stop_after_s` wins when both are given.
    #[serde(default)]
    #[schema(deprecated)]
    idle_timeout_s: Option<u64>,
    /// Whether a call that needs a paused or snapshotted box wakes it (default true); false:
    /// such calls get 409 until `POST /v1/boxes/{ref}/resume`.
    #[serde(default)]
    auto_resume: Option<bool>,
    /// The box's own egress policy, replacing its template's whole (allowlist and
    /// credential rules); absent: the template's, as it is at each start.
    #[serde(default)]
    egress: Option<EgressPolicy>,
    /// The runtime the box runs on for its life (`GET /v1/runtimes`); absent: the
    /// daemon's default. Unknown or unavailable: 400.
    #[serde(default)]
    runtime: Option<String>,
    /// The box's volume size in MiB (64..=1048576); absent: its template's `disk_mib`, as it
    /// is at each start.
    #[serde(default)]
    disk_mib: Option<u64>,
    /// Key/value labels (rules as in `PATCH /v1/boxes/{ref}`).
    #[serde(default)]
    labels: BTreeMap<String, String>,
    /// Variables for the box's exec, terminals and harness; not secrets (stored and shown
    /// in plain text). Rules as in `PATCH /v1/boxes/{ref}`.
    #[serde(default)]
    env: BTreeMap<String, String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
#[derive(utoipa::ToSchema)]
#[schema(as = LimitsInput)]
pub struct LimitsBody {
    #[serde(default)]
    memory_mib: Option<u64>,
    #[serde(default)]
    pids: Option<u64>,
    #[serde(default)]
    cpus: Option<f64>,
}

impl From<LimitsBody> for LimitsInput {
    fn from(l: LimitsBody) -> Self {
        LimitsInput {
            memory_mib: l.memory_mib,
            pids: l.pids,
            cpus: l.cpus,
        }
    }
}

#[utoipa::path(post, path = "/v1/boxes", tag = "boxes", summary = "Create a box (stopped; running when claimed from a warm pool)", request_body = CreateBody, responses((status = 201, body = crate::api::view::BoxView), (status = 400, description = "invalid request", body = berth_protocol::ErrorBody), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 409, description = "a box of that name exists", body = berth_protocol::ErrorBody), (status = 507, description = "the data dir's disk is below its free-space threshold", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn create(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    ApiJson(body): ApiJson<CreateBody>,
) -> Result<Response, ApiError> {
    let record = box_create::create_box(
        &ctx,
        &who.tenant_id,
        box_create::CreateBox {
            name: body.name,
            template: body.template,
            limits: body.limits.unwrap_or_default().into(),
            sleep: SleepInput {
                pause_after_s: body.pause_after_s,
                snapshot_after_s: body.snapshot_after_s,
                stop_after_s: old_names::renamed(
                    "POST /v1/boxes",
                    ("stop_after_s", body.stop_after_s),
                    ("idle_timeout_s", body.idle_timeout_s),
                ),
                auto_resume: body.auto_resume,
            },
            egress: body.egress,
            runtime: body.runtime,
            disk_mib: body.disk_mib,
            labels: body.labels,
            env: body.env,
        },
    )
    .await?;
    Ok((StatusCode::CREATED, Json(BoxView::new(&ctx, record, &who))).into_response())
}

#[utoipa::path(get, path = "/v1/boxes", tag = "boxes", summary = "List your boxes", params(("label" = Option<Vec<String>>, Query, description = "`KEY=VALUE`; repeatable, every one must match"), ("state" = Option<String>, Query, description = "only boxes in this state")), responses((status = 200, body = crate::api::view::BoxListView), (status = 400, description = "invalid request", body = berth_protocol::ErrorBody), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn list(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    ApiQuery(query): ApiQuery<Vec<(String, String)>>,
) -> Result<Json<BoxListView>, ApiError> {
    let filter = BoxFilter::from_query(query)?;
    let boxes = box_find::list_matching(&ctx, &who.tenant_id, &filter)?;
    Ok(Json(BoxListView {
        boxes: boxes
            .into_iter()
            .map(|b| BoxView::new(&ctx, b, &who))
            .collect(),
    }))
}

#[utoipa::path(get, path = "/v1/boxes/{box_ref}", tag = "boxes", summary = "Show a box", params(("box_ref" = String, Path, description = "box id (`bx_…`) or name")), responses((status = 200, body = crate::api::view::BoxView), (status = 400, description = "invalid request", body = berth_protocol::ErrorBody), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 404, description = "no such box", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn get(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path(reference): Path<String>,
) -> Result<Json<BoxView>, ApiError> {
    let record = box_find::find_box(&ctx, &who.tenant_id, &reference)?;
    Ok(Json(BoxView::measured(&ctx, record, &who).await))
}

#[utoipa::path(delete, path = "/v1/boxes/{box_ref}", tag = "boxes", summary = "Stop a box and delete it with its volume", params(("box_ref" = String, Path, description = "box id (`bx_…`) or name")), responses((status = 204, description = "deleted"), (status = 400, description = "invalid request", body = berth_protocol::ErrorBody), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 404, description = "no such box", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn delete(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path(reference): Path<String>,
) -> Result<StatusCode, ApiError> {
    let record = box_find::find_box(&ctx, &who.tenant_id, &reference)?;
    box_delete::delete_box(&ctx, &record.id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /v1/boxes/{ref}/start`'s optional body.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StartBody {
    /// Start the (stopped) box on this runtime from now on, with its volume.
    #[serde(default)]
    runtime: Option<String>,
}

#[utoipa::path(post, path = "/v1/boxes/{box_ref}/start", tag = "boxes", summary = "Start (wake) a box; answers once its services have started (ready or failed), or after 60 s", params(("box_ref" = String, Path, description = "box id (`bx_…`) or name")), responses((status = 200, body = crate::api::view::BoxView), (status = 400, description = "invalid request", body = berth_protocol::ErrorBody), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 404, description = "no such box", body = berth_protocol::ErrorBody), (status = 409, description = "`runtime` names another runtime and the box is not stopped", body = berth_protocol::ErrorBody), (status = 503, description = "the box could not start; it is failed with the reason", body = berth_protocol::ErrorBody)), request_body(content = StartBody, description = "optional"), security(("api_key" = [])))]
pub async fn start(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path(reference): Path<String>,
    OptionalJson(body): OptionalJson<StartBody>,
) -> Result<Json<BoxView>, ApiError> {
    let record = box_find::find_box(&ctx, &who.tenant_id, &reference)?;
    if let Some(runtime) = &body.runtime {
        box_move::move_box(&ctx, &record.id, runtime).await?;
    }
    let started = ctx.lifecycle().start(&record.id).await?;
    service::wait_started(&ctx, &started, service::START_WAIT).await;
    Ok(Json(BoxView::new(&ctx, started, &who)))
}

#[utoipa::path(post, path = "/v1/boxes/{box_ref}/stop", tag = "boxes", summary = "Stop a box (its volume stays)", params(("box_ref" = String, Path, description = "box id (`bx_…`) or name")), responses((status = 200, body = crate::api::view::BoxView), (status = 400, description = "invalid request", body = berth_protocol::ErrorBody), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 404, description = "no such box", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn stop(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path(reference): Path<String>,
) -> Result<Json<BoxView>, ApiError> {
    let record = box_find::find_box(&ctx, &who.tenant_id, &reference)?;
    let stopped = ctx.lifecycle().stop(&record.id).await?;
    Ok(Json(BoxView::new(&ctx, stopped, &who)))
}
