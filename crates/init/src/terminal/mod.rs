//! Terminals: a command on a new PTY, which lives on while no one watches it.
//!
//! The rules the host relies on are in [`berth_protocol::terminal`]. Each terminal has
//! three tasks: [`pump_output`] reads the PTY into the numbered [`Ring`] (held back while
//! an attached client lags a whole buffer behind), [`watch_exit`] records the exit, and
//! [`keep_or_end`] hangs up a terminal detached past its grace and forgets an ended one.
//! Attachments ([`attach`]) copy between the upgraded connection and the PTY.

pub mod attach;
mod pty;
mod ring;

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use berth_protocol::guest::BoxUser;
use berth_protocol::terminal::{
    signal_number, TerminalExit, TerminalInfo, TerminalList, TerminalRequest, TerminalSize,
    DEFAULT_GRACE_MS, MAX_GRACE_MS, MAX_TERMINALS, TERMINAL_BUFFER_BYTES,
};
use tokio::io::unix::AsyncFd;
use tokio::sync::{oneshot, Notify};
use tokio::time::Instant;

use crate::error::ApiError;
use crate::exec::Executor;
use crate::reaper::Exit;
use crate::started::Started;
use ring::Ring;

/// How long output is still read after the program exited, when something else (a
/// background job) keeps the PTY open.
const DRAIN_GRACE: Duration = Duration::from_millis(200);
/// Between the hang-up (`SIGHUP`) of a terminal detached too long and `SIGKILL`.
const HANGUP_GRACE: Duration = Duration::from_secs(2);
/// One read from the PTY.
const READ_CHUNK: usize = 16 * 1024;
/// The largest window a request may set.
const MAX_CELLS: u16 = 4096;

/// Every terminal of this boot.
#[derive(Debug)]
pub struct Terminals {
    exec: Arc<Executor>,
    by_id: Mutex<HashMap<String, Arc<Terminal>>>,
}

/// One terminal: the PTY's master side, its output and its state.
#[derive(Debug)]
pub struct Terminal {
    id: String,
    pid: i32,
    argv: Vec<String>,
    user: BoxUser,
    started: Started,
    master: AsyncFd<OwnedFd>,
    grace: Duration,
    state: Mutex<State>,
    /// Woken on every change: output, exit, an attachment beginning or ending.
    changed: Notify,
}

#[derive(Debug)]
struct State {
    ring: Ring,
    size: TerminalSize,
    exit: Option<Exit>,
    /// No more output will come.
    output_done: bool,
    /// The generation of the current (or last) attachment; a new one ends the previous.
    attachment: u64,
    attached: bool,
    /// Where the current or last attachment has been sent to.
    delivered: u64,
    detached_since: Instant,
}

impl Terminals {
    pub fn new(exec: Arc<Executor>) -> Arc<Self> {
        Arc::new(Terminals {
            exec,
            by_id: Mutex::default(),
        })
    }

    /// `POST /v1/terminals`: starts the program on a new PTY.
    pub fn open(self: &Arc<Self>, body: &[u8]) -> Result<TerminalInfo, ApiError> {
        let req: TerminalRequest = serde_json::from_slice(body).map_err(ApiError::BadJson)?;
        check_size(req.size)?;
        let started = Started::new(req.tag.clone(), req.cwd.clone(), req.env.clone())?;
        let grace_ms = req.grace_ms.unwrap_or(DEFAULT_GRACE_MS);
        if grace_ms > MAX_GRACE_MS {
            return Err(ApiError::BadTerminal {
                reason: "grace_ms is longer than a day",
            });
        }
        if self.lock().len() >= MAX_TERMINALS {
            return Err(ApiError::TooManyTerminals {
                limit: MAX_TERMINALS,
            });
        }
        let prepared = self.exec.prepare_terminal(&req)?;
        let (master, slave) = pty::open(req.size, req.user).map_err(ApiError::Pty)?;
        let (pid, exit) = self
            .exec
            .spawn_on_terminal(&prepared, &slave)
            .map_err(|(code, reason)| ApiError::Start { code, reason })?;
        // Only the program holds the slave now: its last close is the end of the output.
        drop(slave);
        // SAFETY: `master` is an open PTY master that the AsyncFd owns (and closes) for its
        // whole life.
        let master = unsafe { AsyncFd::register(master) }.map_err(|e| ApiError::Pty(e.into()))?;
        let terminal = Arc::new(Terminal {
            id: new_id(),
            pid,
            argv: prepared.argv().to_vec(),
            user: req.user,
            started,
            master,
            grace: Duration::from_millis(grace_ms),
            state: Mutex::new(State {
                ring: Ring::new(TERMINAL_BUFFER_BYTES),
                size: req.size,
                exit: None,
                output_done: false,
                attachment: 0,
                attached: false,
                delivered: 0,
                detached_since: Instant::now(),
            }),
            changed: Notify::new(),
        });
        self.lock().insert(terminal.id.clone(), terminal.clone());
        tokio::spawn(pump_output(terminal.clone()));
        tokio::spawn(watch_exit(terminal.clone(), exit, self.exec.clone()));
        tokio::spawn(keep_or_end(self.clone(), terminal.clone()));
        Ok(terminal.info())
    }

