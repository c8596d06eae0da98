//! `GET /v1/files/watch`: a directory's changes as NDJSON [`WatchEvent`]s, from inotify.
//!
//! One thread per watch, as the caller ([`FsIdentity`]: the kernel checks the caller may
//! read each directory it watches). It polls the inotify descriptor with a short timeout,
//! so it notices a client that left within a second and sends an empty keepalive line
//! every [`KEEPALIVE`] (which is also how hyper notices a silent disconnect); it ends, and
//! closes the descriptor, when the client is gone or the watched directory is.
//!
//! The queue to the client holds [`WATCH_QUEUE_EVENTS`] lines; when it is full, events
//! are dropped and one `overflow` is sent as soon as there is room. The kernel's own
//! overflow (`IN_Q_OVERFLOW`) is reported the same way. With `recursive`, each new
//! subdirectory gets a watch (symlinks are never followed), up to [`MAX_WATCHES`];
//! directories past that are not watched, which an `overflow` also says. What a new
//! subdirectory already holds when its watch is added is told as created.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use berth_protocol::files::{WatchEvent, WATCH_QUEUE_EVENTS};
use berth_protocol::guest::FileQuery;
use bytes::Bytes;
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, InotifyEvent, WatchDescriptor};
use tokio::sync::mpsc::{self, error::TrySendError};
use tokio::sync::oneshot;

use crate::error::ApiError;
use crate::files::FsIdentity;
use crate::slots::Slots;

const KEEPALIVE: Duration = Duration::from_secs(10);
/// How often the thread wakes to see whether its client is still there.
const POLL_MS: libc::c_int = 1000;
/// How long a lone `IN_MOVED_FROM` waits for its `IN_MOVED_TO` (the kernel queues both in
/// one rename, so only a read that falls between them makes it wait at all).
const MOVE_PAIR_MS: libc::c_int = 50;
/// Most directories one recursive watch holds.
pub const MAX_WATCHES: usize = 8192;
/// Watches open at once (each holds a thread and an inotify instance; the kernel allows a
/// user 128 instances by default).
static WATCHES: Slots = Slots::new("watches", 64);

fn mask() -> AddWatchFlags {
    AddWatchFlags::IN_CREATE
        | AddWatchFlags::IN_MODIFY
        | AddWatchFlags::IN_DELETE
        | AddWatchFlags::IN_MOVED_FROM
        | AddWatchFlags::IN_MOVED_TO
        | AddWatchFlags::IN_DELETE_SELF
        | AddWatchFlags::IN_MOVE_SELF
        | AddWatchFlags::IN_ONLYDIR
        | AddWatchFlags::IN_DONT_FOLLOW
}

/// Starts watching `q.path` (a directory, following symlinks in the path itself) and
/// returns the stream of event lines. An error setting up the watch is the call's answer.
pub async fn open(q: FileQuery) -> Result<mpsc::Receiver<Bytes>, ApiError> {
    let slot = WATCHES.take()?;
    let (opened_tx, opened_rx) = oneshot::channel();
    let (tx, rx) = mpsc::channel(WATCH_QUEUE_EVENTS);
    std::thread::Builder::new()
        .name("berth-watch".into())
        .spawn(move || {
            let _slot = slot;
            let _identity = FsIdentity::enter(q.user);
            let mut watcher = match Watcher::new(PathBuf::from(&q.path), q.recursive) {
                Ok(watcher) => watcher,
                Err(err) => return drop(opened_tx.send(Err(err))),
            };
            if opened_tx.send(Ok(())).is_ok() {
                watcher.run(&mut Queue::new(tx));
            }
        })
        .map_err(ApiError::Watch)?;
    opened_rx.await.map_err(|_| ApiError::Worker)??;
    Ok(rx)
}

/// The bounded queue to the client, with the overflow it owes.
pub struct Queue {
    tx: mpsc::Sender<Bytes>,
    owes_overflow: bool,
    last_sent: Instant,
}

/// The client is gone.
struct Closed;

impl Queue {
    fn new(tx: mpsc::Sender<Bytes>) -> Self {
        Queue {
            tx,
            owes_overflow: false,
            last_sent: Instant::now(),
        }
    }

    fn push(&mut self, event: &WatchEvent) -> Result<(), Closed> {
        if self.owes_overflow {
            match self.try_send(line(&WatchEvent::Overflow))? {
                true => self.owes_overflow = false,
                false => return Ok(()),
            }
        }
        if !self.try_send(line(event))? {
            self.owes_overflow = true;
        }
        Ok(())
    }

    /// `Ok(false)`: the queue is full and the line was dropped.
    fn try_send(&mut self, line: Bytes) -> Result<bool, Closed> {
        match self.tx.try_send(line) {
            Ok(()) => {
                self.last_sent = Instant::now();
                Ok(true)
            }
            Err(TrySendError::Full(_)) => Ok(false),
            Err(TrySendError::Closed(_)) => Err(Closed),
        }
    }

