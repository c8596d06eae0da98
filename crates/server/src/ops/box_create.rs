//! `POST /v1/boxes`: a new box, `stopped`. Nothing runs until the first wake.
//!
//! The box is made from a template (`host` unless named): the template gives the defaults
//! of the limits and the idle timeout, which the client may override. The box keeps the
//! template's name; its layers and harness are looked up at every start.

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
    pub idle_timeout_s: Option<u64>,
}

pub fn create_box(ctx: &Ctx, tenant: &TenantId, req: CreateBox) -> Result<BoxRecord, OpError> {
    validate::box_name(&req.name)?;
    let name = req.template.unwrap_or_else(|| DEFAULT_TEMPLATE.to_owned());
    let registry = ctx.templates.current();
    let template = registry
        .get(&name)
        .ok_or_else(|| OpError::UnknownTemplate {
            template: name.clone(),
            available: registry.list().iter().map(|t| t.name.clone()).collect(),
        })?;
    if let Some(reason) = &template.unavailable {
        return Err(OpError::TemplateUnavailable {
            template: name,
            reason: reason.clone(),
        });
    }
    let limits = validate::limits_over(template.limits, req.limits)?;
    let idle_timeout_s = match req.idle_timeout_s {
        Some(value) => validate::idle_timeout_s(value)?,
        None => template.idle_timeout_s,
    };
    let mut random = [0u8; 20];
    getrandom::fill(&mut random).map_err(OpError::Random)?;
    let record = ctx.store.insert_box(&NewBox {
        id: BoxId::from_random(random),
        tenant_id: tenant.clone(),
        name: req.name,
        template: name,
        memory_mib: limits.memory_mib,
        pids: limits.pids,
        cpus: limits.cpus,
        idle_timeout_s,
    })?;
    tracing::info!(box_id = %record.id, name = %record.name, template = %record.template, slot = record.id_slot, "box created");
    Ok(record)
}
