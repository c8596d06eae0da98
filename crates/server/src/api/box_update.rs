//! `PATCH /v1/boxes/{ref}`: change a box's record (docs/api.md, "Changing a box").

use std::collections::BTreeMap;

use axum::extract::{Path, State};
use axum::Json;
use serde::Deserialize;

use crate::api::auth::Caller;
use crate::api::boxes::LimitsBody;
use crate::api::error::ApiError;
use crate::api::extract::ApiJson;
use crate::api::old_names;
use crate::api::view::BoxView;
use crate::ctx::Ctx;
use crate::ops::box_find;
use crate::ops::box_update::{self, BoxUpdate};
use crate::validate::SleepInput;

/// Any subset of the fields; an absent (or `null`) field stays as it is.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = UpdateBox)]
pub struct UpdateBody {
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
    /// Whether a call that needs a paused or snapshotted box wakes it ; false:
    /// such calls get 409 until `POST /v1/boxes/{ref}/resume`.
    #[serde(default)]
    auto_resume: Option<bool>,
    /// (The ladder applies at once.)
    /// Over the limits the next start would apply; applied at the box's next start (while
    /// the box runs, the view shows them as `pending_limits`).
    #[serde(default)]
    limits: Option<LimitsBody>,
    /// The box's own volume size in MiB; only grows; the next start grows the volume.
    #[serde(default)]
    disk_mib: Option<u64>,
    /// Replaces every label (`{}` removes them all). Keys: 1..=63 of `A-Za-z0-9._-/`,
    /// starting with a letter or digit; values: at most 255 bytes, no control characters;
    /// at most 64 labels.
    #[serde(default)]
    labels: Option<BTreeMap<String, String>>,
    /// Replaces the box's whole environment (`{}` clears it). Not secrets: stored and
    /// shown in plain text. Names `[A-Za-z_][A-Za-z0-9_]*`; at most 128 variables.
    #[serde(default)]
    env: Option<BTreeMap<String, String>>,
}

impl From<UpdateBody> for BoxUpdate {
    fn from(b: UpdateBody) -> Self {
        BoxUpdate {
            sleep: SleepInput {
                pause_after_s: b.pause_after_s,
                snapshot_after_s: b.snapshot_after_s,
                stop_after_s: old_names::renamed(
                    "PATCH /v1/boxes/{ref}",
                    ("stop_after_s", b.stop_after_s),
                    ("idle_timeout_s", b.idle_timeout_s),
                ),
                auto_resume: b.auto_resume,
            },
            limits: b.limits.map(Into::into),
            disk_mib: b.disk_mib,
            labels: b.labels,
            env: b.env,
        }
    }
}

#[utoipa::path(patch, path = "/v1/boxes/{box_ref}", tag = "boxes", summary = "Change a box's sleep ladder, limits, disk size, labels or env", params(("box_ref" = String, Path, description = "box id (`bx_…`) or name")), request_body = UpdateBody, responses((status = 200, body = crate::api::view::BoxView), (status = 400, description = "invalid request (a value out of range, a bad label or variable, a smaller disk)", body = berth_protocol::ErrorBody), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 403, description = "more memory or disk than the tenant's quota allows (`quota_exceeded`)", body = berth_protocol::ErrorBody), (status = 404, description = "no such box", body = berth_protocol::ErrorBody), (status = 507, description = "the data dir's disk cannot promise a larger volume", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn update(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path(reference): Path<String>,
    ApiJson(body): ApiJson<UpdateBody>,
) -> Result<Json<BoxView>, ApiError> {
    let record = box_find::find_box(&ctx, &who.tenant_id, &reference)?;
    let updated = box_update::update_box(&ctx, &record, body.into()).await?;
    Ok(Json(BoxView::new(&ctx, updated, &who)))
}