    /// On a quiet turn: the overflow still owed (the burst that filled the queue may be
    /// over, with no event left to carry it), or a keepalive.
    fn idle(&mut self) -> Result<(), Closed> {
        if self.owes_overflow {
            if self.try_send(line(&WatchEvent::Overflow))? {
                self.owes_overflow = false;
            }
            return Ok(());
        }
        if self.last_sent.elapsed() >= KEEPALIVE {
            // A full queue is traffic enough.
            self.try_send(Bytes::from_static(b"\n"))?;
            self.last_sent = Instant::now();
        }
        Ok(())
    }
}

fn line(event: &WatchEvent) -> Bytes {
    let mut line = serde_json::to_vec(event).unwrap_or_default();
    line.push(b'\n');
    Bytes::from(line)
}

struct Watcher {
    inotify: Inotify,
    root: PathBuf,
    recursive: bool,
    /// Each watched directory, relative to the root (`""`: the root).
    dirs: HashMap<WatchDescriptor, String>,
    root_wd: WatchDescriptor,
    /// An `overflow` owed: directories left unwatched past [`MAX_WATCHES`], or entries of a
    /// new directory past [`WATCH_QUEUE_EVENTS`] not told.
    owes_overflow: bool,
    /// An `IN_MOVED_FROM` waiting for its `IN_MOVED_TO`: cookie, path, is a directory.
    moved_from: Option<(u32, String, bool)>,
}

