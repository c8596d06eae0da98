//! README.md runs as written: every ```sh block, in order, against a fresh daemon, the way a
//! new user would type it (bash with `set -e`, but no pipefail: `berth … | head -3` ends
//! berth on SIGPIPE, as it does `cat`; the just-built `berth` on PATH, the
//! daemon's data dir in BERTH_DATA_DIR, a scratch directory with a copy of README.md as the
//! working directory). Lines that need a terminal run in tmux, driven as their steering
//! comment says (`readme/blocks.rs`; the convention is at the top of README's "Use it").
//! A failing line fails the test with its block and the block's output.

#[path = "readme/blocks.rs"]
mod blocks;
mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use blocks::{Block, Steer, Step};
use common::terminal::Tmux;
use common::{e2e_skip_reason, wait_or_kill, Daemon, BERTH};

/// A block that downloads the kernel (`berth image build`, first time on a host) or waits
/// out an idle timeout takes minutes; one that hangs fails.
const BLOCK_DEADLINE: Duration = Duration::from_secs(900);
/// What a terminal line may take per step (a TCG guest is slow).
const TERMINAL_STEP: Duration = Duration::from_secs(120);

/// Where and how the blocks run.
struct Walk<'a> {
    daemon: &'a Daemon,
    work: PathBuf,
    path: String,
}

impl Walk<'_> {
    /// The environment every block runs in (also typed into the tmux shell).
    fn env(&self) -> [(&'static str, String); 3] {
        [
            ("PATH", self.path.clone()),
            ("BERTH_DATA_DIR", self.daemon.dir().display().to_string()),
            ("HOME", self.work.display().to_string()),
        ]
    }

    /// Runs `lines` (part of the block at `block_line`) with bash; the output on failure.
    fn bash(&self, block_line: usize, lines: &[String]) -> Result<String, String> {
        let script = self.work.join(format!(".block-{block_line}.sh"));
        let log = self.work.join(format!(".block-{block_line}.out"));
        let body = format!("set -e\nexec 2>&1\nset -x\n{}\n", lines.join("\n"));
        fs::write(&script, body).unwrap();
        let mut child = Command::new("bash")
            .arg(&script)
            .current_dir(&self.work)
            .env_clear()
            .envs(passed_through())
            .envs(self.env())
            .stdin(Stdio::null())
            .stdout(fs::File::create(&log).unwrap())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let status = wait_or_kill(&mut child, BLOCK_DEADLINE);
        let output = fs::read_to_string(&log).unwrap_or_default();
        match status {
            Some(status) if status.success() => Ok(output),
            Some(status) => Err(format!("{output}\n({status})")),
            None => Err(format!(
                "{output}\n(still running after {BLOCK_DEADLINE:?})"
            )),
        }
    }

    /// Runs `line` in a real terminal, driven by `steps`; it must end with status 0.
    fn terminal(&self, line: &str, steps: &[Step]) -> Result<(), String> {
        let Some(tmux) = Tmux::start(120, 40) else {
            return Ok(());
        };
        let exports: Vec<String> = self
            .env()
            .iter()
            .map(|(k, v)| format!("{k}='{v}'"))
            .collect();
        tmux.type_line(&format!(
            "cd '{}' && export {} && clear && {line}; echo readme-exit-$((0+$?))",
            self.work.display(),
            exports.join(" ")
        ));
        // Until the screen is cleared, the host's prompt could pass for what is expected.
        tmux.wait("the screen cleared", TERMINAL_STEP, |screen| {
            !screen.contains("readme-exit-")
        });
        for step in steps {
            match step {
                Step::Send(text) => tmux.type_line(text),
                Step::Expect(text) => {
                    tmux.wait_for(text, TERMINAL_STEP);
                }
            }
        }
        // The typed line holds `readme-exit-$`; the output, a number.
        let screen = tmux.wait("the line's end", TERMINAL_STEP, |screen| {
            exit_status(screen).is_some()
        });
        match exit_status(&screen) {
            Some(0) => Ok(()),
            _ => Err(screen),
        }
    }

    /// Runs one block; `Err` with what to show when a line failed.
    fn run(&self, block: &Block) -> Result<(), String> {
        let mut pending: Vec<String> = Vec::new();
        for line in &block.lines {
            let terminal = block.steer.iter().find_map(|s| match s {
                Steer::Terminal { line: run, steps } if blocks::is_line(line, run) => {
                    Some((run, steps))
                }
                _ => None,
            });
            match terminal {
                None => pending.push(line.clone()),
                Some((run, steps)) => {
                    if !pending.is_empty() {
                        eprintln!("{}", self.bash(block.line, &pending)?);
                        pending.clear();
                    }
                    eprintln!("+ {run}   (in a terminal)");
                    self.terminal(run, steps)?;
                }
            }
        }
        if !pending.is_empty() {
            eprintln!("{}", self.bash(block.line, &pending)?);
        }
        Ok(())
    }
}

