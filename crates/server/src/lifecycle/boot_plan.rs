//! What a boot of a box will be, decided before anything is done: [`BootPlan::new`] reads
//! the box's row and its template as they are now (template → rootfs → layers → egress →
//! limits) and [`BootPlan::spec`] turns the plan and what the boot prepared (the rootfs,
//! the egress setup, a fresh token, the volume size) into the runtime's [`BoxSpec`]. Both
//! are pure, so every rule of a boot is unit-tested here; the boot itself, with its side
//! effects and failure records, is `super::wake`'s, under a [`super::transition`] guard.

use std::collections::BTreeMap;
use std::sync::Arc;

use berth_protocol::harness::HarnessConfig;
use berth_protocol::service::ServiceConfig;
use berth_runtime::{BootToken, BoxSpec, EgressSetup, IdMap, Layer, Limits, Rootfs};
use berth_store::BoxRecord;

use crate::egress::policy::EgressPolicy;
use crate::error::TemplateProblem;
use crate::templates::{Base, Template};

/// A boot of one box, decided.
pub(crate) struct BootPlan {
    /// What the rootfs is made from (`super::rootfs::rootfs_for`).
    pub rootfs: RootfsPlan,
    pub layers: Vec<Layer>,
    /// The policy the box's egress is set up under, restored or fresh.
    pub egress: EgressPolicy,
    /// The snapshot's token when the boot restores one (else, or if that fails, it is a
    /// cold start).
    pub restore_from: Option<BootToken>,
    pub limits: Limits,
    pub id_map: IdMap,
    /// The template's harness with the box's own env on top.
    pub harness: Option<HarnessConfig>,
    /// How `/memory` is seeded on the volume's first boot (the template's `[memory]`).
    pub memory: Option<berth_protocol::memory::MemoryLayout>,
    /// The template's `[[services]]`, for `berth-init` to start before the harness.
    pub services: Vec<ServiceConfig>,
    /// The volume size the box asks for (its own, else its template's); the start may
    /// keep it smaller (`box_disk::volume_mib_for_start`).
    pub wanted_disk_mib: u64,
}

/// The parts of a rootfs: a template's base with its layers' mount points, for a runtime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RootfsPlan {
    pub template: String,
    pub base: Base,
    pub layer_targets: Vec<String>,
    pub runtime: String,
}

/// Why a box cannot boot, known before anything is done.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PlanError {
    #[error("its template {template:?} {problem}")]
    Template {
        template: String,
        problem: TemplateProblem,
    },
    /// More boxes than `IdMap::SLOTS` were ever made.
    #[error("its id slot {slot} is past the last uid range")]
    NoIdRange { slot: u32 },
}

impl BootPlan {
    /// The boot of `record` (its limits as its next start applies them) with `template`
    /// (the current registry's, `None` when gone) on `runtime`, under `egress` (the box's
    /// policy now); `snapshot_token` when the box is snapshotted.
    pub fn new(
        record: &BoxRecord,
        template: Option<Arc<Template>>,
        runtime: &str,
        egress: EgressPolicy,
        snapshot_token: Option<BootToken>,
    ) -> Result<BootPlan, PlanError> {
        let template = usable(template).map_err(|problem| PlanError::Template {
            template: record.template.clone(),
            problem,
        })?;
        let id_map = IdMap::for_slot(record.id_slot).ok_or(PlanError::NoIdRange {
            slot: record.id_slot,
        })?;
        let limits = record.next_limits();
        Ok(BootPlan {
            rootfs: RootfsPlan {
                template: template.name.clone(),
                base: template.base.clone(),
                layer_targets: template.layers.iter().map(|l| l.target.clone()).collect(),
                runtime: runtime.to_owned(),
            },
            layers: template.layers.clone(),
            egress,
            restore_from: snapshot_token,
            limits: Limits {
                memory_mib: limits.memory_mib,
                pids: limits.pids,
                cpus: limits.cpus,
            },
            id_map,
            harness: crate::box_env::harness_with(template.harness.clone(), &record.env),
            wanted_disk_mib: record.disk_mib.unwrap_or(template.disk_mib),
            memory: template.memory.clone(),
            services: crate::box_env::services_with(template.services.clone(), &record.env),
        })
    }

    /// The runtime's spec for this plan of `record`, with what the boot prepared.
    pub fn spec(&self, record: &BoxRecord, prepared: Prepared) -> BoxSpec {
        BoxSpec {
            id: record.id.clone(),
            hostname: record.name.clone(),
            rootfs: prepared.rootfs,
            limits: self.limits,
            boot_token: prepared.boot_token,
            id_map: self.id_map,
            layers: self.layers.clone(),
            harness: self.harness.clone(),
            egress: prepared.egress_setup,
            env: prepared.egress_env,
            disk_mib: prepared.disk_mib,
            memory: self.memory.clone(),
            services: self.services.clone(),
        }
    }
}

/// What a boot made ready before the runtime call.
pub(crate) struct Prepared {
    pub rootfs: Rootfs,
    pub egress_setup: EgressSetup,
    pub egress_env: BTreeMap<String, String>,
    /// A fresh token: a client of an earlier boot can never reach this one.
    pub boot_token: BootToken,
    pub disk_mib: u64,
}

/// The template, if boxes can start from it now.
fn usable(template: Option<Arc<Template>>) -> Result<Arc<Template>, TemplateProblem> {
    match template {
        None => Err(TemplateProblem::Missing),
        Some(t) => match &t.unavailable {
            Some(reason) => Err(TemplateProblem::Unavailable {
                reason: reason.clone(),
            }),
            None => Ok(t),
        },
    }
}

#[cfg(test)]
#[path = "boot_plan_tests.rs"]
mod tests;