impl Watcher {
    fn new(root: PathBuf, recursive: bool) -> Result<Self, ApiError> {
        let watch_err = |source: nix::Error| ApiError::Fs {
            op: "watch",
            path: root.to_string_lossy().into_owned(),
            source: source.into(),
        };
        let inotify =
            Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC).map_err(watch_err)?;
        // The root itself may be reached through symlinks, as the caller named it.
        let root_mask = mask() - AddWatchFlags::IN_DONT_FOLLOW;
        let root_wd = inotify.add_watch(&root, root_mask).map_err(watch_err)?;
        let mut watcher = Watcher {
            inotify,
            root,
            recursive,
            dirs: HashMap::from([(root_wd, String::new())]),
            root_wd,
            owes_overflow: false,
            moved_from: None,
        };
        if recursive {
            watcher.watch_below("", None);
        }
        Ok(watcher)
    }

    fn run(&mut self, queue: &mut Queue) {
        while self.step(queue).is_ok() {}
    }

    fn step(&mut self, queue: &mut Queue) -> Result<(), Closed> {
        if queue.tx.is_closed() {
            return Err(Closed);
        }
        let mut pfd = libc::pollfd {
            fd: self.inotify.as_fd().as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // A rename's two halves can be read apart (a read between them on a busy host):
        // a lone IN_MOVED_FROM waits a moment for its IN_MOVED_TO before it is a delete.
        let wait_ms = if self.moved_from.is_some() {
            MOVE_PAIR_MS
        } else {
            POLL_MS
        };
        // SAFETY: one valid pollfd, for the length given.
        let ready = unsafe { libc::poll(&mut pfd, 1, wait_ms) };
        if ready <= 0 {
            let mut out = Vec::new();
            self.flush_moved_from(&mut out);
            for event in &out {
                queue.push(event)?;
            }
            return queue.idle();
        }
        let events = match self.inotify.read_events() {
            Ok(events) => events,
            Err(nix::Error::EAGAIN | nix::Error::EINTR) => return Ok(()),
            Err(_) => return Err(Closed),
        };
        // A move out that waited through one read already has no partner coming.
        let waited = self.moved_from.as_ref().map(|(cookie, _, _)| *cookie);
        let mut out = Vec::new();
        for event in events {
            if !self.translate(event, &mut out) {
                self.flush_moved_from(&mut out);
                out.push(WatchEvent::Gone);
                for event in &out {
                    queue.push(event)?;
                }
                return Err(Closed);
            }
        }
        if waited.is_some() && self.moved_from.as_ref().map(|(cookie, _, _)| *cookie) == waited {
            self.flush_moved_from(&mut out);
        }
        if std::mem::take(&mut self.owes_overflow) {
            out.push(WatchEvent::Overflow);
        }
        for event in &out {
            queue.push(event)?;
        }
        queue.idle()
    }

    /// Adds what `event` means to `out`; `false` once the root itself is gone.
    fn translate(&mut self, event: InotifyEvent, out: &mut Vec<WatchEvent>) -> bool {
        let mask = event.mask;
        if mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
            out.push(WatchEvent::Overflow);
            return true;
        }
        if mask.contains(AddWatchFlags::IN_IGNORED) {
            self.dirs.remove(&event.wd);
            return event.wd != self.root_wd;
        }
        if mask.intersects(AddWatchFlags::IN_DELETE_SELF | AddWatchFlags::IN_MOVE_SELF) {
            return event.wd != self.root_wd;
        }
        let (Some(dir), Some(name)) = (self.dirs.get(&event.wd), event.name.as_deref()) else {
            return true;
        };
        let path = join(dir, name);
        let is_dir = mask.contains(AddWatchFlags::IN_ISDIR);
        if mask.contains(AddWatchFlags::IN_MOVED_TO) {
            match self.moved_from.take() {
                Some((cookie, from, _)) if cookie == event.cookie => {
                    if is_dir {
                        self.renamed_dir(&from, &path);
                    }
                    out.push(WatchEvent::Rename {
                        from,
                        to: path,
                        dir: is_dir,
                    });
                    return true;
                }
                other => {
                    self.moved_from = other;
                    self.flush_moved_from(out);
                }
            }
            out.push(WatchEvent::Create {
                path: path.clone(),
                dir: is_dir,
            });
            self.created(&path, is_dir, out);
        } else if mask.contains(AddWatchFlags::IN_MOVED_FROM) {
            self.flush_moved_from(out);
            self.moved_from = Some((event.cookie, path, is_dir));
        } else if mask.contains(AddWatchFlags::IN_CREATE) {
            out.push(WatchEvent::Create {
                path: path.clone(),
                dir: is_dir,
            });
            self.created(&path, is_dir, out);
        } else if mask.contains(AddWatchFlags::IN_MODIFY) {
            out.push(WatchEvent::Modify { path, dir: is_dir });
        } else if mask.contains(AddWatchFlags::IN_DELETE) {
            out.push(WatchEvent::Delete { path, dir: is_dir });
        }
        true
    }

    /// A move out of the tree (no `IN_MOVED_TO` within [`MOVE_PAIR_MS`]): a delete.
    fn flush_moved_from(&mut self, out: &mut Vec<WatchEvent>) {
        if let Some((_, path, dir)) = self.moved_from.take() {
            if dir {
                self.unwatch_below(&path);
            }
            out.push(WatchEvent::Delete { path, dir });
        }
    }

    /// A new (or moved-in) directory is watched, and what it already holds is told as
    /// created: entries made before its watch was added have no events of their own (one
    /// made between the watch and the look is told twice, which beats never).
    fn created(&mut self, path: &str, is_dir: bool, out: &mut Vec<WatchEvent>) {
        if is_dir && self.recursive && self.add(path) {
            self.watch_below(path, Some(out));
        }
    }

    /// Watches every directory under `rel` (not through symlinks); with `tell`, each entry
    /// found is a `create` there.
    fn watch_below(&mut self, rel: &str, mut tell: Option<&mut Vec<WatchEvent>>) {
        let mut stack = vec![rel.to_owned()];
        while let Some(dir) = stack.pop() {
            let Ok(items) = std::fs::read_dir(self.root.join(&dir)) else {
                continue;
            };
            for item in items.flatten() {
                let child = join(&dir, &item.file_name());
                let is_dir = item.file_type().is_ok_and(|t| t.is_dir());
                if let Some(out) = tell.as_deref_mut() {
                    // A huge tree moved in is not listed whole: the client hears overflow.
                    if out.len() < WATCH_QUEUE_EVENTS {
                        out.push(WatchEvent::Create {
                            path: child.clone(),
                            dir: is_dir,
                        });
                    } else {
                        self.owes_overflow = true;
                    }
                }
                if is_dir && self.add(&child) {
                    stack.push(child);
                }
            }
        }
    }

    fn add(&mut self, rel: &str) -> bool {
        if self.dirs.len() >= MAX_WATCHES {
            self.owes_overflow = true;
            return false;
        }
        match self.inotify.add_watch(&self.root.join(rel), mask()) {
            Ok(wd) => {
                self.dirs.insert(wd, rel.to_owned());
                true
            }
            // Gone already, or not readable by the caller: nothing to watch.
            Err(_) => false,
        }
    }

    /// A directory renamed inside the tree keeps its watches; their names change.
    fn renamed_dir(&mut self, from: &str, to: &str) {
        for rel in self.dirs.values_mut() {
            if let Some(rest) = under(rel, from) {
                *rel = format!("{to}{rest}");
            }
        }
    }

    fn unwatch_below(&mut self, gone: &str) {
        let wds: Vec<_> = self
            .dirs
            .iter()
            .filter(|(_, rel)| under(rel, gone).is_some())
            .map(|(wd, _)| *wd)
            .collect();
        for wd in wds {
            self.dirs.remove(&wd);
            let _ = self.inotify.rm_watch(wd);
        }
    }
}

/// `rel` is `base` or below it: the rest of its name after `base` (`""` or `/…`).
fn under<'a>(rel: &'a str, base: &str) -> Option<&'a str> {
    let rest = rel.strip_prefix(base)?;
    (rest.is_empty() || rest.starts_with('/')).then_some(rest)
}

fn join(dir: &str, name: &OsStr) -> String {
    let name = String::from_utf8_lossy(name.as_bytes());
    if dir.is_empty() {
        name.into_owned()
    } else {
        format!("{dir}/{name}")
    }
}

#[cfg(test)]
mod tests;
