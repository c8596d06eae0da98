//! The markers that keep a GC from sweeping chunks an upload is about to name.
//!
//! An upload writes `uploads/<id>` before its first chunk and removes it after its
//! manifest; a GC writes `gc/<id>` before it looks for uploads and removes it after its
//! sweep. Each writes its own marker, then lists the other kind: one of two that overlap
//! always sees the other (see the crate docs for the whole argument).
//!
//! A marker holds the time its owner last refreshed it. One not refreshed for
//! [`STALE_MARKER_AFTER`] belongs to a process that crashed (or stalled as long): it is
//! ignored and deleted by whoever finds it, so nothing is blocked forever. Owners refresh
//! every [`REFRESH_EVERY`], and check before each refresh that their marker is still
//! there: one deleted as stale means the owner must stop, since the other side may have
//! acted as if it were gone.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher as _;
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::manifest::now_unix;
use crate::store::Fetched;
use crate::{ChunkError, ChunkStore};

/// How long a marker lives without a refresh before it is taken for a crashed process's.
pub const STALE_MARKER_AFTER: Duration = Duration::from_secs(3600);
/// How often an owner rewrites its marker: a twelfth of the stale limit, so clocks may
/// disagree by most of an hour before a live marker looks stale.
const REFRESH_EVERY: Duration = Duration::from_secs(300);
/// How often an upload looks again whether a GC still runs.
const GC_POLL: Duration = Duration::from_millis(200);
/// A marker's body is a line of JSON; anything longer is not one of ours.
const MARKER_MAX_BYTES: u64 = 4096;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MarkerKind {
    Upload,
    Gc,
}

impl MarkerKind {
    fn prefix(self) -> &'static str {
        match self {
            MarkerKind::Upload => "uploads",
            MarkerKind::Gc => "gc",
        }
    }
}

#[derive(Serialize, Deserialize)]
struct MarkerBody {
    started_unix: u64,
    refreshed_unix: u64,
}

/// This process's marker. Dropped without [`Marker::remove`] (a cancelled upload or GC),
/// it is deleted in the background, so it blocks nobody until it goes stale.
pub(crate) struct Marker {
    store: ChunkStore,
    key: String,
    started_unix: u64,
    refreshed: Instant,
    removed: bool,
}

impl Marker {
    pub(crate) async fn write(store: &ChunkStore, kind: MarkerKind) -> Result<Marker, ChunkError> {
        let marker = Marker {
            store: store.clone(),
            key: format!("{}/{}", kind.prefix(), random_id()),
            started_unix: now_unix(),
            refreshed: Instant::now(),
            removed: false,
        };
        marker.put().await?;
        Ok(marker)
    }

    pub(crate) fn key(&self) -> &str {
        &self.key
    }

    /// Rewrites the marker when a refresh is due. False when it is gone: someone took it
    /// for stale, and the owner must stop.
    pub(crate) async fn keep_alive(&mut self) -> Result<bool, ChunkError> {
        if self.refreshed.elapsed() < REFRESH_EVERY {
            return Ok(true);
        }
        if !self.still_there().await? {
            return Ok(false);
        }
        self.put().await?;
        self.refreshed = Instant::now();
        Ok(true)
    }

    pub(crate) async fn still_there(&self) -> Result<bool, ChunkError> {
        self.store.exists("look for the marker", &self.key).await
    }

    pub(crate) async fn remove(mut self) -> Result<(), ChunkError> {
        self.store.delete("remove the marker", &self.key).await?;
        self.removed = true;
        Ok(())
    }

    async fn put(&self) -> Result<(), ChunkError> {
        let body = MarkerBody {
            started_unix: self.started_unix,
            refreshed_unix: now_unix(),
        };
        let json = serde_json::to_vec(&body).unwrap_or_default();
        self.store
            .put("write the marker", &self.key, Bytes::from(json))
            .await
    }
}

impl Drop for Marker {
    fn drop(&mut self) {
        if self.removed {
            return;
        }
        // Outside a runtime there is nothing to spawn on: the marker then goes stale.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let (store, key) = (self.store.clone(), std::mem::take(&mut self.key));
            runtime.spawn(async move { store.delete("remove the marker", &key).await });
        }
    }
}

/// The keys of the live markers of `kind`; stale ones are deleted on the way.
pub(crate) async fn live_markers(
    store: &ChunkStore,
    kind: MarkerKind,
) -> Result<Vec<String>, ChunkError> {
    let mut live = Vec::new();
    for meta in store.list("list the markers in", kind.prefix()).await? {
        let key = meta.location.to_string();
        let refreshed_unix = match store.get("read the marker", &key, MARKER_MAX_BYTES).await? {
            // Removed by its owner since the listing.
            None => continue,
            Some(Fetched::Bytes(body)) => serde_json::from_slice::<MarkerBody>(&body)
                .map(|body| body.refreshed_unix)
                .ok(),
            Some(Fetched::TooLarge(_)) => None,
        };
        // A body that is not ours: the store's own time of the last write stands in.
        let refreshed_unix = refreshed_unix
            .unwrap_or_else(|| u64::try_from(meta.last_modified.timestamp()).unwrap_or(0));
        if is_stale(refreshed_unix, now_unix()) {
            store.delete("delete the stale marker", &key).await?;
        } else {
            live.push(key);
        }
    }
    Ok(live)
}

/// Waits, polling, until every GC that was running when `own` was written is over,
/// keeping `own` alive meanwhile. A GC whose marker appears later wrote it after `own`
/// was there to be seen, so it sees `own` and skips its sweep: waiting for it too would
/// only let GCs run back to back starve the upload. False when `own` was taken for stale
/// while waiting.
pub(crate) async fn wait_while_gc_runs(
    store: &ChunkStore,
    own: &mut Marker,
) -> Result<bool, ChunkError> {
    let mut running = live_markers(store, MarkerKind::Gc).await?;
    while !running.is_empty() {
        tokio::time::sleep(GC_POLL).await;
        if !own.keep_alive().await? {
            return Ok(false);
        }
        let still = live_markers(store, MarkerKind::Gc).await?;
        running.retain(|key| still.contains(key));
    }
    Ok(true)
}

fn is_stale(refreshed_unix: u64, now_unix: u64) -> bool {
    now_unix.saturating_sub(refreshed_unix) > STALE_MARKER_AFTER.as_secs()
}

/// 128 bits unique to this marker: std seeds each `RandomState` from the OS's randomness
/// (per thread, then varied per call), which is all a name that must not collide needs.
fn random_id() -> String {
    let word = || RandomState::new().hash_one(now_unix() ^ u64::from(std::process::id()));
    format!("{:016x}{:016x}", word(), word())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marker_is_stale_only_past_the_limit_and_a_future_one_is_live() {
        let limit = STALE_MARKER_AFTER.as_secs();
        assert!(!is_stale(1000, 1000));
        assert!(!is_stale(1000, 1000 + limit));
        assert!(is_stale(1000, 1001 + limit));
        assert!(!is_stale(5000, 1000), "a clock ahead of ours is no crash");
    }

    #[test]
    fn marker_ids_differ() {
        let ids: std::collections::HashSet<String> = (0..1000).map(|_| random_id()).collect();
        assert_eq!(ids.len(), 1000);
        assert!(ids.iter().all(|id| id.len() == 32));
    }
}
