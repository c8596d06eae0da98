//! A sandbox as E2B's JSON shows it, from its box and its sandbox row.
//!
//! State: a box that runs (or is starting) is `running`; any other is `paused`, which is
//! what `connect` brings back: frozen in memory or snapshotted (`pauseMode: full`, its
//! processes kept), or stopped (`pauseMode: filesystem`, only its disk kept: after a pause
//! with `memory: false`, a `berth box stop`, or a daemon restart).

use berth_store::{BoxRecord, BoxState, E2bSandbox};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use crate::ctx::Ctx;
use crate::e2b::wire::{Lifecycle, ListedSandbox, Sandbox, SandboxDetail, SandboxState};
use crate::e2b::{access_token, CLIENT_ID, ENVD_VERSION};
use crate::ops::box_disk;

/// The E2B state of a box.
pub fn state(record: &BoxRecord) -> SandboxState {
    match record.state {
        BoxState::Running | BoxState::Starting => SandboxState::Running,
        BoxState::Paused
        | BoxState::Snapshotted
        | BoxState::Stopping
        | BoxState::Stopped
        | BoxState::Failed
        | BoxState::Deleted => SandboxState::Paused,
    }
}

/// What a paused box's last pause kept; `None` for a running one.
fn pause_mode(record: &BoxRecord) -> Option<&'static str> {
    match record.state {
        BoxState::Running | BoxState::Starting | BoxState::Deleted => None,
        BoxState::Paused | BoxState::Snapshotted => Some("full"),
        BoxState::Stopping | BoxState::Stopped | BoxState::Failed => Some("filesystem"),
    }
}

/// `Sandbox`: the answer of create, connect and resume.
pub fn sandbox(ctx: &Ctx, record: &BoxRecord, row: &E2bSandbox) -> Sandbox {
    Sandbox {
        template_id: row.template_id.clone(),
        sandbox_id: row.sandbox_id.clone(),
        alias: row.template_id.clone(),
        client_id: CLIENT_ID,
        envd_version: ENVD_VERSION,
        envd_access_token: access_token::for_box(ctx, &record.id),
        traffic_access_token: Some(access_token::traffic_for_box(ctx, &record.id)),
        domain: ctx.ports.base_domain.clone(),
    }
}

/// `ListedSandbox`: an entry of a list.
pub fn listed(ctx: &Ctx, record: &BoxRecord, row: &E2bSandbox) -> ListedSandbox {
    ListedSandbox {
        template_id: row.template_id.clone(),
        alias: row.template_id.clone(),
        sandbox_id: row.sandbox_id.clone(),
        client_id: CLIENT_ID,
        started_at: rfc3339_ms(row.started_at_ms),
        end_at: rfc3339_ms(row.end_at_ms),
        cpu_count: cpu_count(record.cpus),
        memory_mb: record.memory_mib,
        disk_size_mb: box_disk::box_disk_mib(ctx, record),
        metadata: row.metadata.clone(),
        state: state(record),
        envd_version: ENVD_VERSION,
        volume_mounts: Vec::new(),
    }
}

/// `SandboxDetail`: `GET /sandboxes/{id}`.
pub fn detail(ctx: &Ctx, record: &BoxRecord, row: &E2bSandbox) -> SandboxDetail {
    SandboxDetail {
        listed: listed(ctx, record, row),
        envd_access_token: access_token::for_box(ctx, &record.id),
        allow_internet_access: row.allow_internet_access,
        domain: ctx.ports.base_domain.clone(),
        lifecycle: Lifecycle {
            auto_resume: record.auto_resume,
            on_timeout: if row.auto_pause { "pause" } else { "kill" },
        },
        pause_mode: pause_mode(record),
    }
}

/// E2B counts whole CPUs, at least one; a box may have a fraction.
pub fn cpu_count(cpus: f64) -> u64 {
    (cpus.ceil() as u64).max(1)
}

/// Unix milliseconds as RFC 3339 (UTC).
pub fn rfc3339_ms(ms: i64) -> String {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .ok()
        .and_then(|t| t.format(&Rfc3339).ok())
        .unwrap_or_default()
}
