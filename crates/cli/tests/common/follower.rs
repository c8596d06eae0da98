//! A long-running `berth` command whose output a test follows line by line.

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use super::{berth, Daemon};

/// A long-running `berth` child whose stdout lines are collected; killed on drop.
pub struct Follower {
    child: Child,
    lines: std::sync::mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Follower {
    pub fn spawn(daemon: &Daemon, args: &[&str]) -> Follower {
        let mut child = berth()
            .arg("--data-dir")
            .arg(daemon.dir())
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead as _;
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Follower {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// The first line from here on that is `wanted`.
    pub fn wait_for_line(&mut self, wanted: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let hit = wanted(&line);
                    self.seen.push(line.clone());
                    if hit {
                        return line;
                    }
                }
                Err(e) => panic!("no such line ({e}); saw:\n{}", self.seen.join("\n")),
            }
        }
    }

    /// SIGINT, then the exit status (within 10 s).
    pub fn interrupt(&mut self) -> Option<i32> {
        // SAFETY: kill(2) on our own child's pid (not yet reaped); it touches no memory.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGINT);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("berth ignored SIGINT for 10 s");
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
