//! Running a confined program to its end or its deadline, keeping its output (the end of
//! a tool's report, or an answer whole up to a cap).

use std::io::Read;
use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;

use super::{CapturedOutput, Stdout, OUTPUT_TAIL};
use crate::ImageError;

/// Spawns `cmd`, keeps its output as `stdout` says, and kills it at `deadline` (or once its
/// stdout passes a [`Stdout::Whole`] cap).
pub(super) fn spawn_and_wait(
    name: &'static str,
    cmd: &mut Command,
    deadline: Duration,
    mode: Stdout,
) -> Result<CapturedOutput, ImageError> {
    let mut child = cmd
        .spawn()
        .map_err(|source| ImageError::Spawn { tool: name, source })?;
    let pid = child.id() as libc::pid_t;
    let pipe = child.stdout.take().expect("stdout is piped");
    let out = match mode {
        Stdout::Tail => tail_reader(pipe),
        Stdout::Whole { cap } => whole_reader(pipe, cap),
    };
    let err = tail_reader(child.stderr.take().expect("stderr is piped"));
    let (done, finished) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(child.wait());
    });
    let waited = match finished.recv_timeout(deadline) {
        Ok(status) => Ok(status),
        Err(_) => {
            // SAFETY: kill on our own child, not yet reaped (the waiter reaps it only once
            // it is gone), so the pid is still its.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            let _ = finished.recv();
            Err(ImageError::TookTooLong {
                tool: name,
                after: deadline,
            })
        }
    };
    let (stdout, over_cap) = out.join().unwrap_or_default();
    let stderr = String::from_utf8_lossy(&err.join().unwrap_or_default().0).into_owned();
    let status = waited?.map_err(|source| ImageError::Spawn { tool: name, source })?;
    if let (Stdout::Whole { cap }, true) = (mode, over_cap) {
        return Err(ImageError::TooMuchOutput { tool: name, cap });
    }
    Ok(CapturedOutput {
        status,
        stdout,
        stderr,
    })
}

/// Reads `pipe` to its end on a thread, keeping its last [`OUTPUT_TAIL`] bytes.
fn tail_reader(mut pipe: impl Read + Send + 'static) -> std::thread::JoinHandle<(Vec<u8>, bool)> {
    std::thread::spawn(move || {
        let mut kept: Vec<u8> = Vec::new();
        let mut buf = [0u8; 8192];
        while let Ok(n) = pipe.read(&mut buf) {
            if n == 0 {
                break;
            }
            kept.extend_from_slice(&buf[..n]);
            if kept.len() > 2 * OUTPUT_TAIL {
                kept.drain(..kept.len() - OUTPUT_TAIL);
            }
        }
        let start = kept.len().saturating_sub(OUTPUT_TAIL);
        (kept.split_off(start), false)
    })
}

/// Reads `pipe` to its end on a thread, keeping all of it up to `cap` bytes. Past that it
/// stops reading and closes the pipe (the child's next write fails, and the deadline is
/// there for a child that would not stop), and the answer is marked over the cap.
fn whole_reader(
    mut pipe: impl Read + Send + 'static,
    cap: usize,
) -> std::thread::JoinHandle<(Vec<u8>, bool)> {
    std::thread::spawn(move || {
        let mut kept: Vec<u8> = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        while let Ok(n) = pipe.read(&mut buf) {
            if n == 0 {
                break;
            }
            if kept.len() + n > cap {
                return (Vec::new(), true);
            }
            kept.extend_from_slice(&buf[..n]);
        }
        (kept, false)
    })
}
