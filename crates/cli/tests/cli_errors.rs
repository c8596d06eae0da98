//! The CLI's errors and rough edges, with no daemon (or one that is never reached): each
//! failure is one `berth: …` line that says what to do next, and no command panics.

mod common;

use std::io::Read as _;
use std::process::Stdio;

use common::*;

#[test]
fn unreachable_daemon_is_one_line_with_a_hint() {
    let url = format!("http://127.0.0.1:{}", closed_port());
    for args in [
        &["box", "ls"][..],
        &["exec", "alice", "--", "true"],
        &["box", "create", "alice"],
        &["send", "alice", "hi", "--no-wait"],
        &["send", "alice", "hi"],
        &["logs", "alice"],
        &["template", "ls"],
        &["tenant", "create", "acme"],
    ] {
        let out = berth()
            .args(args)
            .env("BERTH_URL", &url)
            .env("BERTH_API_KEY", "berth_x")
            .output()
            .unwrap();
        assert_one_line_error(&out, 1, &["berth up", &url]);
    }
}

#[test]
fn missing_daemon_files_say_to_run_berth_up() {
    let dir = tempfile::tempdir().unwrap();
    let out = berth()
        .args(["box", "ls", "--data-dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_one_line_error(&out, 1, &["berth up", "BERTH_URL", "berth.url"]);
    // BERTH_DATA_DIR works like --data-dir.
    let out = berth()
        .args(["box", "ls"])
        .env("BERTH_DATA_DIR", dir.path())
        .output()
        .unwrap();
    assert_one_line_error(
        &out,
        1,
        &[&dir.path().join("berth.url").display().to_string()],
    );
}

#[test]
fn bad_cp_specs_are_clear_errors() {
    // Checked before the daemon is looked for: no BERTH_URL needed.
    let out = berth().args(["cp", "a.txt", "b.txt"]).output().unwrap();
    assert_one_line_error(&out, 1, &["NAME:PATH"]);
    let out = berth().args(["cp", "alice:a", "bob:b"]).output().unwrap();
    assert_one_line_error(&out, 1, &["between boxes"]);
    let out = berth()
        .args(["cp", "alice:/home/user/", "out"])
        .output()
        .unwrap();
    assert_one_line_error(&out, 1, &["directory"]);

    let dir = tempfile::tempdir().unwrap();
    let url = format!("http://127.0.0.1:{}", closed_port());
    let out = berth()
        .arg("cp")
        .arg(dir.path())
        .arg("alice:x")
        .env("BERTH_URL", &url)
        .env("BERTH_API_KEY", "berth_x")
        .output()
        .unwrap();
    assert_one_line_error(&out, 1, &["is a directory; copy it with -r"]);
}

#[test]
fn usage_errors_exit_2() {
    let out = berth().args(["exec", "alice"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let out = berth()
        .args(["box", "create", "a", "--pids", "lots"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    for args in [
        &["send", "alice"][..],
        &["logs", "alice", "--after", "x"],
        &["box", "create", "a", "--stop-after", "-3"],
        &["template", "frob"],
        &["tenant", "create"],
    ] {
        let out = berth().args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
    }
}

/// A data dir whose files name a daemon on a closed port: commands find it, and fail only
/// when they call it.
fn unreachable_data_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("http://127.0.0.1:{}\n", closed_port());
    std::fs::write(dir.path().join("berth.url"), url).unwrap();
    std::fs::write(dir.path().join("admin.key"), "berth_x\n").unwrap();
    dir
}

#[test]
fn shell_refuses_a_stdin_that_is_not_a_terminal_at_once() {
    let dir = unreachable_data_dir();
    for args in [
        &["shell", "alice"][..],
        &["exec", "-it", "alice", "--", "sh"],
    ] {
        let out = berth()
            .arg("--data-dir")
            .arg(dir.path())
            .args(args)
            .stdin(Stdio::piped())
            .output()
            .unwrap();
        // Refused before the daemon is called: not the unreachable daemon's error.
        assert_one_line_error(&out, 1, &["not a terminal", "berth exec alice -- CMD"]);
    }
}

#[test]
fn completion_into_a_closed_pipe_ends_quietly() {
    for shell in ["bash", "zsh", "fish"] {
        let mut child = berth()
            .args(["completion", shell])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut first = [0u8; 16];
        child.stdout.take().unwrap().read_exact(&mut first).unwrap();
        // The read end is closed now, as `| head -c 16` does.
        let mut err = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        let status = child.wait().unwrap();
        assert!(err.is_empty(), "{shell}: {err}");
        use std::os::unix::process::ExitStatusExt as _;
        assert!(
            status.success() || status.signal() == Some(libc::SIGPIPE),
            "{shell}: {status:?}"
        );
    }
}
