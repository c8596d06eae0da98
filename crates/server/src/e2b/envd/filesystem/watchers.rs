//! `CreateWatcher` / `GetWatcherEvents` / `RemoveWatcher`: a watch the client polls (the
//! synchronous SDK's `watch_dir`). Each watcher is a task reading berth's watch into a
//! queue that the polls drain.
//!
//! What bounds a client that creates watchers and never reads them:
//! - a sandbox has at most [`MAX_WATCHERS_PER_SANDBOX`]; each also holds one of its tenant's
//!   streams (`ctx.streams`) while it watches;
//! - a watcher queues at most [`MAX_QUEUED_EVENTS`]; later events are dropped (and counted
//!   in the log) until it is read;
//! - a watcher not read for [`IDLE_LIMIT`] is removed, its watch stopped;
//! - a watch ends when its box stops (berth's watch does not keep a box awake): the watcher
//!   answers what it queued, then `not_found`.
//!
//! The registry is keyed by box id, which is never reused, so a sandbox's watchers are
//! reachable only with its own access token, and never by a later sandbox of the same name.
//! It is the daemon's (`ctx.e2b`).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use berth_e2b_wire::filesystem::{
    CreateWatcherRequest, CreateWatcherResponse, FilesystemEvent, GetWatcherEventsRequest,
    GetWatcherEventsResponse, RemoveWatcherRequest, RemoveWatcherResponse,
};
use berth_e2b_wire::{Code, ConnectError};
use berth_protocol::BoxId;
use berth_runtime::guest_client::WatchStream;
use tokio::time::Instant;

use super::watch::{next_events, start};
use super::watcher_registry::{lock, Queue, Watcher, Watchers};
use crate::admission::Slot;
use crate::ctx::Ctx;
use crate::e2b::envd::caller::EnvdCaller;
use crate::e2b::envd::error::connect_error;

pub const MAX_WATCHERS_PER_SANDBOX: usize = 16;
pub const MAX_QUEUED_EVENTS: usize = 1024;
pub const IDLE_LIMIT: Duration = Duration::from_secs(600);

fn not_found(watcher_id: &str) -> ConnectError {
    ConnectError::new(
        Code::NotFound,
        format!("watcher {watcher_id:?} not found (removed, idle for over {} s, or its sandbox stopped)", IDLE_LIMIT.as_secs()),
    )
}

pub async fn create(
    ctx: &Ctx,
    caller: &EnvdCaller,
    req: CreateWatcherRequest,
) -> Result<CreateWatcherResponse, ConnectError> {
    let box_id = caller.sandbox.box_id.clone();
    let full = || {
        ConnectError::new(
            Code::ResourceExhausted,
            format!("this sandbox has {MAX_WATCHERS_PER_SANDBOX} watchers already: remove one"),
        )
    };
    let all = &ctx.e2b.watchers;
    let count = || all.registry().get(&box_id).map_or(0, HashMap::len);
    if count() >= MAX_WATCHERS_PER_SANDBOX {
        return Err(full());
    }
    let slot = ctx
        .streams
        .take(&caller.sandbox.tenant)
        .map_err(connect_error)?;
    let stream = start(ctx, caller, &req.path, req.recursive).await?;
    let watcher_id = new_id();
    let queue = Arc::new(Mutex::new(Queue {
        events: VecDeque::new(),
        dropped: 0,
        ended: None,
        last_read: Instant::now(),
    }));
    let mut registry = all.registry();
    let watchers = registry.entry(box_id.clone()).or_default();
    if watchers.len() >= MAX_WATCHERS_PER_SANDBOX {
        return Err(full());
    }
    let task = tokio::spawn(run(
        Arc::clone(all),
        box_id,
        watcher_id.clone(),
        stream,
        slot,
        Arc::clone(&queue),
    ));
    let watcher = Arc::new(Watcher {
        queue,
        task: task.abort_handle(),
    });
    watchers.insert(watcher_id.clone(), watcher);
    Ok(CreateWatcherResponse { watcher_id })
}

