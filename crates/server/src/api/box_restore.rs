//! `POST /v1/boxes/{ref}/restore` `{"from":"copy","generation":3}`: a stopped box's volume
//! put back from a durable copy (its newest unless `generation` names one), for an image
//! lost or damaged on its host. An operator's call (admin key; a box of any tenant by its
//! id), left out of the OpenAPI description like `/v1/nodes` (docs/api.md describes it).

use axum::extract::{Path, State};
use axum::Json;
use berth_protocol::BoxId;
use serde::Deserialize;

use crate::api::auth::Caller;
use crate::api::error::ApiError;
use crate::api::extract::ApiJson;
use crate::api::view::BoxView;
use crate::ctx::Ctx;
use crate::error::OpError;
use crate::ops::box_find;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RestoreBody {
    /// What to restore from: `copy` (a durable copy), the only source there is.
    from: RestoreFrom,
    #[serde(default)]
    generation: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
enum RestoreFrom {
    Copy,
}

pub async fn restore(
    State(ctx): State<Ctx>,
    caller: Caller,
    Path(reference): Path<String>,
    ApiJson(body): ApiJson<RestoreBody>,
) -> Result<Json<BoxView>, ApiError> {
    let who = caller.require_admin()?;
    let RestoreFrom::Copy = body.from;
    // The admin reaches a box of any tenant by its id, its own tenant's by name too.
    let record = match reference.parse::<BoxId>() {
        Ok(id) => ctx
            .store
            .get_box(&id)
            .map_err(OpError::from)?
            .ok_or_else(|| OpError::BoxNotFound {
                reference: reference.clone(),
            })?,
        Err(_) => box_find::find_box(&ctx, &who.tenant_id, &reference)?,
    };
    let restored = ctx
        .lifecycle()
        .restore_from_copy(&record.id, body.generation)
        .await?;
    Ok(Json(BoxView::measured(&ctx, restored, who).await))
}
