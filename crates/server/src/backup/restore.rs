//! A backup made into a new box (`POST /v1/backups/restore`, `berth restore FILE`): the
//! archive read and checked whole (`read.rs`) before anything is created; then the box
//! created as its spec says (a new id, the name, tenant, runtime or template the caller
//! gives instead), its volume moved into place and its memory history imported under
//! the lifecycle lock, so no start sees it half made. If any of that fails the box is
//! deleted again: a restore leaves a whole box or none.

use std::io::{self, Read as _};

use berth_protocol::{BoxId, TenantId};
use berth_runtime::{volume_image, volume_image::mark_guest_written};
use berth_store::{BoxRecord, QuotaExceeded, QuotaLimit, StoreError};
use bytes::Bytes;
use futures_util::Stream;

use super::error::BackupError;
use super::format::{BoxSpec, Header};
use super::read::{self, Bounds, Received};
use super::{Scratch, INCOMING_DIR};
use crate::ctx::Ctx;
use crate::egress::policy::EgressPolicy;
use crate::error::OpError;
use crate::lifecycle::transition::{Kind, Transition};
use crate::ops::box_create::{self, CreateBox};
use crate::ops::box_disk;
use crate::validate::{LimitsInput, SleepInput, DISK_MIB_RANGE};

/// The most of a refused archive read after its refusal, so the client hears the answer.
const DRAIN_MAX: u64 = 1 << 30;

/// What the caller changes of the backed-up box.
#[derive(Debug, Clone, Default)]
pub struct RestoreAs {
    /// The name of the new box; `None`: the backed-up box's.
    pub name: Option<String>,
    pub runtime: Option<String>,
    pub template: Option<String>,
}

/// The box a restore made.
#[derive(Debug)]
pub struct Restored {
    pub record: BoxRecord,
    pub header: Header,
    pub snapshots: u64,
    /// What of the backed-up box could not be kept, for people.
    pub notes: Vec<String>,
}

/// Restores the archive `body` as a new box of `tenant`.
pub async fn restore<S>(
    ctx: &Ctx,
    tenant: &TenantId,
    to: RestoreAs,
    body: S,
) -> Result<Restored, OpError>
where
    S: Stream<Item = Result<Bytes, io::Error>> + Send + Unpin + 'static,
{
    if ctx.role.api().is_some() {
        return Err(BackupError::OnReplica.into());
    }
    let dir = Scratch::new(ctx, INCOMING_DIR, "restore")?;
    std::fs::create_dir(&dir.0).map_err(BackupError::io("create", &dir.0))?;
    let received = receive(ctx, tenant, &to, &dir, body).await?;
    let (req, notes) = create_request(ctx, &received.spec, to);
    let record = box_create::create_cold(ctx, tenant, req).await?;
    if let Err(e) = put_in_place(ctx, &record.id, &received).await {
        tracing::warn!(box_id = %record.id, error = %berth_runtime::error_chain(&e), "a restore failed after its box was created: removing the box");
        if let Err(gone) = crate::ops::box_delete::delete_box(ctx, &record.id).await {
            tracing::error!(box_id = %record.id, error = %berth_runtime::error_chain(&gone), "cannot remove the box of a failed restore; delete it");
        }
        return Err(e);
    }
    let record = ctx
        .store
        .get_box(&record.id)?
        .ok_or_else(|| OpError::BoxNotFound {
            reference: record.name.clone(),
        })?;
    tracing::info!(box_id = %record.id, name = %record.name, from = %received.header.box_id, created_at = %received.header.created_at, "box restored from a backup");
    Ok(Restored {
        record,
        snapshots: received.history.records().len() as u64,
        header: received.header,
        notes,
    })
}

/// Reads and checks the archive into `dir`.
async fn receive<S>(
    ctx: &Ctx,
    tenant: &TenantId,
    to: &RestoreAs,
    dir: &Scratch,
    body: S,
) -> Result<Received, OpError>
where
    S: Stream<Item = Result<Bytes, io::Error>> + Send + Unpin + 'static,
{
    let input = tokio_util::io::SyncIoBridge::new(tokio_util::io::StreamReader::new(body));
    let (ctx2, tenant) = (ctx.clone(), tenant.clone());
    let (name, template) = (to.name.clone(), to.template.clone());
    let bounds = Bounds {
        max_volume: *DISK_MIB_RANGE.end() << 20,
        early: Box::new(move |header: &Header, spec: &BoxSpec| {
            let name = name.as_deref().unwrap_or(&spec.name);
            let refused = |e: StoreError| BackupError::Refused(Box::new(e));
            match ctx2.store.get_box_by_name(&tenant, name) {
                Ok(None) => {}
                Ok(Some(_)) => {
                    let name = name.to_owned();
                    return Err(refused(StoreError::NameTaken { name }));
                }
                Err(e) => return Err(refused(e)),
            }
            if let Some(over) = over_quota(&ctx2, &tenant, spec, template.as_deref())? {
                return Err(refused(StoreError::QuotaExceeded(over)));
            }
            let _promising = ctx2.disk.promising();
            let promised = box_disk::promised_bytes(&ctx2).unwrap_or(0)
                + header.volume_bytes
                + header.history_bytes;
            ctx2.disk
                .check_promised("restore a backup", promised)
                .map_err(BackupError::DiskLow)
        }),
    };
    let path = dir.0.clone();
    let received = tokio::task::spawn_blocking(move || {
        let mut input = input;
        let received = read::receive(&mut input, &path, &bounds);
        if received.is_err() {
            // A refusal comes while the client still sends: the rest is read (to nowhere,
            // bounded) so it gets the answer, not a connection reset mid-upload.
            let _ = std::io::copy(&mut (&mut input).take(DRAIN_MAX), &mut std::io::sink());
        }
        received
    })
    .await
    .map_err(BackupError::Worker)??;
    Ok(received)
}

