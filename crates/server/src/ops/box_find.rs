//! Box lookups for a client: always scoped by the caller's tenant, so another tenant's
//! box is "no box" (404), never "forbidden". A box found is named in the request's span
//! ([`name_in_span`]).

use berth_protocol::{BoxId, TenantId};
use berth_store::BoxRecord;

use crate::box_labels::BoxFilter;
use crate::ctx::Ctx;
use crate::error::OpError;

/// The tenant's box by id (`bx_…`) or name.
pub fn find_box(ctx: &Ctx, tenant: &TenantId, reference: &str) -> Result<BoxRecord, OpError> {
    let found = match reference.parse::<BoxId>() {
        Ok(id) => ctx.store.get_box_by_id(tenant, &id)?,
        Err(_) => ctx.store.get_box_by_name(tenant, reference)?,
    };
    let record = found.ok_or_else(|| OpError::BoxNotFound {
        reference: reference.to_owned(),
    })?;
    name_in_span(&record.id);
    Ok(record)
}

/// Names the box in the span of the request being served (`box_id`,
/// `api::request_id`): every line logged for the rest of the request carries it. Outside a
/// request's span it records nothing.
pub(crate) fn name_in_span(id: &BoxId) {
    tracing::Span::current().record("box_id", tracing::field::display(id));
}

pub fn list_boxes(ctx: &Ctx, tenant: &TenantId) -> Result<Vec<BoxRecord>, OpError> {
    Ok(ctx.store.list_boxes(tenant)?)
}

/// The tenant's boxes that `filter` selects. A tenant has few boxes: they are filtered
/// here rather than in SQL over the labels' JSON.
pub fn list_matching(
    ctx: &Ctx,
    tenant: &TenantId,
    filter: &BoxFilter,
) -> Result<Vec<BoxRecord>, OpError> {
    let mut boxes = list_boxes(ctx, tenant)?;
    boxes.retain(|b| filter.matches(b));
    Ok(boxes)
}

/// The current row of a box the caller already found (after a lifecycle change).
pub(crate) fn reload(ctx: &Ctx, id: &BoxId) -> Result<BoxRecord, OpError> {
    ctx.store.get_box(id)?.ok_or_else(|| OpError::BoxNotFound {
        reference: id.to_string(),
    })
}
