//! Searching a box's memory: its index (`berth_memory_index`, under the data dir) is
//! brought up to date before each question. A stopped box's index was refreshed from its
//! last snapshot at its stop; a running box's is refreshed from a listing of its
//! `/memory` (size and modification time per file), re-reading only the files that
//! changed since the last look (the first look after a boot compares the whole tree by
//! content).

use std::collections::HashMap;
use std::sync::Arc;

use berth_chunks::memory::MemoryInput;
use berth_memory_index::{Change, IndexError, MemoryIndex};
use berth_protocol::guest::FileKind;
use berth_protocol::memory::{MemorySource, MAX_READ_BYTES};
use berth_protocol::memory_search::{MemoryGraph, MemoryLinks, MemorySearchResults};
use berth_protocol::BoxId;
use berth_runtime::error_chain;

use super::index::{BoxIndex, Seen};
use crate::ctx::Ctx;
use crate::error::OpError;
use crate::lifecycle::detached::blocking;
use crate::ops::memory_read;

/// The version an index refreshed from a running box's listing records (a snapshot's is
/// its root hash).
const LIVE: &str = "live";

/// How close to the last listing a file's time may be and still be re-read: its second,
/// and a little for the box's clock running ahead of the host's.
const RACY_MARGIN_S: i64 = 2;

/// The version an index rebuilt from a stopped box's image records.
const VOLUME: &str = "volume";

/// Brings the box's index to `inputs` (a whole `/memory`), recording `version`. Logged,
/// never failing: the index is a cache.
pub(crate) async fn refresh_from(ctx: &Ctx, id: &BoxId, inputs: Vec<MemoryInput>, version: &str) {
    let done = async {
        let index = ctx.memory.index(id)?;
        let _refresh = index.refresh.lock().await;
        index.forget_seen();
        apply_whole(id, &index.index, inputs, version.to_owned()).await
    };
    if let Err(e) = done.await {
        tracing::warn!(box_id = %id, error = %error_chain(&e), "cannot refresh the box's memory index");
    }
}

/// Applies the difference between what the index holds and `inputs`.
async fn apply_whole(
    id: &BoxId,
    index: &Arc<MemoryIndex>,
    inputs: Vec<MemoryInput>,
    version: String,
) -> Result<(), OpError> {
    let index = index.clone();
    blocking(move || {
        let mut held = index.files()?;
        let mut changes = Vec::new();
        for input in inputs {
            let MemoryInput::File { path, content } = input else {
                continue;
            };
            let hash = berth_chunks::memory::content_hash(&content);
            if held.remove(&path).as_deref() != Some(hash.as_str()) {
                changes.push(Change::Upsert {
                    path,
                    hash,
                    content,
                });
            }
        }
        changes.extend(held.into_keys().map(|path| Change::Remove { path }));
        index.apply(changes, Some(version))
    })
    .await
    .map_err(|source| OpError::TaskPanicked {
        id: id.clone(),
        source,
    })?
    .map_err(OpError::MemoryIndex)
}

/// The box's index, brought up to what its memory holds now.
async fn current(ctx: &Ctx, id: &BoxId) -> Result<Arc<BoxIndex>, OpError> {
    let index = ctx.memory.index(id)?;
    let _refresh = index.refresh.lock().await;
    let tree = memory_read::tree(ctx, id, "").await?;
    if tree.source == MemorySource::Box {
        let listing: HashMap<String, (u64, i64)> = tree
            .entries
            .iter()
            .filter(|e| e.kind == FileKind::File)
            .map(|e| (e.path.clone(), (e.size, e.modified.unwrap_or(0))))
            .collect();
        let at = time::OffsetDateTime::now_utc().unix_timestamp();
        let seen = index.seen.lock().expect("never poisoned").take();
        match seen {
            Some(seen) => refresh_changed(ctx, id, &index, &seen, &listing).await?,
            None => {
                let (inputs, _) = memory_read::export(ctx, id).await?;
                apply_whole(id, &index.index, inputs, LIVE.into()).await?;
            }
        }
        *index.seen.lock().expect("never poisoned") = Some(Seen { files: listing, at });
    } else if index.index.version().is_none_or(|v| v == LIVE) {
        // Never built, or last refreshed while the box ran: its stop's refresh did not
        // happen (the daemon stopped first). Rebuild from the image.
        let (inputs, _) = memory_read::export(ctx, id).await?;
        apply_whole(id, &index.index, inputs, VOLUME.into()).await?;
    }
    drop(_refresh);
    Ok(index)
}

