//! The wait for a booting VM's berth-init to answer on the guest channel.
//!
//! The host connects only once berth-init has said on the console that it listens
//! (`berth_protocol::vm::READY_MARK`): a connection made earlier would wait in the guest
//! channel until the guest's driver came up, and a slow (TCG, loaded) boot outlasts one
//! attempt (Firecracker's vsock has been seen to wedge on a connection dropped that way).
//! Watching the console file costs the guest nothing, so it is read every few ms and the
//! agent is found as soon as it is up. The initramfs ships with the daemon, so every
//! berth-init prints the line.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::process::vmm;
use crate::{error_chain, BoxId, GuestClient, RuntimeError};

/// How often the console is read for berth-init's line.
const CONSOLE_POLL: Duration = Duration::from_millis(5);
/// After the line: how long between tries of `info` (the listener is up: the first try
/// normally answers).
const RETRY: Duration = Duration::from_millis(10);

/// What [`wait_ready`] waits on.
pub(crate) struct ReadyWait<'a> {
    pub id: &'a BoxId,
    pub client: &'a GuestClient,
    /// The VMM: once it exits, waiting longer is pointless.
    pub vmm_pid: i32,
    pub deadline: Duration,
    /// How long one `info` call may take.
    pub attempt: Duration,
    pub console_log: &'a Path,
    /// Where this boot's output starts in `console_log` (earlier boots append before it).
    pub console_from: u64,
}

/// Calls `info` until berth-init answers, the VMM exits, or the deadline passes; the error
/// carries `exited()` (what the VMM said on its way out) and the console's last lines.
pub(crate) async fn wait_ready(
    wait: ReadyWait<'_>,
    exited: impl FnOnce() -> String,
) -> Result<(), RuntimeError> {
    let started = Instant::now();
    let mut console = ConsoleWatch::new(wait.console_log, wait.console_from);
    let mut next_try = None;
    let mut last = "berth-init has not said it listens yet".to_owned();
    loop {
        if next_try.is_none() && console.has_ready_mark() {
            next_try = Some(Instant::now());
        }
        if next_try.is_some_and(|at| Instant::now() >= at) {
            let attempt = wait
                .attempt
                .min(wait.deadline.saturating_sub(started.elapsed()));
            last = match tokio::time::timeout(attempt, wait.client.info()).await {
                Ok(Ok(_)) => return Ok(()),
                // A version mismatch will not fix itself.
                Ok(Err(e @ crate::GuestError::Version { .. })) => return Err(e.into()),
                Ok(Err(e)) => error_chain(&e),
                Err(_) => format!("no answer within {} ms", attempt.as_millis()),
            };
            next_try = Some(Instant::now() + RETRY);
        }
        let gone = !crate::process::pid_alive(wait.vmm_pid);
        if gone || started.elapsed() >= wait.deadline {
            let why = if gone {
                exited()
            } else {
                format!("the {} ms boot deadline passed", wait.deadline.as_millis())
            };
            return Err(RuntimeError::NotReady {
                id: wait.id.to_string(),
                waited_ms: started.elapsed().as_millis() as u64,
                last_error: Some(format!(
                    "{why}; the guest channel: {last}; console log ({}):\n{}",
                    wait.console_log.display(),
                    vmm::console_tail(wait.console_log)
                )),
            });
        }
        tokio::time::sleep(CONSOLE_POLL).await;
    }
}

/// Reads a growing console log from an offset on, for berth-init's ready line.
struct ConsoleWatch<'a> {
    path: &'a Path,
    /// Opened once the log exists (QEMU creates it as it starts).
    file: Option<std::fs::File>,
    /// The next byte to read.
    at: u64,
    /// The end of what was read, kept so a line split across two reads is still found.
    tail: Vec<u8>,
}

impl<'a> ConsoleWatch<'a> {
    fn new(path: &'a Path, from: u64) -> Self {
        ConsoleWatch {
            path,
            file: None,
            at: from,
            tail: Vec::new(),
        }
    }

    /// Whether the ready line has appeared since the last call (or ever, from `from`).
    fn has_ready_mark(&mut self) -> bool {
        use std::io::{Read, Seek, SeekFrom};
        let mark = berth_protocol::vm::READY_MARK.as_bytes();
        if self.file.is_none() {
            self.file = std::fs::File::open(self.path).ok();
        }
        let Some(file) = self.file.as_mut() else {
            return false;
        };
        let mut new = Vec::new();
        if file.seek(SeekFrom::Start(self.at)).is_err() || file.read_to_end(&mut new).is_err() {
            return false;
        }
        self.at += new.len() as u64;
        self.tail.extend_from_slice(&new);
        let found = self.tail.windows(mark.len()).any(|w| w == mark);
        let keep = self.tail.len().saturating_sub(mark.len());
        self.tail.drain(..keep);
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ready_line_counts_only_from_this_boot_and_across_reads() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("console.log");
        let mark = berth_protocol::vm::READY_MARK;
        std::fs::write(&log, format!("old boot\n{mark} port 2024\n")).unwrap();
        let from = std::fs::metadata(&log).unwrap().len();
        let mut watch = ConsoleWatch::new(&log, from);
        assert!(!watch.has_ready_mark(), "an earlier boot's line");
        let append = |text: &str| {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
            f.write_all(text.as_bytes()).unwrap();
        };
        append("[    0.1] kernel\nberth-init: loaded virtio\n");
        assert!(!watch.has_ready_mark());
        let (head, rest) = mark.split_at(10);
        append(head);
        assert!(!watch.has_ready_mark(), "half a line");
        append(&format!("{rest} port 2024\n"));
        assert!(watch.has_ready_mark(), "the line split across two reads");
        assert!(
            !ConsoleWatch::new(&dir.path().join("missing"), 0).has_ready_mark(),
            "no log yet"
        );
    }
}
