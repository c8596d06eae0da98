//! The public JSON shape of a box (docs/api.md).

use std::collections::BTreeMap;

use berth_store::{BoxLimits, BoxRecord, BoxState, LastBoot, PhaseSource, Principal};
use serde::Serialize;
use time::format_description::well_known::Rfc3339;

use crate::ctx::Ctx;
use crate::egress::policy::EgressPolicy;
use crate::lifecycle::awake::{awake_because, AwakeReason};
use crate::ops::box_disk::box_disk_mib;

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct BoxView {
    pub id: String,
    pub name: String,
    pub template: String,
    /// `stopped`, `starting`, `running`, `stopping`, `paused`, `snapshotted` or `failed`:
    /// `running`, `paused`, `snapshotted` and `stopped` are the rungs of the sleep ladder.
    #[schema(value_type = String)]
    pub state: BoxState,
    /// The limits the box's processes run under (a stopped box: its next start's).
    pub limits: LimitsView,
    /// Limits changed while the box may have processes: its next start applies them.
    /// Absent when nothing is pending.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pending_limits: Option<LimitsView>,
    /// Idle seconds before the box is paused, snapshotted, stopped (0: never), and whether
    /// a call wakes a paused or snapshotted box.
    pub pause_after_s: u64,
    pub snapshot_after_s: u64,
    pub stop_after_s: u64,
    pub auto_resume: bool,
    /// Host memory the box holds now (its processes, or its VM); absent in lists and when
    /// it holds none or the runtime cannot say.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
    /// Disk its snapshot takes (`snapshotted` boxes); absent in lists and when it has none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshot_bytes: Option<u64>,
    /// The tenant's key/value labels (`GET /v1/boxes?label=k=v` filters on them).
    pub labels: BTreeMap<String, String>,
    /// Variables for the box's exec, terminals and harness. Not secrets: stored and shown
    /// in plain text.
    pub env: BTreeMap<String, String>,
    pub created_at: String,
    /// When the box last did something: its newest event that is not a state change (a
    /// message, an answer, a process's exit); `null` before any.
    pub last_activity_at: Option<String>,
    pub state_reason: Option<String>,
    /// The box's last transition that failed (a start, stop, pause, snapshot, …), until its
    /// next state change; absent when none did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<FailureView>,
    /// How the box's last successful start or restore went; absent before one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_boot: Option<LastBootView>,
    /// The egress policy the box's next start applies (canonical form): its own, else its
    /// template's current one. Empty: nothing leaves.
    pub egress: EgressPolicy,
    pub egress_source: EgressSource,
    /// The runtime the box runs on (fixed at creation).
    pub runtime: String,
    /// The id of the node the box lives on (`berth node ls`); `null` on a single host.
    pub node: Option<String>,
    /// Whether the box's host answers for it: `unreachable` while its node's lease has run
    /// out (its calls answer `503` until it comes back or the box moves to another node,
    /// docs/durable.md). Always `ok` on a single host.
    pub host_status: HostStatus,
    /// The volume size the box's next start uses: its own, else its template's.
    pub disk_mib: u64,
    /// Where `disk_mib` comes from.
    pub disk_source: EgressSource,
    /// The volume image as it is now; `null` before the box's first start made it.
    pub volume: Option<VolumeView>,
    /// The newest copy of the volume in the chunk store (`[storage] url`): what a restore
    /// or a move to another node starts from. `null` before the first, or without one.
    pub durable: Option<DurableCopyView>,
    /// What keeps the running box from being reclaimed as idle right now, as the host
    /// knows it (empty: nothing the host knows of; the box may still hold a harness turn
    /// or a terminal, which the reclaimer asks it about). Empty unless `running`.
    pub awake_because: Vec<AwakeReason>,
}

/// A failed transition of a box: which, at which step, why, and what to do.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct FailureView {
    /// `start`, `stop`, `pause`, `snapshot`, `reclaim`, `claim`, `forget`, `fail`, `exit` or
    /// `reconcile`.
    pub transition: String,
    /// The step that failed: `plan`, `runtime`, `rootfs`, `egress`, `runtime_start`, `runtime_stop`,
    /// `runtime_pause`, `runtime_resume`, `runtime_snapshot` or `handover`.
    pub step: String,
    /// The whole cause chain (host paths hidden from tenants).
    pub cause: String,
    /// What to do about it.
    pub hint: String,
}