/// Re-reads the files whose size or time changed since `seen`, and drops the gone ones.
/// Times are whole seconds: a file written again within the second of the last listing
/// keeps its time (and maybe its size), so a file whose time is not older than that
/// listing by a margin is re-read anyway (git's "racily clean" entries).
async fn refresh_changed(
    ctx: &Ctx,
    id: &BoxId,
    index: &BoxIndex,
    seen: &Seen,
    listing: &HashMap<String, (u64, i64)>,
) -> Result<(), OpError> {
    let mut changes: Vec<Change> = seen
        .files
        .keys()
        .filter(|p| !listing.contains_key(*p))
        .map(|path| Change::Remove { path: path.clone() })
        .collect();
    for (path, now) in listing {
        let racy = now.1 >= seen.at - RACY_MARGIN_S;
        if seen.files.get(path) == Some(now) && !racy {
            continue;
        }
        if now.0 > MAX_READ_BYTES {
            continue; // past what a memory read takes: not indexed
        }
        match memory_read::file(ctx, id, path).await {
            Ok((content, _)) => changes.push(Change::Upsert {
                path: path.clone(),
                hash: berth_chunks::memory::content_hash(&content),
                content,
            }),
            // Gone or changed kind since the listing: the next look sees it.
            Err(OpError::Memory(_)) => {}
            Err(e) => return Err(e),
        }
    }
    if changes.is_empty() {
        return Ok(());
    }
    let inner = index.index.clone();
    blocking(move || inner.apply(changes, Some(LIVE.into())))
        .await
        .map_err(|source| OpError::TaskPanicked {
            id: id.clone(),
            source,
        })?
        .map_err(OpError::MemoryIndex)
}

fn index_error(e: IndexError) -> OpError {
    match e {
        IndexError::EmptyQuery => OpError::EmptySearch,
        IndexError::NotIndexed { path } => OpError::NotIndexed { path },
        other => OpError::MemoryIndex(other),
    }
}

/// Runs `ask` on the box's current index, off the async threads.
async fn ask<T: Send + 'static>(
    ctx: &Ctx,
    id: &BoxId,
    ask: impl FnOnce(&MemoryIndex) -> Result<T, IndexError> + Send + 'static,
) -> Result<T, OpError> {
    let index = current(ctx, id).await?.index.clone();
    blocking(move || ask(&index))
        .await
        .map_err(|source| OpError::TaskPanicked {
            id: id.clone(),
            source,
        })?
        .map_err(index_error)
}

/// Full-text search of the box's memory, best first.
pub async fn search(
    ctx: &Ctx,
    id: &BoxId,
    query: &str,
    limit: usize,
) -> Result<MemorySearchResults, OpError> {
    if query.trim().is_empty() {
        return Err(OpError::EmptySearch);
    }
    let query = query.to_owned();
    ask(ctx, id, move |index| index.search(&query, limit)).await
}

/// A file's `[[links]]` and the files linking to it.
pub async fn links(ctx: &Ctx, id: &BoxId, path: &str) -> Result<MemoryLinks, OpError> {
    let rel = memory_read::checked(path)?;
    ask(ctx, id, move |index| index.links(&rel)).await
}

/// Every file and link of the box's memory.
pub async fn graph(ctx: &Ctx, id: &BoxId) -> Result<MemoryGraph, OpError> {
    ask(ctx, id, |index| index.graph()).await
}
