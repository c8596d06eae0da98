//! Processes that outlive their request (`/v1/processes`): started, then left to run; their
//! output kept in a numbered [`Tail`] that any number of readers follow from an offset;
//! stdin a pipe that one writer at a time streams into; the exit recorded, and journalled
//! as a `process_exit` event. The rules the host relies on are in
//! [`berth_protocol::process`].

mod output;
pub mod tail;

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use berth_protocol::guest::BoxUser;
use berth_protocol::process::{
    ProcessExit, ProcessInfo, ProcessList, ProcessRequest, MAX_PROCESSES, PROCESS_TAIL_BYTES,
};
use berth_protocol::terminal::{signal_number, SignalRequest};
use bytes::Bytes;
use tokio::io::AsyncWriteExt;
use tokio::net::unix::pipe;
use tokio::sync::{mpsc, Notify};

use crate::error::ApiError;
use crate::exec::pump::{pump, Pipe, Sink};
use crate::exec::{Executor, Running};
use crate::harness::Harness;
use crate::started::Started;
use tail::Tail;

pub use output::{follow, send_tail, started_and_followed, BATCH_BYTES};

/// Every process of this boot started through `/v1/processes`, oldest first.
#[derive(Debug)]
pub struct Processes {
    exec: Arc<Executor>,
    harness: Arc<Harness>,
    all: Mutex<Vec<Arc<Process>>>,
}

#[derive(Debug)]
pub struct Process {
    id: String,
    pid: i32,
    argv: Vec<String>,
    user: BoxUser,
    started_at_ms: u64,
    keep_awake: bool,
    started: Started,
    state: Mutex<State>,
    /// Woken on new output and on the exit.
    changed: Notify,
}

#[derive(Debug)]
struct State {
    tail: Tail,
    exit: Option<ProcessExit>,
    /// The stdin pipe while it is open and no writer holds it.
    stdin: Option<pipe::Sender>,
    /// Open (held here or by a writer) until closed or the process exits.
    stdin_open: bool,
}

impl Processes {
    pub fn new(exec: Arc<Executor>, harness: Arc<Harness>) -> Arc<Self> {
        Arc::new(Processes {
            exec,
            harness,
            all: Mutex::default(),
        })
    }

    /// `POST /v1/processes`: starts the process and returns at once.
    pub fn start(self: &Arc<Self>, body: &[u8]) -> Result<Arc<Process>, ApiError> {
        let req: ProcessRequest = serde_json::from_slice(body).map_err(ApiError::BadJson)?;
        let started = Started::new(req.tag, req.exec.cwd.clone(), req.exec.env.clone())?;
        let mut prepared = self.exec.prepare_request(req.exec)?;
        if req.open_stdin {
            if prepared.has_stdin_text() {
                return Err(ApiError::StdinTwice);
            }
            prepared = prepared.keep_stdin_open();
        }
        self.make_room()?;
        let mut running = self
            .exec
            .spawn(&prepared)
            .map_err(|(code, reason)| ApiError::Start { code, reason })?;
        let stdin = running.stdin.take();
        let process = Arc::new(Process {
            id: format!("pr_{}", crate::boot::random_hex::<8>()),
            pid: running.pid,
            argv: prepared.argv().to_vec(),
            user: prepared.user(),
            started_at_ms: crate::harness::event_log::now_ms(),
            keep_awake: req.keep_awake,
            started,
            state: Mutex::new(State {
                tail: Tail::new(PROCESS_TAIL_BYTES),
                exit: None,
                stdin_open: stdin.is_some(),
                stdin,
            }),
            changed: Notify::new(),
        });
        self.lock().push(process.clone());
        tokio::spawn(drive(
            process.clone(),
            running,
            prepared.timeout(),
            self.clone(),
        ));
        Ok(process)
    }

    pub fn list(&self) -> ProcessList {
        ProcessList {
            processes: self.lock().iter().map(|p| p.info()).collect(),
        }
    }

    pub fn get(&self, id: &str) -> Result<Arc<Process>, ApiError> {
        self.lock()
            .iter()
            .find(|p| p.id == id)
            .cloned()
            .ok_or_else(|| ApiError::NoProcess { id: id.to_owned() })
    }

    /// Running processes that keep the box awake.
    pub fn busy(&self) -> u32 {
        let count = self
            .lock()
            .iter()
            .filter(|p| p.keep_awake && p.state().exit.is_none())
            .count();
        u32::try_from(count).unwrap_or(u32::MAX)
    }