/// The limit of `tenant`'s quota the box of `spec` would pass (a box, its memory, its
/// disk), before anything is read past the spec. The create's own transaction checks
/// again.
fn over_quota(
    ctx: &Ctx,
    tenant: &TenantId,
    spec: &BoxSpec,
    template: Option<&str>,
) -> Result<Option<QuotaExceeded>, BackupError> {
    let refused = |e: StoreError| BackupError::Refused(Box::new(e));
    let template_disk = |name: &str| box_disk::template_disk_mib(ctx, name);
    let (quota, usage) = ctx
        .store
        .quota_usage(tenant, &template_disk)
        .map_err(refused)?;
    let disk = spec
        .disk_mib
        .unwrap_or_else(|| template_disk(template.unwrap_or(&spec.template)));
    let wants = [
        (QuotaLimit::MaxBoxes, quota.max_boxes, usage.boxes, 1),
        (
            QuotaLimit::MaxMemoryMib,
            quota.max_memory_mib,
            usage.memory_mib,
            spec.memory_mib,
        ),
        (
            QuotaLimit::MaxDiskMib,
            quota.max_disk_mib,
            usage.disk_mib,
            disk,
        ),
    ];
    Ok(wants
        .into_iter()
        .find_map(|(which, limit, usage, requested)| {
            let limit = limit.filter(|&max| usage + requested > max)?;
            Some(QuotaExceeded {
                which,
                limit,
                usage,
                requested,
            })
        }))
}

/// The create request of the box a backup was of, with the caller's changes. A sleep rung
/// the runtime cannot do is turned off, and said so.
fn create_request(ctx: &Ctx, spec: &BoxSpec, to: RestoreAs) -> (CreateBox, Vec<String>) {
    let mut notes = Vec::new();
    let runtime = to.runtime.unwrap_or_else(|| spec.runtime.clone());
    let caps = ctx.runtimes.capabilities(&runtime);
    let mut sleep = SleepInput {
        pause_after_s: Some(spec.pause_after_s),
        snapshot_after_s: Some(spec.snapshot_after_s),
        stop_after_s: Some(spec.stop_after_s),
        auto_resume: Some(spec.auto_resume),
    };
    if spec.pause_after_s > 0 && !caps.pause {
        sleep.pause_after_s = Some(0);
        notes.push(format!(
            "runtime {runtime} cannot pause a box: pause_after_s is off"
        ));
    }
    if spec.snapshot_after_s > 0 && !caps.snapshot {
        sleep.snapshot_after_s = Some(0);
        notes.push(format!(
            "runtime {runtime} cannot snapshot a box: snapshot_after_s is off"
        ));
    }
    let egress = spec
        .egress
        .clone()
        .and_then(|json| serde_json::from_value::<EgressPolicy>(json).ok());
    if spec.egress.is_some() && egress.is_none() {
        notes.push(
            "the box's own egress policy is not one this berth reads: it uses its template's"
                .into(),
        );
    }
    let req = CreateBox {
        name: to.name.unwrap_or_else(|| spec.name.clone()),
        template: Some(to.template.unwrap_or_else(|| spec.template.clone())),
        limits: LimitsInput {
            memory_mib: Some(spec.memory_mib),
            pids: Some(spec.pids),
            cpus: Some(spec.cpus),
        },
        sleep,
        egress,
        runtime: Some(runtime),
        disk_mib: spec.disk_mib,
        labels: spec.labels.clone(),
        env: spec.env.clone(),
    };
    (req, notes)
}

/// Moves the received volume into the new box and imports its history, holding the box's
/// lifecycle lock so no start comes between.
async fn put_in_place(ctx: &Ctx, id: &BoxId, received: &Received) -> Result<(), OpError> {
    let _t = Transition::begin(ctx, id, Kind::Restore).await?;
    if let Some(staged) = &received.volume {
        let image = volume_image(&ctx.data_dir, id);
        let dir = image
            .parent()
            .expect("a volume image is in its box's directory");
        std::fs::create_dir_all(dir).map_err(BackupError::io("create", dir))?;
        std::fs::rename(staged, &image)
            .map_err(BackupError::io("move the restored volume to", &image))?;
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(BackupError::io("sync", dir))?;
        // Its next start checks it in full before the host mounts it: it came from outside.
        mark_guest_written(&image).map_err(|e| {
            crate::lifecycle::transition::runtime_error("mark the restored volume of", id, e)
        })?;
    }
    ctx.memory
        .history
        .import(&id.to_string(), &received.history)
        .await
        .map_err(OpError::MemoryHistory)?;
    Ok(())
}
