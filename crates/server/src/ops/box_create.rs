//! `POST /v1/boxes`: a new box, `stopped`. Nothing runs until the first wake (unless it
//! comes from a warm pool, below).
//!
//! The box runs on the runtime named (the daemon's default unless named) for its life, and
//! is made from a template (`host` unless named; `minimal` on a VM runtime): the template gives the defaults
//! of the limits and the idle timeout, which the client may override. The box keeps the
//! template's name; its layers and harness are looked up at every start. So is its egress
//! policy, unless the client gives the box its own, which then replaces the template's
//! whole (allowlist and credential rules) for the box's life.
//!
//! A template with a warm pool (`warm = N`) gives a request that fits its pool boxes one
//! of them, already `running` (`lifecycle/warm_pool.rs`).

use std::collections::BTreeMap;

use berth_protocol::{BoxId, TenantId};
use berth_runtime::IdMap;
use berth_store::{Admission, BoxRecord, NewBox, Placement};

use crate::ctx::Ctx;
use crate::egress::policy::EgressPolicy;
use crate::error::OpError;
use crate::ops::box_disk;
use crate::ops::box_find::name_in_span;
use crate::runtimes::{boots_images, runs_base};
use crate::templates::{Base, Template};
use crate::validate::{self, LimitsInput, SleepInput, DEFAULT_TEMPLATE, DEFAULT_VM_TEMPLATE};

#[derive(Debug, Clone, PartialEq)]
pub struct CreateBox {
    pub name: String,
    pub template: Option<String>,
    pub limits: LimitsInput,
    pub sleep: SleepInput,
    /// The box's own egress policy; `None`: its template's.
    pub egress: Option<EgressPolicy>,
    /// `None`: the daemon's default runtime.
    pub runtime: Option<String>,
    /// The box's own volume size; `None`: its template's, at each start.
    pub disk_mib: Option<u64>,
    pub labels: BTreeMap<String, String>,
    /// Variables for the box's processes (`box_env.rs`).
    pub env: BTreeMap<String, String>,
}

pub async fn create_box(
    ctx: &Ctx,
    tenant: &TenantId,
    req: CreateBox,
) -> Result<BoxRecord, OpError> {
    create(ctx, tenant, req, true).await
}

/// A new box that is never one of a warm pool's (a restored backup's: its volume is its
/// own, put in place before its first start).
pub async fn create_cold(
    ctx: &Ctx,
    tenant: &TenantId,
    req: CreateBox,
) -> Result<BoxRecord, OpError> {
    create(ctx, tenant, req, false).await
}

async fn create(
    ctx: &Ctx,
    tenant: &TenantId,
    req: CreateBox,
    from_pool: bool,
) -> Result<BoxRecord, OpError> {
    validate::box_name(&req.name)?;
    let runtime = req
        .runtime
        .unwrap_or_else(|| ctx.runtimes.default_name().to_owned());
    // An API replica runs nothing: placement finds a node that offers the runtime.
    if ctx.role.api().is_none() {
        ctx.runtimes
            .get(&runtime)
            .map_err(OpError::InvalidRuntime)?;
    }
    // `host` cannot boot a VM: a VM's default is the smallest image.
    let name = req.template.unwrap_or_else(|| {
        if boots_images(&runtime) {
            DEFAULT_VM_TEMPLATE
        } else {
            DEFAULT_TEMPLATE
        }
        .to_owned()
    });
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
    check_base(&name, &template.base, &runtime)?;
    let disk_mib = req.disk_mib.map(validate::disk_mib).transpose()?;
    let limits = validate::limits_over(template.limits, req.limits)?;
    let caps = ctx.runtimes.capabilities(&runtime);
    let sleep = validate::sleep(
        req.sleep
            .over(validate::template_sleep(template.sleep, caps)),
        &runtime,
        caps,
    )?;
    crate::box_labels::validate(&req.labels)?;
    crate::box_env::validate(&req.env, req.egress.as_ref().unwrap_or(&template.egress))?;
    let egress = req
        .egress
        .map(|policy| own_egress(&policy, &name, program_envs(template)))
        .transpose()?;
    let mut random = [0u8; 20];
    getrandom::fill(&mut random).map_err(OpError::Random)?;
    let new = NewBox {
        id: BoxId::from_random(random),
        tenant_id: tenant.clone(),
        name: req.name,
        template: name,
        memory_mib: limits.memory_mib,
        pids: limits.pids,
        cpus: limits.cpus,
        sleep,
        egress,
        runtime,
        disk_mib,
        labels: req.labels,
        env: req.env,
    };
    if ctx.role.api().is_some() {
        return place(ctx, &new, &template.node_labels).await;
    }
    // A box of a template with a warm pool may be one of its booted boxes, moved over.
    if from_pool {
        if let Some(record) = ctx.lifecycle().claim_warm(&new, template).await {
            name_in_span(&record.id);
            return Ok(record);
        }
    }
    // Its volume is sparse: what it may take is promised now, with every other box's
    // (checked and recorded under one lock).
    let _promising = ctx.disk.promising();
    let promised = box_disk::promised_bytes(ctx)? + (disk_mib.unwrap_or(template.disk_mib) << 20);
    ctx.disk.check_promised("create a box", promised)?;
    let admission = Admission {
        id_slots: IdMap::SLOTS,
        template_disk: &|name| box_disk::template_disk_mib(ctx, name),
    };
    // The tenant's quota is checked in the insert's own transaction.
    let record = ctx.store.admit_box(&new, admission)?;
    name_in_span(&record.id);
    tracing::info!(box_id = %record.id, name = %record.name, template = %record.template, runtime = %record.runtime, slot = record.id_slot, "box created");
    Ok(record)
}

