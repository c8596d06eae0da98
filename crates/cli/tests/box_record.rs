//! The box record from the CLI (`box create --label/--env`, `box set`, `box ls --label
//! --state`, the RUNTIME and LABELS columns), `--json` on the commands that print, and
//! `berth completion`: the built `berth` binary, against a real `berth up` where a daemon
//! is needed (as root, with runc and berth-init).

use std::process::Command;

use serde_json::Value;

mod common;

use common::*;

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text:?}"))
}

/// Lines of NDJSON.
fn json_lines(text: &str) -> Vec<Value> {
    text.lines().map(json).collect()
}

/// The completion script for `shell`, checked to be what that shell loads.
fn completion(shell: &str) -> String {
    let out = berth().args(["completion", shell]).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let script = stdout(&out);
    for word in ["berth", "box", "completion"] {
        assert!(script.contains(word), "{shell}: {word} missing");
    }
    script
}

/// Runs `shell` with `args` (the script on a file), or `None` when it is not installed.
fn shell_runs(shell: &str, script: &str, check: &str) -> Option<std::process::Output> {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("berth.completion");
    std::fs::write(&file, script).unwrap();
    let check = check.replace("FILE", file.to_str().unwrap());
    match Command::new(shell).args(["-c", &check]).output() {
        Ok(out) => Some(out),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => panic!("{shell}: {e}"),
    }
}

#[test]
fn bash_completion_registers_berth_and_completes_subcommands() {
    let script = completion("bash");
    // Loaded into a real bash, it completes `berth bo` to `box`.
    let out = shell_runs(
        "bash",
        &script,
        "source FILE && complete -p berth && COMP_WORDS=(berth bo) && COMP_CWORD=1 \
         && COMP_LINE='berth bo' && COMP_POINT=8 && _berth berth bo berth \
         && printf '%s\\n' \"${COMPREPLY[@]}\"",
    )
    .expect("bash runs the tests");
    let text = stdout(&out);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(text.contains("-F _berth berth"), "{text}");
    assert!(text.lines().any(|l| l == "box"), "{text}");
}

#[test]
fn zsh_and_fish_completion_scripts_parse() {
    let zsh = completion("zsh");
    assert!(zsh.starts_with("#compdef berth"), "{zsh:.80}");
    let fish = completion("fish");
    assert!(fish.contains("complete -c berth"), "{fish:.200}");
    for (shell, script, check) in [
        ("zsh", &zsh, "zsh -n FILE"),
        ("fish", &fish, "fish -n FILE"),
    ] {
        let check = check.replace("zsh ", "").replace("fish ", "");
        let Some(out) = shell_runs(shell, script, &format!("{shell} {check}")) else {
            berth_testkit::skip(
                shell,
                format!("{shell} is not installed: its script is not parsed"),
            );
            continue;
        };
        assert!(out.status.success(), "{shell}: {}", stderr(&out));
    }
}