/// The events queued since the last call. A watcher whose watch ended answers what it
/// queued once more, then is gone.
pub fn events(
    ctx: &Ctx,
    caller: &EnvdCaller,
    req: &GetWatcherEventsRequest,
) -> Result<GetWatcherEventsResponse, ConnectError> {
    let box_id = &caller.sandbox.box_id;
    let all = &ctx.e2b.watchers;
    let watcher = all
        .registry()
        .get(box_id)
        .and_then(|watchers| watchers.get(&req.watcher_id))
        .cloned()
        .ok_or_else(|| not_found(&req.watcher_id))?;
    let mut queue = lock(&watcher.queue);
    queue.last_read = Instant::now();
    if queue.dropped > 0 {
        tracing::info!(watcher = %req.watcher_id, dropped = queue.dropped, "envd watcher: events dropped while nobody read them");
        queue.dropped = 0;
    }
    let events: Vec<FilesystemEvent> = queue.events.drain(..).collect();
    if let Some(why) = queue.ended.clone() {
        drop(queue);
        if let Some(gone) = all.forget(box_id, &req.watcher_id) {
            gone.task.abort();
        }
        if events.is_empty() {
            return Err(ConnectError::new(
                Code::NotFound,
                format!("watcher {:?} ended: {why}", req.watcher_id),
            ));
        }
    }
    Ok(GetWatcherEventsResponse { events })
}

pub fn remove(
    ctx: &Ctx,
    caller: &EnvdCaller,
    req: &RemoveWatcherRequest,
) -> Result<RemoveWatcherResponse, ConnectError> {
    let watcher = ctx
        .e2b
        .watchers
        .forget(&caller.sandbox.box_id, &req.watcher_id)
        .ok_or_else(|| not_found(&req.watcher_id))?;
    watcher.task.abort();
    Ok(RemoveWatcherResponse {})
}

/// Reads the watch into the queue until it ends, or until nobody has read the queue for
/// [`IDLE_LIMIT`]; holds the tenant's stream slot as long. An ended watcher is kept for
/// its last read, at most as long.
async fn run(
    all: Arc<Watchers>,
    box_id: BoxId,
    watcher_id: String,
    mut stream: WatchStream,
    slot: Slot,
    queue: Arc<Mutex<Queue>>,
) {
    let ended = loop {
        let idle_at = lock(&queue).last_read + IDLE_LIMIT;
        let next = tokio::select! {
            next = next_events(&mut stream) => next,
            () = tokio::time::sleep_until(idle_at) => {
                if lock(&queue).last_read + IDLE_LIMIT <= Instant::now() {
                    all.forget(&box_id, &watcher_id);
                    return;
                }
                continue;
            }
        };
        match next {
            Ok(Some(events)) => {
                let mut queue = lock(&queue);
                for event in events {
                    if queue.events.len() < MAX_QUEUED_EVENTS {
                        queue.events.push_back(event);
                    } else {
                        queue.dropped += 1;
                    }
                }
            }
            Ok(None) => break "the watched directory went away, or the sandbox stopped".to_owned(),
            Err(error) => break error.message,
        }
    };
    drop(slot);
    lock(&queue).ended = Some(ended);
    // Kept for a last read, as long as a watcher is kept unread.
    loop {
        let idle_at = lock(&queue).last_read + IDLE_LIMIT;
        tokio::time::sleep_until(idle_at).await;
        if lock(&queue).last_read + IDLE_LIMIT <= Instant::now() {
            all.forget(&box_id, &watcher_id);
            return;
        }
    }
}

/// A watcher id: 16 random bytes in hex (unguessable, though a sandbox's own token is
/// needed to use it anyway).
fn new_id() -> String {
    let mut raw = [0u8; 16];
    if getrandom::fill(&mut raw).is_err() {
        // The OS random source failing leaves ids only unique, by the clock.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        raw = nanos.to_le_bytes();
    }
    berth_basics::hex(&raw)
}