/// Puts the new box on a node (`berth_store::Store::place_box`: the row and the node's
/// `create` op in one transaction) and waits for the node to take it. A node that cannot
/// (its runtime or template is missing there) fails the op; the row goes, and its words
/// are the answer.
async fn place(
    ctx: &Ctx,
    new: &NewBox,
    template_labels: &BTreeMap<String, String>,
) -> Result<BoxRecord, OpError> {
    let node_labels = crate::box_labels::node_selector(template_labels, &new.labels);
    let placement = Placement {
        runtime: &new.runtime,
        node_labels: &node_labels,
        sample: PLACEMENT_SAMPLE,
    };
    let admission = Admission {
        id_slots: IdMap::SLOTS,
        template_disk: &|name| box_disk::template_disk_mib(ctx, name),
    };
    let placed = ctx.store.place_box(new, admission, &placement)?;
    name_in_span(&placed.record.id);
    if let Err(e) = crate::cluster::remote::wait(ctx, placed.op_id).await {
        if let Err(gone) = ctx.store.delete_box(&placed.record.id) {
            tracing::warn!(box_id = %placed.record.id, error = %berth_runtime::error_chain(&gone), "cannot remove a box its node refused");
        }
        return Err(e);
    }
    tracing::info!(box_id = %placed.record.id, name = %placed.record.name, node = ?placed.record.node_id, "box placed");
    Ok(placed.record)
}

/// How many nodes a placement draws and compares (best of K).
const PLACEMENT_SAMPLE: usize = 3;

/// Whether boxes of the template's base can run on `runtime`: image bases on every
/// runtime, `host` on the sandbox only.
pub(crate) fn check_base(template: &str, base: &Base, runtime: &str) -> Result<(), OpError> {
    if runs_base(runtime, base.is_image()) {
        return Ok(());
    }
    Err(OpError::BaseNotOnRuntime {
        template: template.to_owned(),
        base: base.to_string(),
        runtime: runtime.to_owned(),
        hint: "base host runs on the sandbox only; use --template minimal or debian",
    })
}

/// The box's own policy, validated, as the JSON the store keeps. A placeholder variable may
/// not be one the template's harness or one of its services sets (one would hide the other).
fn own_egress<'a>(
    policy: &EgressPolicy,
    template: &str,
    program_envs: impl Iterator<Item = &'a BTreeMap<String, String>>,
) -> Result<String, OpError> {
    let policy = policy.validated().map_err(OpError::InvalidEgress)?;
    for env in program_envs {
        let clash = policy
            .credentials
            .iter()
            .enumerate()
            .find(|(_, rule)| env.contains_key(&rule.placeholder_env));
        if let Some((index, rule)) = clash {
            return Err(OpError::EgressEnvClash {
                index,
                name: rule.name.clone(),
                var: rule.placeholder_env.clone(),
                template: template.to_owned(),
            });
        }
    }
    Ok(serde_json::to_string(&policy).expect("a policy serialises"))
}

/// The `env` tables of the template's harness and services.
fn program_envs(template: &Template) -> impl Iterator<Item = &BTreeMap<String, String>> {
    template
        .harness
        .iter()
        .map(|h| &h.env)
        .chain(template.services.iter().map(|s| &s.env))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_policy_round_trips_and_a_bad_one_fails_closed() {
        let id = BoxId::from_random([3; 20]);
        let policy = EgressPolicy {
            allow: vec!["API.example.test".into(), "*.example.test".into()],
            credentials: Vec::new(),
        };
        let json = own_egress(&policy, "host", std::iter::empty()).unwrap();
        assert_eq!(
            EgressPolicy::from_stored(&id, &json),
            policy.validated().unwrap()
        );
        let empty = EgressPolicy::default();
        for bad in [
            "",
            "not json",
            r#"{"allow":["a.test"],"extra":1}"#,
            r#"{"allow":["10.0.0.1"]}"#,
        ] {
            assert_eq!(EgressPolicy::from_stored(&id, bad), empty, "{bad}");
        }
    }
}
