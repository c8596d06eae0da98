//! The harness: the box's agent program, its message journal and its event journal
//! (protocol version 2, see `berth_protocol::harness`).
//!
//! - [`boot`]: the `harness` boot phase (read `harness.json`, open the journals).
//! - [`supervisor`]: starts the harness, restarts it with backoff, turns its output into
//!   events.
//! - [`deliver`]: `POST /v1/messages`.
//! - [`stream`]: `GET /v1/events`.

pub mod boot;
pub mod deliver;
pub mod event_log;
mod lines;
mod message_log;
mod recover;
mod resume;
pub mod stream;
pub mod supervisor;

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use berth_protocol::harness::{HarnessConfig, HarnessState, HarnessStatus};
use tokio::sync::{mpsc, watch, Notify};

use self::event_log::EventLog;
use self::message_log::MessageLog;

/// How long a delivery waits for the harness to take a message, by default.
pub const DELIVER_TIMEOUT: Duration = Duration::from_secs(60);

/// One line for the harness's stdin; `id` is acknowledged once written in
/// [`berth_protocol::harness::AckMode::Write`].
#[derive(Debug)]
pub struct StdinLine {
    pub id: String,
    pub line: String,
}

/// Everything about the harness that changes, under one lock.
#[derive(Debug)]
pub struct Live {
    pub state: HarnessState,
    pub pid: Option<u32>,
    pub reason: Option<String>,
    /// The running harness's stdin writer.
    pub stdin: Option<mpsc::UnboundedSender<StdinLine>>,
    /// Turns this harness owes a `result` for: one per message written to it, oldest first.
    pub turns: Turns,
    /// Exits in a row without a `result` event.
    pub exits_in_a_row: u32,
    pub stopping: bool,
}

/// The messages written to the running harness that no `result` has answered yet, and
/// since when the oldest of them has been its turn (the turn timeout counts from then).
#[derive(Debug, Default)]
pub struct Turns {
    ids: VecDeque<String>,
    since: Option<Instant>,
}

impl Turns {
    /// A message written to the harness: a turn owed after the ones already owed.
    pub fn push(&mut self, id: &str) {
        if self.ids.is_empty() {
            self.since = Some(Instant::now());
        }
        self.ids.push_back(id.to_owned());
    }

    /// `n` results: the oldest `n` turns are over, the next (if any) starts now. Returns
    /// the messages of the turns ended, oldest first.
    pub fn end(&mut self, n: usize) -> Vec<String> {
        let ended = self.ids.drain(..n.min(self.ids.len())).collect();
        self.since = (!self.ids.is_empty()).then(Instant::now);
        ended
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// The current turn's message and how long it has run.
    pub fn current(&self) -> Option<(&str, Duration)> {
        Some((self.ids.front()?.as_str(), self.since?.elapsed()))
    }

    pub fn clear(&mut self) {
        self.ids.clear();
        self.since = None;
    }
}

/// The journals; absent when the box has no harness (the state dir is not touched then).
#[derive(Debug)]
pub struct Journals {
    pub messages: Mutex<MessageLog>,
    pub events: Mutex<EventLog>,
    pub state_dir: PathBuf,
}

#[derive(Debug)]
pub struct Harness {
    pub config: Option<HarnessConfig>,
    pub journals: Option<Journals>,
    pub live: Mutex<Live>,
    /// Bumped on every state change and acknowledgement (deliveries wait on it).
    pub changed: watch::Sender<u64>,
    /// The newest event seq (event readers wait on it).
    pub last_seq: watch::Sender<u64>,
    /// Serializes deliveries.
    pub deliver_lock: tokio::sync::Mutex<()>,
    pub deliver_timeout: Duration,
    /// Wakes the supervisor out of its backoff at shutdown.
    pub stop: Notify,
    /// The box user's home (cwd of the harness; its session file is under it).
    pub home: PathBuf,
}

/// Locks a std mutex, surviving a poisoned one (a panic elsewhere must not wedge PID 1).
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Harness {
    pub fn status(&self) -> HarnessStatus {
        let live = lock(&self.live);
        HarnessStatus {
            state: live.state,
            pid: live.pid,
            turns_in_flight: u32::try_from(live.turns.len()).unwrap_or(u32::MAX),
            last_seq: *self.last_seq.borrow(),
            reason: live.reason.clone(),
        }
    }

    pub fn notify_changed(&self) {
        self.changed.send_modify(|n| *n += 1);
    }

    /// Before the box stops: no more restarts; journals synced.
    pub fn begin_shutdown(&self) {
        lock(&self.live).stopping = true;
        self.stop.notify_waiters();
        self.notify_changed();
    }

    pub fn sync(&self) {
        if let Some(j) = &self.journals {
            let _ = lock(&j.messages).sync();
            let _ = lock(&j.events).sync();
        }
    }
}
