//! Working inside a box from the CLI, on the sandbox runtime and on qemu: `berth shell`
//! driven through a real terminal (tmux runs a host shell in a window of a known size, the
//! test types into it with send-keys and reads the screen with capture-pane), and
//! background processes with a streamed stdin.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::terminal::Tmux;
use common::{e2e_skip_reason, Daemon};

/// The whole session: size, resize, ^C, a full-screen program, the exit status, and a sane
/// local terminal afterwards. `within` scales the waits for slow (TCG) guests.
fn drive_a_shell(daemon: &Daemon, name: &str, within: Duration) {
    let Some(tmux) = Tmux::start(100, 30) else {
        return;
    };
    let berth = Path::new(env!("CARGO_BIN_EXE_berth"));
    tmux.type_line(&format!(
        "env BERTH_DATA_DIR={} {} shell {name}; echo berth-exit=$?",
        daemon.dir().display(),
        berth.display()
    ));
    // Arithmetic, so the typed command line itself never matches what is waited for.
    tmux.type_line("echo ready-$((20+22))");
    tmux.wait_for("ready-42", within);
    tmux.type_line("stty size");
    tmux.wait_for("30 100", within);

    tmux.run(&["resize-window", "-x", "120", "-y", "40"]);
    tmux.type_line("clear; stty size");
    tmux.wait_for("40 120", within);

    tmux.type_line("sleep 100");
    tmux.wait_for("sleep 100", within);
    // ^C as typed on the local keyboard: raw mode sends it to the box's terminal, whose
    // line discipline interrupts the foreground job.
    tmux.run(&["send-keys", "C-c"]);
    tmux.type_line("echo status=$((0+$?))");
    tmux.wait_for("status=130", within);

    // A full-screen program: vi fills the window (40 rows) with its `~` lines.
    tmux.type_line("clear; vi");
    tmux.wait("vi's screen", within, |screen| {
        screen.lines().filter(|l| l.starts_with('~')).count() >= 30
    });
    tmux.type_line(":q!");
    // Busybox's shell drops keys typed in the moment after vi hands the terminal back
    // (its line editor is still asking the terminal where the cursor is): type the line
    // until it shows up whole at the prompt, then run it, as a person would.
    tmux.wait("vi gone and the prompt back", within, |screen| {
        screen.lines().filter(|l| l.starts_with('~')).count() < 5
    });
    let typed = "clear; echo back-$((1+1))";
    let deadline = Instant::now() + within;
    loop {
        tmux.run(&["send-keys", "C-u"]);
        tmux.run(&["send-keys", "-l", typed]);
        let shown = Instant::now() + Duration::from_secs(2);
        while Instant::now() < shown && !tmux.screen().contains(typed) {
            std::thread::sleep(Duration::from_millis(50));
        }
        if tmux.screen().contains(typed) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the prompt never took a line:\n{}",
            tmux.screen()
        );
    }
    tmux.run(&["send-keys", "Enter"]);
    tmux.wait_for("back-2", within);

    tmux.type_line("exit 7");
    tmux.wait_for("berth-exit=7", within);
    // The local terminal is sane again: canonical mode and echo are back on.
    tmux.type_line("stty -a | tr ' ' '\\n' | grep -x -e icanon -e echo | sort | tr '\\n' +");
    tmux.wait_for("echo+icanon+", within);
}

#[test]
fn berth_shell_on_a_sandbox_box() {
    if let Some(reason) = e2e_skip_reason() {
        berth_testkit::skip("sandbox", &reason);
        return;
    }
    let daemon = Daemon::start();
    daemon.berth_ok(&["box", "create", "alice"]);
    drive_a_shell(&daemon, "alice", Duration::from_secs(30));
    drive_processes(&daemon, "alice");
}

#[test]
fn berth_shell_on_a_qemu_box() {
    let Some(daemon) = Daemon::start_with_qemu_box("vm1") else {
        return;
    };
    // A TCG guest answers slower; the waits scale, the checks do not.
    drive_a_shell(&daemon, "vm1", Duration::from_secs(120));
    drive_processes(&daemon, "vm1");
}

/// A piped stdin streams through `berth exec` (binary, larger than any one buffer), and a
/// background process outlives the command that started it, its output followed to its
/// exit and its exit an event.
fn drive_processes(daemon: &Daemon, name: &str) {
    let stdin: Vec<u8> = (0..8 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
    let out = daemon.berth_with(
        &["exec", name, "--", "sh", "-c", "md5sum"],
        Some(&stdin),
        &[],
    );
    assert!(out.status.success(), "{}", common::stderr(&out));
    let local = std::process::Command::new("sh")
        .args(["-c", "md5sum"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write as _;
            child.stdin.take().unwrap().write_all(&stdin)?;
            child.wait_with_output()
        })
        .unwrap();
    assert_eq!(
        common::stdout(&out)
            .split_whitespace()
            .take(1)
            .collect::<Vec<_>>(),
        String::from_utf8_lossy(&local.stdout)
            .split_whitespace()
            .take(1)
            .collect::<Vec<_>>(),
        "the box read exactly the bytes sent"
    );

    let id = daemon.berth_ok(&[
        "exec",
        "--background",
        name,
        "--",
        "sh",
        "-c",
        "echo started; while [ ! -e /tmp/done ]; do sleep 0.1; done; echo finished; exit 6",
    ]);
    let id = id.trim();
    assert!(id.starts_with("pr_"), "{id}");
    assert!(daemon.berth_ok(&["process", "ls", name]).contains(id));
    daemon.berth_ok(&["exec", name, "--", "touch", "/tmp/done"]);
    let out = daemon.berth(&["process", "output", name, id]);
    assert_eq!(out.status.code(), Some(6), "{}", common::stderr(&out));
    assert_eq!(common::stdout(&out), "started\nfinished\n");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !daemon.berth_ok(&["logs", name]).contains("process_exit") {
        assert!(Instant::now() < deadline, "no process_exit event");
        std::thread::sleep(Duration::from_millis(200));
    }
}