/// What the test itself was given that a user's `make install` arranges otherwise: where
/// berth-init and the echo harness are (beside `berth` once installed), QEMU, the image
/// cache. Never the daemon's address or key: the blocks find the daemon as written.
fn passed_through() -> Vec<(String, String)> {
    std::env::vars()
        .filter(|(k, _)| {
            k.starts_with("BERTH_")
                && !["BERTH_URL", "BERTH_API_KEY", "BERTH_DATA_DIR"].contains(&k.as_str())
                || k == "ECHO_HARNESS_BIN"
        })
        .collect()
}

/// `N` of the last `readme-exit-N` on the screen.
fn exit_status(screen: &str) -> Option<i32> {
    screen.rsplit("readme-exit-").next().and_then(|tail| {
        let digits: String = tail.chars().take_while(|c| c.is_ascii_digit()).collect();
        digits.parse().ok()
    })
}

fn readme() -> (PathBuf, String) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md");
    let text = fs::read_to_string(&path).unwrap();
    (path, text)
}

/// Why a `needs: qemu` block cannot run here.
fn qemu_missing() -> Option<String> {
    let (env, name) = ("BERTH_QEMU", berth_runtime::qemu::DEFAULT_QEMU);
    berth_runtime::qemu::find_program(env, name)
        .is_none()
        .then(|| format!("{name} is not installed (scripts/install-deps.sh --tests)"))
}

#[test]
fn the_readme_runs_as_written() {
    if let Some(reason) = e2e_skip_reason() {
        berth_testkit::skip("sandbox", &reason);
        return;
    }
    let (readme_path, text) = readme();
    let blocks =
        blocks::blocks(&text).unwrap_or_else(|e| panic!("README.md:{}: {}", e.line, e.why));
    assert!(
        blocks.len() >= 5,
        "README.md has too few sh blocks: {blocks:?}"
    );
    let daemon = Daemon::start();
    let work = tempfile::tempdir().unwrap();
    fs::copy(&readme_path, work.path().join("README.md")).unwrap();
    let bin_dir = Path::new(BERTH).parent().unwrap();
    let walk = Walk {
        daemon: &daemon,
        work: work.path().to_path_buf(),
        path: format!(
            "{}:{}",
            bin_dir.display(),
            std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into())
        ),
    };
    for block in &blocks {
        eprintln!("--- README.md:{}", block.line);
        if let Some(why) = block.steer.iter().find_map(|s| match s {
            Steer::Skip(why) => Some(why),
            _ => None,
        }) {
            eprintln!("not run: {why}");
            continue;
        }
        if block.steer.contains(&Steer::NeedsQemu) {
            if let Some(why) = qemu_missing() {
                berth_testkit::skip("qemu", format!("README.md:{}: {why}", block.line));
                continue;
            }
            common::link_test_image_cache(daemon.dir());
        }
        if let Err(output) = walk.run(block) {
            if block.steer.contains(&Steer::NeedsQemu)
                && output.contains("no network to the Debian mirror")
            {
                berth_testkit::skip(
                    "qemu",
                    format!("README.md:{}: no Debian mirror", block.line),
                );
                continue;
            }
            panic!(
                "README.md:{} fails as written:\n```sh\n{}\n```\n--- its output:\n{output}\n{}",
                block.line,
                block.lines.join("\n"),
                daemon.logs()
            );
        }
    }
}

#[test]
fn exit_status_is_read_from_the_output_not_the_typed_line() {
    assert_eq!(exit_status("host$ x; echo readme-exit-$((0+$?))\n"), None);
    assert_eq!(
        exit_status("host$ x; echo readme-exit-$((0+$?))\nreadme-exit-3\nhost$"),
        Some(3)
    );
}