/// The timings of a box's last successful boot.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct LastBootView {
    /// From the wake's start to the box ready for calls.
    pub total_ms: f64,
    /// A restore from a snapshot (else a cold start).
    pub restored: bool,
    /// In the order they ran: the daemon's steps (`plan`, `rootfs`, `egress`,
    /// `runtime_start`, `first_ready`), then the runtime's own, which ran inside
    /// `runtime_start`.
    pub phases: Vec<BootPhaseView>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct BootPhaseView {
    pub name: String,
    pub micros: u64,
    /// `daemon` or `runtime`: who measured it.
    pub source: String,
}

impl From<LastBoot> for LastBootView {
    fn from(b: LastBoot) -> Self {
        LastBootView {
            total_ms: b.total_micros as f64 / 1000.0,
            restored: b.restored,
            phases: b
                .phases
                .into_iter()
                .map(|p| BootPhaseView {
                    name: p.name,
                    micros: p.micros,
                    source: match p.source {
                        PhaseSource::Daemon => "daemon",
                        PhaseSource::Runtime => "runtime",
                    }
                    .to_owned(),
                })
                .collect(),
        }
    }
}

/// A box's volume image (`<data>/boxes/<id>/volume.ext4`), read without mounting it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct VolumeView {
    /// Its size now (below `disk_mib` until the next start grows it).
    pub size_mib: u64,
    /// What the box may still write, from the file system's superblock: exact while the
    /// box is stopped, as of its last mount or sync while it runs.
    pub free_mib: u64,
    /// What the image takes on the host's disk (it is sparse).
    pub allocated_mib: u64,
}

impl VolumeView {
    fn of(ctx: &Ctx, id: &berth_protocol::BoxId) -> Option<VolumeView> {
        let usage =
            berth_image::volume_usage(&berth_runtime::volume_image(&ctx.data_dir, id)).ok()?;
        Some(VolumeView {
            size_mib: usage.size_bytes >> 20,
            free_mib: usage.free_bytes >> 20,
            allocated_mib: usage.allocated_bytes.div_ceil(1 << 20),
        })
    }
}

/// Whether a box's host answers for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum HostStatus {
    Ok,
    Unreachable,
}

impl HostStatus {
    fn of(ctx: &Ctx, node: Option<&str>) -> HostStatus {
        let Some(node) = node else {
            return HostStatus::Ok;
        };
        match ctx.store.node_route(node) {
            Ok(Some(route)) if route.lapsed_ms <= 0 => HostStatus::Ok,
            Ok(_) => HostStatus::Unreachable,
            // The database did not answer: nothing is known of the node.
            Err(_) => HostStatus::Unreachable,
        }
    }
}

/// A durable copy of a box's volume.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct DurableCopyView {
    /// Its number among the box's copies, from 1.
    pub generation: u64,
    /// When the volume held what the copy holds (RFC 3339): what a restore loses is what
    /// the box wrote after it.
    pub taken_at: String,
    /// The volume image's size.
    pub image_bytes: u64,
    /// What its chunks take in the store, compressed (chunks shared with other copies
    /// counted in each).
    pub stored_bytes: u64,
}

impl From<berth_store::DurableCopy> for DurableCopyView {
    fn from(c: berth_store::DurableCopy) -> Self {
        DurableCopyView {
            generation: c.generation,
            taken_at: c.taken_at,
            image_bytes: c.image_bytes,
            stored_bytes: c.stored_bytes,
        }
    }
}

/// Where a box setting (its egress policy, its disk size) comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum EgressSource {
    /// Given at creation (`egress` in `POST /v1/boxes`); fixed for the box's life.
    Box,
    /// The template's, looked up at each start (empty when the template is gone).
    Template,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct LimitsView {
    pub memory_mib: u64,
    pub pids: u64,
    pub cpus: f64,
}

