//! [`BootPlan`]: every rule of a boot, without booting anything.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use berth_protocol::guest::BoxUser;
use berth_protocol::harness::{AckMode, HarnessConfig};
use berth_protocol::service::{ReadyCheck, RestartPolicy, ServiceConfig};
use berth_protocol::BoxId;
use berth_runtime::{BootToken, EgressSetup, IdMap, Layer, Limits, Rootfs};
use berth_store::{BoxLimits, BoxRecord, BoxState};

use super::{BootPlan, PlanError, Prepared, RootfsPlan};
use crate::egress::policy::EgressPolicy;
use crate::error::TemplateProblem;
use crate::templates::{Base, Origin, Template, DEFAULT_SLEEP};

fn template() -> Template {
    Template {
        name: "agent".into(),
        base: Base::Minimal,
        sleep: DEFAULT_SLEEP,
        limits: Limits::default(),
        disk_mib: 2048,
        layers: vec![Layer {
            source: PathBuf::from("/layers/harness"),
            target: "/opt/harness".into(),
        }],
        harness: Some(HarnessConfig {
            command: vec!["/opt/harness/run".into()],
            resume_args: Vec::new(),
            session: None,
            env: BTreeMap::from([("MODE".into(), "template".into())]),
            ack: AckMode::default(),
            max_restarts: 3,
            turn_timeout_s: berth_protocol::harness::DEFAULT_TURN_TIMEOUT_S,
        }),
        egress: EgressPolicy::default(),
        warm: 0,
        node_labels: Default::default(),
        memory: None,
        services: vec![ServiceConfig {
            name: "db".into(),
            command: vec!["/usr/bin/db".into()],
            user: BoxUser::User,
            env: BTreeMap::new(),
            cwd: None,
            restart: RestartPolicy::Always,
            ready: Some(ReadyCheck::Port(5432)),
            after: Vec::new(),
            keep_awake: true,
            max_restarts: 5,
            ready_timeout_s: 60,
            stop_timeout_s: 10,
        }],
        origin: Origin::Builtin,
        unavailable: None,
        warnings: Vec::new(),
    }
}

fn record() -> BoxRecord {
    let at = time::OffsetDateTime::UNIX_EPOCH;
    BoxRecord {
        id: BoxId::from_random([7; 20]),
        tenant_id: "tn_aaaaaaaaaaaaaaaaaaaa".parse().unwrap(),
        name: "alpha".into(),
        template: "agent".into(),
        state: BoxState::Starting,
        state_reason: None,
        memory_mib: 512,
        pids: 256,
        cpus: 1.5,
        stop_after_s: 0,
        pause_after_s: 0,
        snapshot_after_s: 0,
        auto_resume: true,
        id_slot: 3,
        generation: 4,
        created_at: at,
        updated_at: at,
        egress: None,
        runtime: "sandbox".into(),
        disk_mib: None,
        labels: BTreeMap::new(),
        env: BTreeMap::from([("MODE".into(), "box".into())]),
        pending_limits: None,
        failure: None,
        last_boot: None,
        node_id: None,
        durable: None,
        volume_epoch: 0,
    }
}

fn policy() -> EgressPolicy {
    EgressPolicy {
        allow: vec!["api.example.com".into()],
        credentials: Vec::new(),
    }
}

fn plan(record: &BoxRecord, template: Option<Template>) -> Result<BootPlan, PlanError> {
    BootPlan::new(record, template.map(Arc::new), "sandbox", policy(), None)
}

