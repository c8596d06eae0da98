//! Real terminals for tests: a tmux server of the test's own, running a host shell in a
//! window of a known size, typed into with send-keys and read with capture-pane; and one
//! `berth` command run on a terminal of util-linux `script`.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// One tmux server of our own (its own socket), killed on drop with everything in it.
pub struct Tmux {
    socket: String,
}

impl Tmux {
    /// A detached session running `sh` in a `cols`×`rows` window.
    pub fn start(cols: u16, rows: u16) -> Option<Tmux> {
        if Command::new("tmux").arg("-V").output().is_err() {
            berth_testkit::skip(
                "sandbox",
                "tmux is not installed (scripts/install-deps.sh --tests)",
            );
            return None;
        }
        let socket = format!("berth-test-{}-{}", std::process::id(), rand_suffix());
        let tmux = Tmux { socket };
        tmux.run(&[
            "new-session",
            "-d",
            "-x",
            &cols.to_string(),
            "-y",
            &rows.to_string(),
            "env",
            "PS1=host$ ",
            "TERM=xterm-256color",
            "sh",
        ]);
        Some(tmux)
    }

    pub fn run(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .args(["-L", &self.socket, "-f", "/dev/null"])
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Types `line` and Enter.
    pub fn type_line(&self, line: &str) {
        self.run(&["send-keys", "-l", line]);
        self.run(&["send-keys", "Enter"]);
    }

    pub fn screen(&self) -> String {
        self.run(&["capture-pane", "-p"])
    }

    /// Waits until the screen satisfies `done`; panics with the screen after `within`.
    pub fn wait(&self, what: &str, within: Duration, done: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + within;
        loop {
            let screen = self.screen();
            if done(&screen) {
                return screen;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: not on the screen after {within:?}:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits for `text` on the screen.
    pub fn wait_for(&self, text: &str, within: Duration) -> String {
        self.wait(text, within, |screen| screen.contains(text))
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .output();
    }
}

fn rand_suffix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// Runs `berth --data-dir <dir> <args>` with a terminal on its stdin and stdout (util-linux
/// `script`: stderr lands on the same terminal, so the output holds both); `None` (a skip,
/// said and recorded) without `script`.
pub fn berth_on_a_terminal(dir: &Path, args: &[&str]) -> Option<Output> {
    let quote = |word: &str| format!("'{}'", word.replace('\'', r"'\''"));
    let line = std::iter::once(super::BERTH.to_owned())
        .chain(["--data-dir".to_owned(), dir.display().to_string()])
        .chain(args.iter().map(|a| a.to_string()))
        .map(|w| quote(&w))
        .collect::<Vec<_>>()
        .join(" ");
    let out = Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .env_remove("BERTH_URL")
        .env_remove("BERTH_API_KEY")
        .stdin(Stdio::null())
        .output();
    match out {
        Ok(out) => Some(out),
        Err(e) => {
            berth_testkit::skip("shells", format!("no util-linux `script` ({e})"));
            None
        }
    }
}
