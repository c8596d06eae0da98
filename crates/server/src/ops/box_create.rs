//! `POST /v1/boxes`: a new box, `stopped`. Nothing runs until the first wake.

use berth_protocol::{BoxId, TenantId};
use berth_store::{BoxRecord, NewBox};

use crate::ctx::Ctx;
use crate::error::OpError;
use crate::validate::{self, LimitsInput, DEFAULT_TEMPLATE};

#[derive(Debug, Clone, PartialEq)]
pub struct CreateBox {
    pub name: String,
    pub template: Option<String>,
    pub limits: LimitsInput,
}

pub fn create_box(ctx: &Ctx, tenant: &TenantId, req: CreateBox) -> Result<BoxRecord, OpError> {
    validate::box_name(&req.name)?;
    let template = req.template.unwrap_or_else(|| DEFAULT_TEMPLATE.to_owned());
    validate::template_rootfs(&template)?;
    let limits = validate::limits(req.limits)?;
    let mut random = [0u8; 20];
    getrandom::fill(&mut random).map_err(OpError::Random)?;
    let record = ctx.store.insert_box(&NewBox {
        id: BoxId::from_random(random),
        tenant_id: tenant.clone(),
        name: req.name,
        template,
        memory_mib: limits.memory_mib,
        pids: limits.pids,
        cpus: limits.cpus,
    })?;
    tracing::info!(box_id = %record.id, name = %record.name, slot = record.id_slot, "box created");
    Ok(record)
}