#[test]
fn a_plan_takes_the_template_the_box_and_its_policy() {
    let plan = plan(&record(), Some(template())).unwrap();
    assert_eq!(
        plan.rootfs,
        RootfsPlan {
            template: "agent".into(),
            base: Base::Minimal,
            layer_targets: vec!["/opt/harness".into()],
            runtime: "sandbox".into(),
        }
    );
    assert_eq!(plan.layers, template().layers);
    assert_eq!(plan.egress, policy());
    assert_eq!(plan.id_map, IdMap::for_slot(3).unwrap());
    assert_eq!(plan.limits.memory_mib, 512);
    assert_eq!(plan.limits.pids, 256);
    assert_eq!(plan.limits.cpus, 1.5);
    // No size of its own: the template's.
    assert_eq!(plan.wanted_disk_mib, 2048);
    assert!(plan.restore_from.is_none());
    // The box's env goes over the template's harness env.
    let harness = plan.harness.unwrap();
    assert_eq!(harness.env["MODE"], "box");
    assert_eq!(harness.command, vec!["/opt/harness/run".to_owned()]);
    // The template's services, with the box's env over theirs, as the harness has it.
    let mut services = template().services;
    services[0].env.insert("MODE".into(), "box".into());
    assert_eq!(plan.services, services);
}

#[test]
fn pending_limits_and_an_own_disk_size_win() {
    let mut record = record();
    record.pending_limits = Some(BoxLimits {
        memory_mib: 1024,
        pids: 64,
        cpus: 0.5,
    });
    record.disk_mib = Some(4096);
    let plan = plan(&record, Some(template())).unwrap();
    assert_eq!(plan.limits.memory_mib, 1024);
    assert_eq!(plan.limits.pids, 64);
    assert_eq!(plan.wanted_disk_mib, 4096);
}

#[test]
fn a_snapshot_token_makes_it_a_restore() {
    let token = BootToken::from_random([9; 32]);
    let plan = BootPlan::new(
        &record(),
        Some(Arc::new(template())),
        "qemu",
        policy(),
        Some(token.clone()),
    )
    .unwrap();
    assert_eq!(
        plan.restore_from.as_ref().map(BootToken::as_str),
        Some(token.as_str())
    );
    assert_eq!(plan.rootfs.runtime, "qemu");
}

#[test]
fn a_missing_or_unavailable_template_is_refused() {
    match plan(&record(), None).err() {
        Some(PlanError::Template {
            template,
            problem: TemplateProblem::Missing,
        }) => assert_eq!(template, "agent"),
        other => panic!("{other:?}"),
    }
    let mut unavailable = template();
    unavailable.unavailable = Some("the echo harness binary is missing".into());
    match plan(&record(), Some(unavailable)).err() {
        Some(PlanError::Template {
            problem: TemplateProblem::Unavailable { reason },
            ..
        }) => assert_eq!(reason, "the echo harness binary is missing"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_box_past_the_last_uid_range_is_refused() {
    let mut record = record();
    record.id_slot = IdMap::SLOTS;
    assert!(matches!(
        plan(&record, Some(template())).err(),
        Some(PlanError::NoIdRange { slot }) if slot == IdMap::SLOTS
    ));
}

#[test]
fn the_spec_is_the_plan_with_what_the_boot_prepared() {
    let record = record();
    let plan = plan(&record, Some(template())).unwrap();
    let token = BootToken::from_random([1; 32]);
    let setup = EgressSetup {
        pinned_hosts: vec!["api.example.com".into()],
        ca_pem: Some("CA".into()),
    };
    let env = BTreeMap::from([("HTTPS_PROXY".into(), "http://127.0.0.1:3128".into())]);
    let spec = plan.spec(
        &record,
        Prepared {
            rootfs: Rootfs::Host,
            egress_setup: setup.clone(),
            egress_env: env.clone(),
            boot_token: token.clone(),
            disk_mib: 1024,
        },
    );
    assert_eq!(spec.id, record.id);
    assert_eq!(spec.hostname, "alpha");
    assert_eq!(spec.rootfs, Rootfs::Host);
    assert_eq!(spec.boot_token.as_str(), token.as_str());
    assert_eq!(spec.egress, setup);
    assert_eq!(spec.env, env);
    assert_eq!(spec.disk_mib, 1024);
    assert_eq!(spec.layers, plan.layers);
    assert_eq!(spec.harness, plan.harness);
    assert_eq!(spec.services, plan.services);
    assert_eq!(spec.id_map, plan.id_map);
}
