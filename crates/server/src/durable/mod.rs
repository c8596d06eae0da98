//! Durable copies of boxes' volumes (`[storage] url`): each copy is a generation of the
//! box's volume in the chunk store (`berth_chunks`), so a box survives the loss of its
//! host's disk, and of its host.
//!
//! A copy is taken in two steps. The consistent point, with the box held still (its
//! lifecycle lock, and its volume frozen or the box stopped): the image is staged, a
//! reflink or a copy of its data extents ([`stage`]), under `<data>/durable/staged/`. Then,
//! with nothing held, the staged file is uploaded (only the chunks its previous copy does
//! not name) and the copy recorded on the box, only forward and only for the volume epoch
//! it was taken at. Uploads of one box run one at a time; a staged copy superseded by a
//! newer one before its turn is dropped. A failed upload is retried with backoff while it
//! is the box's newest. A staged copy is synced and renamed `.staged` before its upload,
//! so one the daemon did not finish (it crashed, or was stopped) is uploaded at its next
//! start ([`Durable::resume_pending`]).

pub mod error;
pub(crate) mod stage;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use berth_chunks::{ChunkStore, Manifest, StoreConfig};
use berth_protocol::BoxId;
use berth_runtime::error_chain;
use berth_store::{BoxRecord, DurableCopy, Store};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

pub use error::DurableError;

use crate::host_config::StorageHostConfig;
use crate::metrics::durable::DurableMetrics;

/// Where staged copies wait for their upload, under the data dir.
const STAGED_DIR: &str = "durable/staged";
/// The first retry of a failed upload; it doubles up to [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_secs(5);
const RETRY_MAX: Duration = Duration::from_secs(300);

/// The chunk store, the staged copies and their uploads.
pub struct Durable {
    chunks: ChunkStore,
    store: Arc<Store>,
    metrics: Arc<DurableMetrics>,
    staged_dir: PathBuf,
    keep: usize,
    /// How often a running box is copied; `None`: only when it goes to sleep.
    pub sync_interval: Option<Duration>,
    pub gc_interval: Duration,
    queues: Mutex<HashMap<BoxId, Arc<BoxQueue>>>,
    next_seq: AtomicU64,
}

impl std::fmt::Debug for Durable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Durable")
            .field("chunks", &self.chunks.describe())
            .finish_non_exhaustive()
    }
}

/// One box's uploads: the newest staged copy, and the turn its uploads take.
#[derive(Default)]
struct BoxQueue {
    newest: AtomicU64,
    turn: tokio::sync::Mutex<()>,
}

/// A staged copy, as its file name says: `<box>.<epoch>.<seq>.<taken unix>.staged`
/// (`.partial` until it is synced).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Staged {
    id: BoxId,
    epoch: u64,
    seq: u64,
    taken_unix: u64,
}

impl Staged {
    fn file_name(&self, suffix: &str) -> String {
        format!(
            "{}.{}.{}.{}.{suffix}",
            self.id, self.epoch, self.seq, self.taken_unix
        )
    }

    fn parse(name: &str) -> Option<(Staged, &str)> {
        let mut parts = name.split('.');
        let staged = Staged {
            id: parts.next()?.parse().ok()?,
            epoch: parts.next()?.parse().ok()?,
            seq: parts.next()?.parse().ok()?,
            taken_unix: parts.next()?.parse().ok()?,
        };
        let suffix = parts.next()?;
        parts.next().is_none().then_some((staged, suffix))
    }
}

/// Seconds since the epoch now (0 before it).
pub(crate) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// `unix` seconds as RFC 3339 (UTC), as copies' times are kept and shown.
pub(crate) fn rfc3339(unix: u64) -> String {
    OffsetDateTime::from_unix_timestamp(unix as i64)
        .ok()
        .and_then(|t| t.format(&Rfc3339).ok())
        .unwrap_or_default()
}

