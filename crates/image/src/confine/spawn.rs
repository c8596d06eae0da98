//! Running a confined tool to its end or its deadline, keeping the end of its output.

use std::io::Read;
use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;

use super::{ToolOutput, OUTPUT_TAIL};
use crate::tool::Tool;
use crate::ImageError;

/// Spawns `cmd`, keeps the tail of its output, and kills it at `deadline`.
pub(super) fn spawn_and_wait(
    tool: Tool,
    cmd: &mut Command,
    deadline: Duration,
) -> Result<ToolOutput, ImageError> {
    let mut child = cmd.spawn().map_err(|source| ImageError::Spawn {
        tool: tool.name,
        source,
    })?;
    let stdout = tail_reader(child.stdout.take().expect("stdout is piped"));
    let stderr = tail_reader(child.stderr.take().expect("stderr is piped"));
    let pid = child.id() as libc::pid_t;
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
                tool: tool.name,
                after: deadline,
            })
        }
    };
    let stdout = stdout.join().unwrap_or_default();
    let stderr = stderr.join().unwrap_or_default();
    let status = waited?.map_err(|source| ImageError::Spawn {
        tool: tool.name,
        source,
    })?;
    Ok(ToolOutput {
        status,
        stdout,
        stderr,
    })
}

/// Reads `pipe` to its end on a thread, keeping its last [`OUTPUT_TAIL`] bytes.
fn tail_reader(mut pipe: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
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
        String::from_utf8_lossy(&kept[start..]).into_owned()
    })
}