#[test]
fn completion_needs_a_known_shell() {
    let out = berth().args(["completion", "tcsh"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let out = berth().args(["box", "set", "alice"]).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "nothing to change: {}",
        stderr(&out)
    );
}

#[test]
fn end_to_end_labels_env_set_filters_and_json() {
    if let Some(reason) = e2e_skip_reason() {
        berth_testkit::skip("sandbox", &reason);
        return;
    }
    let daemon = Daemon::start();
    let created = json(&daemon.berth_ok(&[
        "box",
        "create",
        "alice",
        "--label",
        "team=red",
        "--env",
        "GREETING=hi there",
        "--json",
    ]));
    assert_eq!(created["labels"], serde_json::json!({"team": "red"}));
    assert_eq!(created["env"], serde_json::json!({"GREETING": "hi there"}));
    let id = daemon.berth_ok(&["box", "create", "bob", "--stop-after", "2m"]);
    assert!(id.trim().starts_with("bx_"), "{id}");

    // The table has the runtime and the labels; the filters select.
    let table = daemon.berth_ok(&["box", "ls"]);
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[0].contains("RUNTIME") && lines[0].ends_with("LABELS"),
        "{table}"
    );
    assert!(
        lines[1].starts_with("alice ")
            && lines[1].contains(" sandbox ")
            && lines[1].ends_with("team=red"),
        "{table}"
    );
    let only_red = daemon.berth_ok(&["box", "ls", "--label", "team=red"]);
    assert_eq!(only_red.lines().count(), 2, "{only_red}");

    // The env reaches exec; the exec's own wins.
    assert_eq!(
        daemon.berth_ok(&["exec", "alice", "--", "sh", "-c", "echo $GREETING"]),
        "hi there\n"
    );
    assert_eq!(
        daemon.berth_ok(&[
            "exec",
            "alice",
            "--env",
            "GREETING=mine",
            "--",
            "sh",
            "-c",
            "echo $GREETING"
        ]),
        "mine\n"
    );
    let running = json(&daemon.berth_ok(&["box", "ls", "--state", "running", "--json"]));
    let names: Vec<&str> = running["boxes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["alice"]);

    // `box set` changes single keys; limits wait for the next start.
    let changed = json(&daemon.berth_ok(&[
        "box",
        "set",
        "alice",
        "--label",
        "tier=1",
        "--unlabel",
        "team",
        "--env",
        "X=1",
        "--stop-after",
        "30m",
        "--pids",
        "100",
        "--json",
    ]));
    assert_eq!(changed["labels"], serde_json::json!({"tier": "1"}));
    assert_eq!(
        changed["env"],
        serde_json::json!({"GREETING": "hi there", "X": "1"})
    );
    assert_eq!(changed["stop_after_s"], 1800);
    assert_eq!(changed["pending_limits"]["pids"], 100);
    let said = daemon.berth_ok(&["box", "set", "alice", "--unset-env", "GREETING"]);
    assert!(
        said.starts_with("alice (bx_") && said.contains("limits at the next start"),
        "{said}"
    );
    assert_eq!(
        daemon.berth_ok(&["exec", "alice", "--", "sh", "-c", "echo ${GREETING-unset}"]),
        "unset\n"
    );

    // Bad input: one line, exit 1 (the daemon's 400) or 2 (usage).
    let out = daemon.berth(&["box", "set", "alice", "--env", "1X=v"]);
    assert_one_line_error(&out, 1, &["1X"]);
    let out = daemon.berth(&["box", "ls", "--state", "asleep"]);
    assert_one_line_error(&out, 1, &["state"]);
    let out = daemon.berth(&["box", "set", "alice", "--stop-after", "soon"]);
    assert_eq!(out.status.code(), Some(2));

    // `exec --json`: the daemon's frames, one a line, ending with the exit; the status is
    // still the command's.
    let out = daemon.berth(&[
        "exec",
        "alice",
        "--json",
        "--",
        "sh",
        "-c",
        "echo out; exit 3",
    ]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let frames = json_lines(&stdout(&out));
    assert_eq!(frames.first().unwrap()["type"], "started", "{frames:?}");
    assert_eq!(frames.last().unwrap()["type"], "exit", "{frames:?}");
    assert!(frames.iter().any(|f| f["type"] == "stdout"), "{frames:?}");

    // The lifecycle commands print the box.
    let stopped = json(&daemon.berth_ok(&["box", "stop", "alice", "--json"]));
    assert_eq!(stopped["state"], "stopped");
    let started = json(&daemon.berth_ok(&["box", "start", "alice", "--json"]));
    assert_eq!(
        (&started["state"], &started["limits"]["pids"]),
        (&Value::from("running"), &Value::from(100))
    );
    assert!(started.get("pending_limits").is_none(), "{started}");
    let shown = json(&daemon.berth_ok(&["box", "show", "alice", "--json"]));
    assert_eq!(shown["id"], created["id"]);
    let removed = json(&daemon.berth_ok(&["box", "rm", "bob", "--json"]));
    assert_eq!(removed, serde_json::json!({"removed": "bob"}));
}

#[test]
fn end_to_end_send_and_secrets_print_json() {
    if let Some(reason) = e2e_skip_reason() {
        berth_testkit::skip("sandbox", &reason);
        return;
    }
    let daemon = Daemon::start();
    daemon.berth_ok(&["box", "create", "bob", "--template", "echo"]);
    let events = json_lines(&daemon.berth_ok(&["send", "bob", "remember 42", "--json"]));
    let last = events.last().unwrap();
    assert_eq!(last["type"], "result", "{events:?}");
    assert!(
        last["data"]["result"].as_str().unwrap().contains("42"),
        "{last}"
    );
    assert!(events
        .windows(2)
        .all(|w| w[0]["seq"].as_u64() < w[1]["seq"].as_u64()));
    let posted = json(&daemon.berth_ok(&["send", "bob", "later", "--no-wait", "--json"]));
    assert!(
        posted["id"].is_string() && posted["seq"].is_u64(),
        "{posted}"
    );

    let out = daemon.berth_with(
        &["secret", "set", "gh", "--json"],
        Some(b"ghp_SENTINEL\n"),
        &[],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let set = json(&stdout(&out));
    assert_eq!(set["name"], "gh");
    assert!(!stdout(&out).contains("SENTINEL"));
    let removed = json(&daemon.berth_ok(&["secret", "rm", "gh", "--json"]));
    assert_eq!(removed, serde_json::json!({"deleted": "gh"}));
    let reloaded = json(&daemon.berth_ok(&["template", "reload", "--json"]));
    assert!(reloaded["templates"].is_array(), "{reloaded}");

    // Keys: the daemon's answers, and what the CLI did where the daemon says nothing.
    daemon.berth_ok(&["tenant", "create", "acme"]);
    let added = json(&daemon.berth_ok(&["tenant", "key", "add", "acme", "--json"]));
    let old = added["key"]["id"].as_str().unwrap().to_owned();
    let rotated = json(&daemon.berth_ok(&[
        "tenant",
        "key",
        "rotate",
        "acme",
        &old,
        "--revoke-old",
        "--json",
    ]));
    assert_eq!(rotated["revoked_old"], true, "{rotated}");
    assert!(rotated["api_key"].is_string(), "{rotated}");
    let new = rotated["key"]["id"].as_str().unwrap();
    let revoked = json(&daemon.berth_ok(&["tenant", "key", "rm", "acme", new, "--json"]));
    // No browser signed in with it: none ended.
    assert_eq!(
        revoked,
        serde_json::json!({ "revoked": new, "web_sessions_ended": 0 })
    );
}

/// The limit of the cgroup an exec runs in (berth-init's box cgroup: exactly the box's
/// `pids`), on cgroup v1 or v2.
const PIDS_MAX: &str = "g=$(sed -n 's/^[0-9]*:pids://p' /proc/self/cgroup); \
                        if [ -n \"$g\" ]; then cat /sys/fs/cgroup/pids$g/pids.max; \
                        else cat /sys/fs/cgroup$(sed -n 's/^0:://p' /proc/self/cgroup)/pids.max; fi";

/// On a microVM: the box's env reaches exec, changed limits reach the guest at the next
/// start, and a box watched by `berth logs -f` (an open event stream) still idles out,
/// the follower seeing it stop.
#[test]
fn end_to_end_the_record_on_a_qemu_box() {
    let Some(daemon) = Daemon::start_offering_qemu() else {
        return;
    };
    // Built already (from the shared cache): a rebuild reuses every piece and says where.
    let built = json(&daemon.berth_ok(&["image", "build", "--json"]));
    for piece in ["kernel", "initramfs"] {
        assert!(built[piece].is_string(), "{piece}: {built}");
    }
    assert!(built["rootfs"]["minimal"].is_string(), "{built}");
    daemon.berth_ok(&[
        "box",
        "create",
        "vm",
        "--runtime",
        "qemu",
        "--template",
        "minimal",
        "--env",
        "GREETING=from the record",
        "--pids",
        "100",
    ]);
    assert_eq!(
        daemon.berth_ok(&["exec", "vm", "--", "sh", "-c", "echo $GREETING"]),
        "from the record\n"
    );
    assert_eq!(
        daemon.berth_ok(&["exec", "vm", "--", "sh", "-c", PIDS_MAX]),
        "100\n"
    );
    let changed = json(&daemon.berth_ok(&["box", "set", "vm", "--pids", "200", "--json"]));
    assert_eq!(changed["pending_limits"]["pids"], 200, "{changed}");
    daemon.berth_ok(&["box", "stop", "vm"]);
    assert_eq!(
        daemon.berth_ok(&["exec", "vm", "--", "sh", "-c", PIDS_MAX]),
        "200\n"
    );

    // Watched, and idle for its (now short) timeout: reclaimed all the same.
    let mut follower = Follower::spawn(&daemon, &["logs", "vm", "-f", "--json"]);
    daemon.berth_ok(&["box", "set", "vm", "--stop-after", "2s"]);
    daemon.wait_for_box("vm", std::time::Duration::from_secs(60), |b| {
        b["state"] == "stopped"
    });
    follower.wait_for_line(|line| {
        let event = json(line);
        event["type"] == "state" && event["data"]["state"] == "stopped"
    });
    assert_eq!(follower.interrupt(), Some(0));
}