impl Durable {
    /// The chunk store `[storage] url` names, or `None` when it names none.
    pub fn open(
        config: &StorageHostConfig,
        data_dir: &Path,
        store: Arc<Store>,
        metrics: Arc<DurableMetrics>,
    ) -> Result<Option<Arc<Durable>>, DurableError> {
        let Some(url) = &config.url else {
            return Ok(None);
        };
        let chunks = ChunkStore::open(&StoreConfig {
            url: url.clone(),
            credentials_file: config.credentials_file.clone(),
        })
        .map_err(DurableError::Open)?;
        let staged_dir = data_dir.join(STAGED_DIR);
        std::fs::create_dir_all(&staged_dir).map_err(|source| DurableError::Io {
            action: "create",
            path: staged_dir.clone(),
            source,
        })?;
        tracing::info!(store = %chunks.describe(), "durable copies of volumes on");
        let seq_start = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        Ok(Some(Arc::new(Durable {
            chunks,
            store,
            metrics,
            staged_dir,
            keep: config.keep_copies as usize,
            sync_interval: (config.sync_interval_s > 0)
                .then(|| Duration::from_secs(config.sync_interval_s)),
            gc_interval: Duration::from_secs(config.gc_interval_s),
            queues: Mutex::new(HashMap::new()),
            next_seq: AtomicU64::new(seq_start),
        })))
    }

    pub fn chunks(&self) -> &ChunkStore {
        &self.chunks
    }

    fn queue(&self, id: &BoxId) -> Arc<BoxQueue> {
        let mut queues = self.queues.lock().unwrap_or_else(|p| p.into_inner());
        queues.entry(id.clone()).or_default().clone()
    }

    /// The consistent point of a copy of `record`'s volume `image`: call with the box held
    /// still. Stages the image, then uploads it in a task of its own.
    pub async fn take(
        self: &Arc<Self>,
        record: &BoxRecord,
        image: &Path,
    ) -> Result<(), DurableError> {
        let staged = Staged {
            id: record.id.clone(),
            epoch: record.volume_epoch,
            seq: self.next_seq.fetch_add(1, Ordering::Relaxed),
            taken_unix: unix_now(),
        };
        let path = self.staged_dir.join(staged.file_name("partial"));
        let (from, to) = (image.to_path_buf(), path.clone());
        let began = std::time::Instant::now();
        if let Err(source) = blocking(move || stage::stage(&from, &to)).await {
            let _ = std::fs::remove_file(&path);
            return Err(DurableError::Io {
                action: "stage a copy of the volume into",
                path,
                source,
            });
        }
        // How long the box was held still for its copy.
        tracing::info!(box_id = %staged.id, staged_ms = began.elapsed().as_millis() as u64, "volume staged for a durable copy");
        self.queue(&staged.id)
            .newest
            .store(staged.seq, Ordering::SeqCst);
        tokio::spawn(self.clone().upload(staged));
        Ok(())
    }