    /// `GET /v1/terminals`.
    pub fn list(&self) -> TerminalList {
        let mut terminals: Vec<TerminalInfo> = self.lock().values().map(|t| t.info()).collect();
        terminals.sort_by(|a, b| a.id.cmp(&b.id));
        TerminalList { terminals }
    }

    pub fn get(&self, id: &str) -> Result<Arc<Terminal>, ApiError> {
        self.lock()
            .get(id)
            .cloned()
            .ok_or_else(|| ApiError::NoTerminal { id: id.to_owned() })
    }

    /// Terminals that keep the box awake: attached, or detached within their grace.
    pub fn busy(&self) -> u32 {
        let count = self
            .lock()
            .values()
            .filter(|t| {
                let state = t.state();
                state.exit.is_none() && (state.attached || state.detached_since.elapsed() < t.grace)
            })
            .count();
        u32::try_from(count).unwrap_or(u32::MAX)
    }

    fn forget(&self, id: &str) {
        self.lock().remove(id);
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Arc<Terminal>>> {
        self.by_id.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Terminal {
    pub fn info(&self) -> TerminalInfo {
        let state = self.state();
        TerminalInfo {
            id: self.id.clone(),
            pid: u32::try_from(self.pid).unwrap_or(0),
            argv: self.argv.clone(),
            user: self.user,
            size: state.size,
            attached: state.attached,
            output_end: state.ring.end(),
            output_start: state.ring.start(),
            exit: state.exit.map(|e| TerminalExit {
                code: e.code,
                signal: e.signal,
            }),
            tag: self.started.tag.clone(),
            cwd: self.started.cwd.clone(),
            env: self.started.env.clone(),
        }
    }

    /// `POST /v1/terminals/{id}/resize`: the kernel tells the foreground job (`SIGWINCH`).
    pub fn resize(&self, body: &[u8]) -> Result<(), ApiError> {
        let size: TerminalSize = serde_json::from_slice(body).map_err(ApiError::BadJson)?;
        check_size(size)?;
        pty::set_size(self.master.get_ref(), size).map_err(ApiError::Pty)?;
        self.state().size = size;
        Ok(())
    }

    /// `POST /v1/terminals/{id}/signal`: to the terminal's foreground job, as its keys would.
    pub fn signal(&self, body: &[u8]) -> Result<(), ApiError> {
        let req: berth_protocol::terminal::SignalRequest =
            serde_json::from_slice(body).map_err(ApiError::BadJson)?;
        let signal = signal_number(&req.signal).ok_or(ApiError::BadSignal { name: req.signal })?;
        if self.state().exit.is_some() {
            return Ok(());
        }
        let group = pty::foreground_group(self.master.get_ref()).unwrap_or(self.pid);
        // SAFETY: killpg with a positive group id and a known signal number.
        unsafe { libc::killpg(group, signal) };
        Ok(())
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the program must wait: an attached client is a whole buffer behind.
    fn held_back(&self) -> bool {
        let state = self.state();
        state.attached
            && state.ring.end() - state.delivered + READ_CHUNK as u64 > TERMINAL_BUFFER_BYTES as u64
    }

    /// Waits until `done` holds; the check runs under no lock of the caller's.
    async fn wait_until(&self, mut done: impl FnMut(&Terminal) -> bool) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if done(self) {
                return;
            }
            changed.await;
        }
    }

    /// Writes input to the PTY (the line discipline turns ^C into SIGINT and so on).
    async fn write_input(&self, mut data: &[u8]) -> std::io::Result<()> {
        while !data.is_empty() {
            let mut ready = self.master.writable().await?;
            match ready.try_io(|fd| pty::write(fd.get_ref(), data)) {
                Ok(Ok(n)) => data = &data[n..],
                Ok(Err(err)) => return Err(err),
                Err(_would_block) => continue,
            }
        }
        Ok(())
    }
}

/// Reads the PTY until every holder of its slave side has closed it.
async fn pump_output(term: Arc<Terminal>) {
    let mut buf = vec![0u8; READ_CHUNK];
    loop {
        term.wait_until(|t| !t.held_back()).await;
        let n = match term.master.readable().await {
            Ok(mut ready) => match ready.try_io(|fd| pty::read(fd.get_ref(), &mut buf)) {
                Ok(Ok(0)) | Ok(Err(_)) => break,
                Ok(Ok(n)) => n,
                Err(_would_block) => continue,
            },
            Err(_) => break,
        };
        term.state().ring.push(&buf[..n]);
        term.changed.notify_waiters();
    }
    term.state().output_done = true;
    term.changed.notify_waiters();
}

/// Records the exit; after [`DRAIN_GRACE`] the output counts as done even if a leftover
/// background job still holds the PTY.
async fn watch_exit(term: Arc<Terminal>, exit: oneshot::Receiver<Exit>, exec: Arc<Executor>) {
    let exit = exit.await.unwrap_or(Exit {
        code: None,
        signal: None,
    });
    term.state().exit = Some(exit);
    term.changed.notify_waiters();
    let drained = tokio::time::timeout(DRAIN_GRACE, term.wait_until(|t| t.state().output_done));
    if drained.await.is_err() {
        term.state().output_done = true;
        term.changed.notify_waiters();
    }
    exec.reaper.forget_group_if_empty(term.pid);
}

/// Hangs up a terminal detached past its grace, and forgets an ended one once it has been
/// detached that long (so a client that reattaches late still learns the exit).
async fn keep_or_end(terminals: Arc<Terminals>, term: Arc<Terminal>) {
    let mut hung_up: Option<Instant> = None;
    loop {
        let changed = term.changed.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        let (attached, since, exited) = {
            let state = term.state();
            (state.attached, state.detached_since, state.exit.is_some())
        };
        let wake_at = if attached {
            None
        } else if exited {
            if since.elapsed() >= term.grace {
                terminals.forget(&term.id);
                return;
            }
            Some(since + term.grace)
        } else if let Some(at) = hung_up {
            if at.elapsed() >= HANGUP_GRACE {
                pty::kill_session(term.pid, libc::SIGKILL);
                None
            } else {
                Some(at + HANGUP_GRACE)
            }
        } else if since.elapsed() >= term.grace {
            pty::kill_session(term.pid, libc::SIGHUP);
            let now = Instant::now();
            hung_up = Some(now);
            Some(now + HANGUP_GRACE)
        } else {
            Some(since + term.grace)
        };
        match wake_at {
            Some(at) => {
                tokio::select! {
                    _ = &mut changed => {}
                    _ = tokio::time::sleep_until(at) => {}
                }
            }
            None => changed.await,
        }
        if term.state().attached {
            hung_up = None;
        }
    }
}

fn check_size(size: TerminalSize) -> Result<(), ApiError> {
    if (1..=MAX_CELLS).contains(&size.cols) && (1..=MAX_CELLS).contains(&size.rows) {
        Ok(())
    } else {
        Err(ApiError::BadTerminal {
            reason: "cols and rows must be between 1 and 4096",
        })
    }
}

/// `tm_` and 16 random hex digits.
fn new_id() -> String {
    format!("tm_{}", crate::boot::random_hex::<8>())
}
