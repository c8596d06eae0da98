//! The one loop that carries a piped process's output until it is done: `POST /v1/exec`
//! sends it as frames to one client, `/v1/processes` keeps it in a tail for any reader.
//! Only where the output goes differs, so that is the [`Sink`] parameter; the timeout, the
//! drain after the exit and the group kill are the same for both.
//!
//! After the process exits its pipes are read until EOF, or for at most [`DRAIN_GRACE`]
//! when a background child still holds them.

use std::future::Future;
use std::time::Duration;

use berth_protocol::process::{OutputStream, ProcessExit};
use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe;
use tokio::time::Instant;

use super::Running;
use crate::reaper::{kill_group, Exit};

/// How long output is still read after the process exited.
const DRAIN_GRACE: Duration = Duration::from_millis(200);
/// The most read from a pipe at a time.
const READ_CHUNK: usize = 8 * 1024;

/// Which of the process's pipes a chunk came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pipe {
    Stdout,
    Stderr,
}

impl From<Pipe> for OutputStream {
    fn from(pipe: Pipe) -> Self {
        match pipe {
            Pipe::Stdout => OutputStream::Stdout,
            Pipe::Stderr => OutputStream::Stderr,
        }
    }
}

/// Where a process's output goes.
pub trait Sink {
    /// Takes one chunk of output; `false` when the consumer is gone.
    fn output(&mut self, pipe: Pipe, data: &[u8]) -> impl Future<Output = bool> + Send;

    /// Resolves when the consumer is gone; never, for a consumer that cannot leave.
    fn gone(&self) -> impl Future<Output = ()> + Send;
}

/// Pumps `run`'s output into `sink` until the process exited and its pipes are drained. A
/// timeout kills the group and is reported in the exit. When the sink's consumer goes away
/// the group is killed and there is no exit to report (`None`).
pub async fn pump(
    run: &mut Running,
    timeout: Option<Duration>,
    sink: &mut impl Sink,
) -> Option<ProcessExit> {
    let pgid = run.pid;
    let deadline = timeout.map(|t| Instant::now() + t);
    let far = || Instant::now() + Duration::from_secs(86_400 * 365);
    let mut timed_out = false;
    let mut exit: Option<Exit> = None;
    let mut drain_until: Option<Instant> = None;
    let mut out_buf = vec![0u8; READ_CHUNK];
    let mut err_buf = vec![0u8; READ_CHUNK];
    loop {
        if exit.is_some() && run.stdout.is_none() && run.stderr.is_none() {
            break;
        }
        let chunk = tokio::select! {
            _ = sink.gone() => {
                kill_group(pgid);
                return None;
            }
            _ = tokio::time::sleep_until(deadline.unwrap_or_else(far)), if deadline.is_some() && !timed_out && exit.is_none() => {
                kill_group(pgid);
                timed_out = true;
                None
            }
            _ = tokio::time::sleep_until(drain_until.unwrap_or_else(far)), if drain_until.is_some() => break,
            status = &mut run.exit, if exit.is_none() => {
                exit = Some(status.unwrap_or(Exit { code: None, signal: None }));
                drain_until = Some(Instant::now() + DRAIN_GRACE);
                None
            }
            n = read_some(&mut run.stdout, &mut out_buf) => match n {
                Some(n) => Some((Pipe::Stdout, &out_buf[..n])),
                None => { run.stdout = None; None }
            },
            n = read_some(&mut run.stderr, &mut err_buf) => match n {
                Some(n) => Some((Pipe::Stderr, &err_buf[..n])),
                None => { run.stderr = None; None }
            },
        };
        if let Some((pipe, data)) = chunk {
            if !sink.output(pipe, data).await {
                kill_group(pgid);
                return None;
            }
        }
    }
    let exit = exit.unwrap_or(Exit {
        code: None,
        signal: None,
    });
    Some(ProcessExit {
        code: exit.code,
        signal: exit.signal,
        timed_out,
    })
}

/// Reads one chunk; `None` at EOF or error. Pending forever when the pipe is closed.
async fn read_some(pipe: &mut Option<pipe::Receiver>, buf: &mut [u8]) -> Option<usize> {
    match pipe {
        Some(p) => match p.read(buf).await {
            Ok(0) | Err(_) => None,
            Ok(n) => Some(n),
        },
        None => std::future::pending().await,
    }
}