    /// Uploads the staged copies a daemon before this one did not finish: the newest of
    /// each box (older ones and unsynced `.partial` files are deleted).
    pub fn resume_pending(self: &Arc<Self>) {
        let Ok(dir) = std::fs::read_dir(&self.staged_dir) else {
            return;
        };
        let mut newest: HashMap<BoxId, Staged> = HashMap::new();
        for entry in dir.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            match Staged::parse(&name) {
                Some((staged, "staged")) => {
                    let older = match newest.get(&staged.id) {
                        Some(have) if have.seq > staged.seq => Some(staged),
                        _ => newest.insert(staged.id.clone(), staged),
                    };
                    if let Some(older) = older {
                        let _ =
                            std::fs::remove_file(self.staged_dir.join(older.file_name("staged")));
                    }
                }
                _ => {
                    let _ = std::fs::remove_file(entry.path());
                }
            }
        }
        for staged in newest.into_values() {
            tracing::info!(box_id = %staged.id, "uploading a durable copy the last run left");
            let queue = self.queue(&staged.id);
            queue.newest.fetch_max(staged.seq, Ordering::SeqCst);
            self.next_seq.fetch_max(staged.seq + 1, Ordering::SeqCst);
            tokio::spawn(self.clone().upload_synced(staged));
        }
    }

    /// Syncs the staged copy and renames it `.staged`, then uploads it in the box's turn.
    async fn upload(self: Arc<Self>, staged: Staged) {
        let partial = self.staged_dir.join(staged.file_name("partial"));
        let synced = self.staged_dir.join(staged.file_name("staged"));
        let (from, to) = (partial.clone(), synced);
        let made = blocking(move || {
            std::fs::File::open(&from)?.sync_all()?;
            std::fs::rename(&from, &to)?;
            std::fs::File::open(to.parent().unwrap_or(Path::new(".")))?.sync_all()
        })
        .await;
        if let Err(e) = made {
            tracing::warn!(box_id = %staged.id, error = %e, "cannot keep a staged copy; the next one is taken at the box's next sleep");
            let _ = std::fs::remove_file(&partial);
            return;
        }
        self.upload_synced(staged).await;
    }

    /// Uploads a synced staged copy when the box's earlier uploads are done, unless a newer
    /// copy was staged meanwhile; retries while it fails and is still the newest.
    async fn upload_synced(self: Arc<Self>, staged: Staged) {
        let queue = self.queue(&staged.id);
        let _turn = queue.turn.lock().await;
        let path = self.staged_dir.join(staged.file_name("staged"));
        let mut wait = RETRY_FIRST;
        loop {
            if queue.newest.load(Ordering::SeqCst) != staged.seq {
                break; // superseded: the newer copy holds everything this one does
            }
            match self.upload_once(&staged, &path).await {
                Ok(()) => break,
                Err(e) => {
                    self.metrics.copy_failed();
                    tracing::warn!(box_id = %staged.id, error = %error_chain(&e), retry_in_s = wait.as_secs(), "a durable copy's upload failed");
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(RETRY_MAX);
                }
            }
        }
        let _ = std::fs::remove_file(&path);
    }

    async fn upload_once(&self, staged: &Staged, path: &Path) -> Result<(), DurableError> {
        let Some(record) = self.store.get_box(&staged.id)? else {
            return Ok(()); // deleted meanwhile
        };
        if record.volume_epoch != staged.epoch {
            tracing::warn!(box_id = %staged.id, epoch = staged.epoch, now = record.volume_epoch, "a staged copy of a volume that has since moved is dropped");
            return Ok(());
        }
        let volume = staged.id.as_str();
        let recorded = record.durable.as_ref().map_or(0, |c| c.generation);
        let base = match recorded {
            0 => None,
            generation => self.chunks.manifest(volume, generation).await.ok(),
        };
        let newest_stored = self
            .chunks
            .latest(volume)
            .await?
            .map_or(0, |m| m.generation);
        let generation = recorded.max(newest_stored) + 1;
        let began = std::time::Instant::now();
        let uploaded = self
            .chunks
            .upload(volume, generation, path, base.as_ref(), &|_| {})
            .await?;
        let copy = DurableCopy {
            generation,
            taken_at: rfc3339(staged.taken_unix),
            image_bytes: uploaded.manifest.size,
            stored_bytes: stored_bytes(&uploaded.manifest),
        };
        let kept = self
            .store
            .record_durable_copy(&staged.id, staged.epoch, &copy)?;
        self.metrics.copied(uploaded.bytes_uploaded);
        tracing::info!(
            box_id = %staged.id,
            generation,
            kept,
            chunks_uploaded = uploaded.chunks_uploaded,
            chunks_reused = uploaded.chunks_reused,
            bytes_uploaded = uploaded.bytes_uploaded,
            elapsed_ms = began.elapsed().as_millis() as u64,
            "durable copy uploaded"
        );
        Ok(())
    }

    /// The copy of `record`'s volume to restore: `generation`, else its newest.
    pub async fn manifest_of(
        &self,
        record: &BoxRecord,
        generation: Option<u64>,
    ) -> Result<Option<Manifest>, DurableError> {
        let Some(generation) = generation.or(record.durable.as_ref().map(|c| c.generation)) else {
            return Ok(None);
        };
        Ok(Some(
            self.chunks.manifest(record.id.as_str(), generation).await?,
        ))
    }

    /// Writes the volume `manifest` holds to `image` (whole, or not at all).
    pub async fn restore(&self, manifest: &Manifest, image: &Path) -> Result<(), DurableError> {
        self.chunks.restore(manifest, image, &|_| {}).await?;
        self.metrics.restored();
        Ok(())
    }

    /// A deleted box: its staged copies now, its copies in the store in the background
    /// (their chunks at the next collection).
    pub fn forget(self: &Arc<Self>, id: &BoxId) {
        self.queue(id).newest.store(u64::MAX, Ordering::SeqCst);
        if let Ok(dir) = std::fs::read_dir(&self.staged_dir) {
            let prefix = format!("{id}.");
            for entry in dir.flatten() {
                if entry.file_name().to_string_lossy().starts_with(&prefix) {
                    let _ = std::fs::remove_file(entry.path());
                }
            }
        }
        let (this, id) = (self.clone(), id.clone());
        tokio::spawn(async move {
            if let Err(e) = this.chunks.forget_volume(id.as_str()).await {
                tracing::warn!(box_id = %id, error = %error_chain(&e), "cannot delete a deleted box's durable copies; the next collection keeps them");
            }
            this.queues
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&id);
        });
    }

    /// Collects the chunk store's garbage every `gc_interval`, keeping each volume's newest
    /// `[storage] keep_copies`; and reads its size for `/metrics`.
    pub fn spawn_gc(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let this = self.clone();
        tokio::spawn(async move {
            this.read_usage().await;
            loop {
                tokio::time::sleep(this.gc_interval).await;
                this.collect().await;
            }
        })
    }

    async fn collect(&self) {
        match self.chunks.gc(self.keep).await {
            Ok(report) => {
                self.metrics.collected(unix_now());
                tracing::info!(
                    manifests_deleted = report.manifests_deleted,
                    chunks_deleted = report.chunks_deleted,
                    bytes_freed = report.bytes_freed,
                    skipped_for_upload = report.skipped_for_upload,
                    "chunk store collected"
                );
            }
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), "the chunk store's collection failed")
            }
        }
        self.read_usage().await;
    }

    async fn read_usage(&self) {
        match self.chunks.usage().await {
            Ok(usage) => self.metrics.store_usage(usage.bytes, usage.chunks),
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), "cannot read the chunk store's size")
            }
        }
    }
}

/// Blocking file work on tokio's blocking pool; a panic in it is an I/O error here.
async fn blocking(
    work: impl FnOnce() -> std::io::Result<()> + Send + 'static,
) -> std::io::Result<()> {
    tokio::task::spawn_blocking(work)
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e.to_string())))
}

/// What the copy's chunks take in the store.
fn stored_bytes(manifest: &Manifest) -> u64 {
    manifest.chunks.iter().flatten().map(|c| c.stored).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_staged_copys_name_says_what_it_is() {
        let staged = Staged {
            id: "bx_lfae627hy7e4uonnf6p5".parse().unwrap(),
            epoch: 2,
            seq: 17,
            taken_unix: 1_700_000_000,
        };
        let name = staged.file_name("staged");
        assert_eq!(Staged::parse(&name), Some((staged, "staged")));
        assert_eq!(Staged::parse("bx_lfae627hy7e4uonnf6p5.2.17.staged"), None);
        assert_eq!(Staged::parse("junk"), None);
    }
}