    /// Forgets the oldest exited process when the table is full; refuses when all run.
    fn make_room(&self) -> Result<(), ApiError> {
        let mut all = self.lock();
        if all.len() < MAX_PROCESSES {
            return Ok(());
        }
        match all.iter().position(|p| p.state().exit.is_some()) {
            Some(oldest_exited) => {
                all.remove(oldest_exited);
                Ok(())
            }
            None => Err(ApiError::TooManyProcesses {
                limit: MAX_PROCESSES,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Arc<Process>>> {
        self.all.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Process {
    pub fn info(&self) -> ProcessInfo {
        let state = self.state();
        ProcessInfo {
            id: self.id.clone(),
            pid: u32::try_from(self.pid).unwrap_or(0),
            argv: self.argv.clone(),
            user: self.user,
            started_at_ms: self.started_at_ms,
            keep_awake: self.keep_awake,
            stdin_open: state.stdin_open,
            output_end: state.tail.end(),
            exit: state.exit,
            tag: self.started.tag.clone(),
            cwd: self.started.cwd.clone(),
            env: self.started.env.clone(),
        }
    }

    /// `POST /v1/processes/{id}/signal`: to the process's group.
    pub fn signal(&self, body: &[u8]) -> Result<(), ApiError> {
        let req: SignalRequest = serde_json::from_slice(body).map_err(ApiError::BadJson)?;
        let signal = signal_number(&req.signal).ok_or(ApiError::BadSignal { name: req.signal })?;
        if self.state().exit.is_none() {
            // SAFETY: killpg with the process's own group and a known signal number.
            unsafe { libc::killpg(self.pid, signal) };
        }
        Ok(())
    }

    /// Takes the stdin pipe for one writer; `None` when it is closed or another writer
    /// has it.
    pub fn take_stdin(&self) -> Result<pipe::Sender, ApiError> {
        self.state()
            .stdin
            .take()
            .ok_or_else(|| ApiError::StdinNotOpen {
                id: self.id.clone(),
            })
    }

    /// Gives the pipe back after a write, or closes it (`close`, or a broken pipe).
    pub fn return_stdin(&self, stdin: pipe::Sender, close: bool) {
        let mut state = self.state();
        if close || state.exit.is_some() {
            state.stdin_open = false;
        } else {
            state.stdin = Some(stdin);
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Streams `chunks` into the process's stdin with backpressure: the pipe is written only
/// as fast as the process reads it.
pub async fn write_stdin(
    process: &Process,
    mut chunks: mpsc::Receiver<Bytes>,
    close: bool,
) -> Result<(), ApiError> {
    let mut stdin = process.take_stdin()?;
    let mut broken = false;
    while let Some(chunk) = chunks.recv().await {
        if stdin.write_all(&chunk).await.is_err() {
            broken = true;
            break;
        }
    }
    process.return_stdin(stdin, close || broken);
    if broken {
        return Err(ApiError::StdinClosed {
            id: process.id.clone(),
        });
    }
    Ok(())
}

/// Keeps the output in the tail until the process is done, then records the exit. A
/// timeout kills the group. Nobody's connection is involved: a reader that leaves changes
/// nothing here.
async fn drive(
    process: Arc<Process>,
    mut run: Running,
    timeout: Option<Duration>,
    processes: Arc<Processes>,
) {
    let sink = &mut TailSink(&process);
    let Some(exit) = pump(&mut run, timeout, sink).await else {
        return;
    };
    {
        let mut state = process.state();
        state.exit = Some(exit);
        state.stdin = None;
        state.stdin_open = false;
    }
    process.changed.notify_waiters();
    let event = (
        "process_exit".to_owned(),
        serde_json::json!({
            "id": process.id,
            "argv": process.argv,
            "code": exit.code,
            "signal": exit.signal,
            "timed_out": exit.timed_out,
            "status": exit.shell_status(),
        }),
    );
    // The journal syncs each append to disk: off the agent's one async thread, so the
    // readers just woken send the exit now, not after the disk answers.
    let harness = processes.harness.clone();
    let _ = tokio::task::spawn_blocking(move || {
        crate::harness::supervisor::emit(&harness, vec![event])
    })
    .await;
    processes.exec.reaper.forget_group_if_empty(run.pid);
}

/// The process's own tail: never full (it forgets its oldest output), never gone.
struct TailSink<'a>(&'a Process);

impl Sink for TailSink<'_> {
    async fn output(&mut self, pipe: Pipe, data: &[u8]) -> bool {
        self.0.state().tail.push(pipe.into(), data);
        self.0.changed.notify_waiters();
        true
    }

    async fn gone(&self) {
        std::future::pending().await
    }
}