impl From<BoxLimits> for LimitsView {
    fn from(l: BoxLimits) -> Self {
        LimitsView {
            memory_mib: l.memory_mib,
            pids: l.pids,
            cpus: l.cpus,
        }
    }
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct BoxListView {
    pub boxes: Vec<BoxView>,
}

impl BoxView {
    /// The view of `r` for `who`; the effective egress policy comes from `ctx` (the
    /// template's is looked up in the current registry). A tenant's view of the reason
    /// carries no host paths.
    pub fn new(ctx: &Ctx, r: BoxRecord, who: &Principal) -> BoxView {
        let egress = ctx.box_egress(&r);
        let awake_because = awake_because(ctx, &r);
        let egress_source = match r.egress {
            Some(_) => EgressSource::Box,
            None => EgressSource::Template,
        };
        let disk_mib = box_disk_mib(ctx, &r);
        let limits = r.limits().into();
        let disk_source = match r.disk_mib {
            Some(_) => EgressSource::Box,
            None => EgressSource::Template,
        };
        let shown = |text: String| {
            if who.is_admin {
                text
            } else {
                redact_host_paths(&text)
            }
        };
        let state_reason = r.state_reason.map(shown);
        let failure = r.failure.map(|f| FailureView {
            transition: f.transition,
            step: f.step,
            cause: shown(f.cause),
            hint: f.hint,
        });
        let volume = VolumeView::of(ctx, &r.id);
        let last_activity_at = match ctx.store.last_activity_at(&r.id) {
            Ok(at) => at.and_then(|at| at.format(&Rfc3339).ok()),
            Err(e) => {
                tracing::warn!(box_id = %r.id, error = %e, "reading the box's last activity");
                None
            }
        };
        BoxView {
            id: r.id.to_string(),
            name: r.name,
            template: r.template,
            state: r.state,
            limits,
            pending_limits: r.pending_limits.map(LimitsView::from),
            pause_after_s: r.pause_after_s,
            snapshot_after_s: r.snapshot_after_s,
            stop_after_s: r.stop_after_s,
            auto_resume: r.auto_resume,
            memory_bytes: None,
            snapshot_bytes: None,
            labels: r.labels,
            env: r.env,
            created_at: r.created_at.format(&Rfc3339).unwrap_or_default(),
            last_activity_at,
            state_reason,
            failure,
            last_boot: r.last_boot.map(LastBootView::from),
            egress,
            egress_source,
            runtime: r.runtime,
            host_status: HostStatus::of(ctx, r.node_id.as_deref()),
            node: r.node_id,
            durable: r.durable.map(DurableCopyView::from),
            disk_mib,
            disk_source,
            volume,
            awake_because,
        }
    }
}

impl BoxView {
    /// The view with what the box holds on the host now (memory, snapshot disk), which
    /// costs the runtime a look: single-box answers carry it, lists do not.
    pub async fn measured(ctx: &Ctx, record: BoxRecord, who: &Principal) -> BoxView {
        let id = record.id.clone();
        let runtime = ctx.runtime_of(&record).ok();
        let mut view = BoxView::new(ctx, record, who);
        let Some(runtime) = runtime else {
            return view;
        };
        let measured = |what: &str, got: Result<Option<u64>, berth_runtime::RuntimeError>| {
            got.unwrap_or_else(|e| {
                tracing::warn!(box_id = %id, error = %berth_runtime::error_chain(&e), "cannot measure the box's {what}");
                None
            })
        };
        view.memory_bytes = measured("memory", runtime.memory_held(&id).await);
        view.snapshot_bytes = measured("snapshot", runtime.snapshot_size(&id).await);
        view
    }
}

/// What stands for a host path in what a tenant reads.
const HOST_PATH: &str = "<host path>";

/// `text` (a reason the daemon wrote: a failed start, an unavailable runtime or template)
/// with every absolute path replaced by `<host path>`: a tenant learns what went wrong,
/// not where the host keeps its files. A path starts with `/` at the start of the text or
/// after a space, quote, bracket, `=` or `:`, and ends at a space, quote, bracket, `,`, `;`
/// or `:`. The API's own paths (`/v1/…`) stay.
pub fn redact_host_paths(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_path = false;
    let mut prev = None;
    for (i, c) in text.char_indices() {
        if in_path {
            if c.is_whitespace() || "\"'()[],;:".contains(c) {
                in_path = false;
                out.push(c);
            }
        } else if c == '/'
            && prev.is_none_or(|p: char| p.is_whitespace() || "\"'([=:".contains(p))
            && !text[i..].starts_with("/v1/")
        {
            in_path = true;
            out.push_str(HOST_PATH);
        } else {
            out.push(c);
        }
        prev = Some(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::redact_host_paths;

    #[test]
    fn host_paths_are_replaced_and_the_words_stay() {
        for (text, want) in [
            (
                "cannot mount /var/lib/berth/boxes/bx_1/volume.ext4: no space",
                "cannot mount <host path>: no space",
            ),
            (
                "no kernel at \"/var/lib/berth/images/vmlinuz\" (run berth image build)",
                "no kernel at \"<host path>\" (run berth image build)",
            ),
            (
                "base dir:/srv/rootfs is gone",
                "base dir:<host path> is gone",
            ),
            ("/a/b", "<host path>"),
            (
                "retry with POST /v1/boxes/a/start",
                "retry with POST /v1/boxes/a/start",
            ),
            (
                "1/2 of the disk, and/or more",
                "1/2 of the disk, and/or more",
            ),
        ] {
            assert_eq!(redact_host_paths(text), want, "{text}");
        }
    }
}
