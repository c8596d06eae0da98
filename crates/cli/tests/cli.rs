//! Runs the built `berth` binary: first what needs no daemon, then (as root, with runc and
//! berth-init) an end-to-end run against a real `berth up`.

use std::fs;
use std::time::Duration;

mod common;

use common::*;

#[test]
fn help_lists_the_commands() {
    let out = berth().arg("--help").output().unwrap();
    assert!(out.status.success());
    let text = stdout(&out);
    for command in [
        "up", "box", "exec", "cp", "send", "logs", "egress", "template", "tenant", "secret",
        "webhook", "mcp", "image", "port", "process", "service",
    ] {
        assert!(
            text.lines().any(|l| l.trim_start().starts_with(command)),
            "{command} missing:\n{text}"
        );
    }
    for var in ["BERTH_URL", "BERTH_API_KEY", "BERTH_DATA_DIR"] {
        assert!(text.contains(var), "{var} missing:\n{text}");
    }
    let out = berth().args(["box", "--help"]).output().unwrap();
    let text = stdout(&out);
    for command in ["create", "ls", "rm", "start", "stop", "show"] {
        assert!(
            text.lines().any(|l| l.trim_start().starts_with(command)),
            "{command} missing:\n{text}"
        );
    }
}

/// `berth image build` with a kernel file that is not one: a one-line error naming it,
/// before anything is downloaded.
#[test]
fn image_build_refuses_a_kernel_that_is_not_one() {
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("vmlinuz");
    std::fs::write(&fake, b"not a kernel").unwrap();
    let out = berth()
        .arg("--data-dir")
        .arg(dir.path())
        .args(["image", "build", "--kernel"])
        .arg(&fake)
        .output()
        .unwrap();
    if stderr(&out).contains("berth-init") {
        berth_testkit::skip("berth-init", stderr(&out));
        return;
    }
    assert_one_line_error(&out, 1, &["kernel", "vmlinuz"]);
}

#[test]
fn version_prints_the_crate_version() {
    let out = berth().arg("--version").output().unwrap();
    assert!(out.status.success());
    assert_eq!(
        stdout(&out).trim(),
        format!("berth {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn end_to_end_box_lifecycle_exec_and_cp() {
    if let Some(reason) = e2e_skip_reason() {
        berth_testkit::skip("sandbox", &reason);
        return;
    }
    let daemon = Daemon::start();
    let printed = fs::read_to_string(&daemon.out).unwrap_or_default();
    assert!(
        printed.contains("admin API key"),
        "the admin key was not printed:\n{}",
        daemon.logs()
    );
    assert!(daemon.dir().join("admin.key").is_file());
    assert!(daemon.dir().join("berth.url").is_file());

    let id = daemon.berth_ok(&["box", "create", "alice"]);
    assert!(id.trim().starts_with("bx_"), "{id}");
    let table = daemon.berth_ok(&["box", "ls"]);
    assert!(
        table.starts_with("NAME") && table.contains("alice"),
        "{table}"
    );

    let out = daemon.berth_ok(&[
        "exec",
        "alice",
        "--",
        "sh",
        "-c",
        "echo hi > ~/a.txt; id -u",
    ]);
    assert_eq!(out.trim(), "1001");

    daemon.berth_ok(&["box", "stop", "alice"]);
    daemon.berth_ok(&["box", "start", "alice"]);
    assert_eq!(
        daemon.berth_ok(&["exec", "alice", "--", "cat", "a.txt"]),
        "hi\n"
    );

    // cp round trip, bytes that are not UTF-8 included.
    let local = tempfile::tempdir().unwrap();
    let src = local.path().join("blob.bin");
    let bytes: Vec<u8> = (0..300_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    fs::write(&src, &bytes).unwrap();
    let src_arg = src.to_str().unwrap();
    daemon.berth_ok(&["cp", src_arg, "alice:blob.bin"]);
    let back = local.path().join("back.bin");
    daemon.berth_ok(&["cp", "alice:/home/user/blob.bin", back.to_str().unwrap()]);
    assert!(fs::read(&back).unwrap() == bytes, "downloaded bytes differ");
    let out = daemon.berth(&["cp", "alice:blob.bin", "-"]);
    assert!(
        out.status.success() && out.stdout == bytes,
        "cp to stdout differs"
    );

    let out = daemon.berth(&["exec", "alice", "--", "sh", "-c", "exit 3"]);
    assert_eq!(out.status.code(), Some(3));
    let out = daemon.berth(&["exec", "alice", "--", "sh", "-c", "echo out; echo err >&2"]);
    assert_eq!(
        (stdout(&out).as_str(), stderr(&out).as_str()),
        ("out\n", "err\n")
    );

    // Exit statuses: signals, timeouts, missing programs.
    let out = daemon.berth(&["exec", "alice", "--", "sh", "-c", "kill -9 $$"]);
    assert_eq!(out.status.code(), Some(137));
    let out = daemon.berth(&["exec", "alice", "--timeout", "1", "--", "sleep", "30"]);
    assert_eq!(out.status.code(), Some(124));
    assert!(stderr(&out).contains("timed out"), "{}", stderr(&out));
    let out = daemon.berth(&["exec", "alice", "--", "no-such-program-here"]);
    assert_one_line_error(&out, 127, &[]);

    // Options reach the box; stdin is passed when it is not a terminal.
    let out = daemon.berth_ok(&[
        "exec",
        "alice",
        "--user",
        "root",
        "--cwd",
        "/tmp",
        "-e",
        "GREETING=hej",
        "--",
        "sh",
        "-c",
        "echo $(id -u) $PWD $GREETING",
    ]);
    assert_eq!(out, "0 /tmp hej\n");
    let out = daemon.berth_with(
        &["exec", "alice", "--", "tr", "a-z", "A-Z"],
        Some(b"hello\n"),
        &[],
    );
    assert_eq!(stdout(&out), "HELLO\n", "{}", stderr(&out));

    let json = daemon.berth_ok(&["box", "show", "alice"]);
    let shown: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(shown["name"], "alice");
    let json = daemon.berth_ok(&["box", "ls", "--json"]);
    let listed: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(listed["boxes"][0]["name"], "alice");

    // Errors from the daemon are one line.
    let out = daemon.berth(&["box", "show", "nobody"]);
    assert_one_line_error(&out, 1, &["nobody"]);
    let out = daemon.berth(&["box", "create", "alice"]);
    assert_one_line_error(&out, 1, &[]);
    let out = daemon.berth(&["box", "create", "Not_A-Name"]);
    assert_one_line_error(&out, 1, &[]);
    let out = daemon.berth_with(&["box", "ls"], None, &[("BERTH_API_KEY", "berth_wrong")]);
    assert_one_line_error(&out, 1, &["BERTH_API_KEY"]);
    let out = daemon.berth(&["cp", "alice:/home/user/nothing-here", "-"]);
    assert_one_line_error(&out, 1, &[]);

    daemon.berth_ok(&["box", "rm", "alice"]);

    // A box left running is stopped by a graceful shutdown.
    daemon.berth_ok(&["box", "create", "bob"]);
    daemon.berth_ok(&["box", "start", "bob"]);
    let mut daemon = daemon;
    let status = daemon.terminate();
    assert!(
        status.is_some_and(|s| s.success()),
        "berth up did not exit cleanly on SIGTERM ({status:?}):\n{}",
        daemon.logs()
    );
    let left = daemon.running_containers();
    assert!(left.is_empty(), "boxes outlived the daemon: {left:?}");
}

/// `berth logs NAME` lines: `(seq, type, summary)`.
/// A template with a service that stays up and one that fails at once.
fn parse_log_lines(text: &str) -> Vec<(u64, String, String)> {
    text.lines()
        .map(|line| {
            let mut parts = line.split_whitespace();
            let seq = parts.next().and_then(|s| s.parse().ok());
            let seq = seq.unwrap_or_else(|| panic!("no seq in log line {line:?}"));
            let kind = parts.next().unwrap_or_default().to_string();
            (seq, kind, parts.collect::<Vec<_>>().join(" "))
        })
        .collect()
}

#[test]
fn end_to_end_send_resume_logs_templates_tenants() {
    if let Some(reason) = e2e_skip_reason() {
        berth_testkit::skip("sandbox", &reason);
        return;
    }
    let daemon = Daemon::start();

    let templates = daemon.berth_ok(&["template", "ls"]);
    assert!(templates.starts_with("NAME"), "{templates}");
    assert!(
        templates.lines().any(|l| l.starts_with("echo ")),
        "no echo template:\n{templates}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&daemon.berth_ok(&["template", "ls", "--json"])).unwrap();
    assert!(json["templates"].as_array().is_some_and(|t| !t.is_empty()));

    daemon.berth_ok(&["box", "create", "bob", "--template", "echo"]);
    let answer = daemon.berth_ok(&["send", "bob", "remember 42"]);
    assert!(answer.contains("42"), "answer: {answer:?}");

    daemon.berth_ok(&["box", "stop", "bob"]);
    daemon.wait_for_box("bob", Duration::from_secs(5), |b| b["state"] == "stopped");
    // The next message wakes the box; the harness resumes its session from the volume.
    let answer = daemon.berth_ok(&["send", "bob", "what did I say?"]);
    assert!(answer.contains("remember 42"), "answer: {answer:?}");

    let timeline = daemon.berth_ok(&["exec", "bob", "--", "sh", "-c", "cat /memory/timeline/*"]);
    for needle in ["remember 42", "what did I say?", "You said: remember 42"] {
        assert!(timeline.contains(needle), "{needle:?} not in:\n{timeline}");
    }

    // The event log: increasing seqs from 1, both turns, their replays and results.
    let logs = parse_log_lines(&daemon.berth_ok(&["logs", "bob"]));
    let seqs: Vec<u64> = logs.iter().map(|(seq, _, _)| *seq).collect();
    assert_eq!(seqs.first(), Some(&1), "{logs:?}");
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "gaps: {seqs:?}");
    let users: Vec<&str> = logs
        .iter()
        .filter(|(_, kind, _)| kind == "user")
        .map(|(_, _, text)| text.as_str())
        .collect();
    assert_eq!(users, ["remember 42", "what did I say?"], "{logs:?}");
    assert_eq!(logs.iter().filter(|(_, k, _)| k == "result").count(), 2);
    // --after and --json.
    let after = seqs[seqs.len() - 2];
    let tail = daemon.berth_ok(&["logs", "bob", "--after", &after.to_string(), "--json"]);
    let tail: Vec<serde_json::Value> = tail
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(tail.len(), 1, "{tail:?}");
    assert_eq!(tail[0]["seq"], after + 1);

    // --no-wait returns once the message is stored; the same --id is the same message.
    let posted = daemon.berth_ok(&["send", "bob", "hi again", "--id", "k-1", "--no-wait"]);
    assert!(posted.contains("(seq "), "{posted}");
    let again = daemon.berth_ok(&["send", "bob", "hi again", "--id", "k-1", "--no-wait"]);
    assert_eq!(posted, again);
    let out = daemon.berth(&["send", "bob", "something else", "--id", "k-1", "--no-wait"]);
    assert_one_line_error(&out, 1, &[]);

    // `logs -f` prints stored events, then follows new ones live; SIGINT ends it with 0.
    let mut follow = Follower::spawn(&daemon, &["logs", "bob", "-f"]);
    follow.wait_for_line(|l| l.contains("hi again"));
    daemon.berth_ok(&["send", "bob", "follow me", "--no-wait"]);
    follow.wait_for_line(|l| l.contains("result") && l.contains("echo: follow me"));
    assert_eq!(follow.interrupt(), Some(0));
    drop(follow);

    // A harness that dies mid-turn fails the send (exit 1); it is restarted for the next.
    let out = daemon.berth(&["send", "bob", "crash"]);
    assert_one_line_error(&out, 1, &["exited with status 3"]);
    let answer = daemon.berth_ok(&["send", "bob", "still there?"]);
    assert_eq!(answer, "echo: still there?\n");
    // Sent while an earlier turn is still being answered: only our own answer is printed.
    daemon.berth_ok(&["send", "bob", "sleep 1500", "--no-wait"]);
    let answer = daemon.berth_ok(&["send", "bob", "after the nap"]);
    assert_eq!(answer, "echo: after the nap\n");

    // An idle box is reclaimed (stopped, volume kept) after its idle timeout.
    daemon.berth_ok(&[
        "box",
        "create",
        "sleepy",
        "--template",
        "echo",
        "--stop-after",
        "2",
    ]);
    let answer = daemon.berth_ok(&["send", "sleepy", "remember 7"]);
    assert!(answer.contains('7'), "{answer:?}");
    daemon.wait_for_box("sleepy", Duration::from_secs(30), |b| {
        b["state"] == "stopped"
    });
    let answer = daemon.berth_ok(&["send", "sleepy", "what did I say?"]);
    assert!(answer.contains("remember 7"), "{answer:?}");

    // Errors are one line: a box without a harness, an unknown box.
    daemon.berth_ok(&["box", "create", "plain"]);
    let out = daemon.berth(&["send", "plain", "hi"]);
    assert_one_line_error(&out, 1, &[]);
    let out = daemon.berth(&["send", "nobody", "hi"]);
    assert_one_line_error(&out, 1, &["nobody"]);
    let out = daemon.berth(&["logs", "nobody"]);
    assert_one_line_error(&out, 1, &["nobody"]);

    // Templates: a bad user file is reported with its line, the good one loads.
    let dir = daemon.dir().join("templates");
    fs::create_dir_all(&dir).unwrap();
    fs::write(
        dir.join("mine.toml"),
        "name = \"mine\"\nbase = \"host\"\nstop_after_s = 60\n",
    )
    .unwrap();
    fs::write(dir.join("broken.toml"), "name = \"broken\"\nbase = = 1\n").unwrap();
    let out = daemon.berth(&["template", "reload"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("broken.toml:2"), "{}", stderr(&out));
    let templates = daemon.berth_ok(&["template", "ls"]);
    assert!(
        templates.lines().any(|l| l.starts_with("mine ")),
        "{templates}"
    );
    assert!(!templates.contains("broken"), "{templates}");

    // Tenants: the key is printed once and sees only the tenant's own boxes.
    let created = daemon.berth_ok(&["tenant", "create", "acme"]);
    let key = created
        .split_whitespace()
        .find(|w| w.starts_with("berth_"))
        .unwrap_or_else(|| panic!("no key in {created:?}"));
    assert!(created.contains("tn_"), "{created}");
    let theirs = daemon.berth_with(&["box", "ls"], None, &[("BERTH_API_KEY", key)]);
    assert!(theirs.status.success(), "{}", stderr(&theirs));
    assert!(!stdout(&theirs).contains("bob"), "{}", stdout(&theirs));
    let out = daemon.berth_with(&["logs", "bob"], None, &[("BERTH_API_KEY", key)]);
    assert_one_line_error(&out, 1, &[]);
    let out = daemon.berth_with(&["tenant", "create", "x"], None, &[("BERTH_API_KEY", key)]);
    assert_one_line_error(&out, 1, &[]);

    let mut daemon = daemon;
    let status = daemon.terminate();
    assert!(status.is_some_and(|s| s.success()), "{}", daemon.logs());
    let left = daemon.running_containers();
    assert!(left.is_empty(), "boxes outlived the daemon: {left:?}");
}

#[test]
fn secrets_set_from_stdin_list_and_remove() {
    if let Some(reason) = e2e_skip_reason() {
        berth_testkit::skip("sandbox", &reason);
        return;
    }
    let daemon = Daemon::start();
    let value = "sk-cli-SENTINEL-0c1d2e";
    let set = |stdin: &[u8]| daemon.berth_with(&["secret", "set", "anthropic"], Some(stdin), &[]);
    let out = set(format!("{value}\n").as_bytes());
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "secret anthropic created\n");
    let out = set(format!("{value}-2\r\n").as_bytes());
    assert_eq!(
        stdout(&out),
        "secret anthropic replaced\n",
        "{}",
        stderr(&out)
    );
    let file = daemon.dir().join("gh.token");
    fs::write(&file, "ghp_file\n").unwrap();
    daemon.berth_ok(&[
        "secret",
        "set",
        "github",
        "--from-file",
        file.to_str().unwrap(),
    ]);

    let listed = daemon.berth_ok(&["secret", "ls"]);
    let lines: Vec<&str> = listed.lines().collect();
    assert_eq!(lines.len(), 3, "{listed}");
    assert!(
        lines[0].starts_with("NAME") && lines[0].contains("UPDATED"),
        "{listed}"
    );
    assert!(
        lines[1].starts_with("anthropic ") && lines[2].starts_with("github "),
        "{listed}"
    );
    let json = daemon.berth_ok(&["secret", "ls", "--json"]);
    assert!(!listed.contains("SENTINEL") && !json.contains("SENTINEL") && !json.contains("ghp_"));

    // An empty value and a bad one are one-line errors that do not echo the value.
    let out = set(b"\n");
    assert_one_line_error(&out, 1, &["empty"]);
    let out = set(b"SENTINEL\x07bell\n");
    assert_one_line_error(&out, 1, &["visible ASCII"]);
    assert!(!stderr(&out).contains("SENTINEL"));

    assert_eq!(
        daemon.berth_ok(&["secret", "rm", "anthropic"]),
        "secret anthropic deleted\n"
    );
    let out = daemon.berth(&["secret", "rm", "anthropic"]);
    assert_one_line_error(&out, 1, &["no secret named \"anthropic\""]);
    assert!(!daemon.berth_ok(&["secret", "ls"]).contains("anthropic"));
}

/// The daemon offers qemu: `berth image build` makes the images (reused from
/// `$BERTH_TEST_IMAGE_DIR`, default /var/tmp/berth-test-images, as the runtime's tests do),
/// a restarted daemon finds them, and a `minimal` box boots its own kernel with a
/// read-only root and a persistent, writable home; `box rm` leaves no VM process.
#[test]
fn end_to_end_a_qemu_box_from_the_cli() {
    if let Some(reason) = e2e_skip_reason() {
        berth_testkit::skip("sandbox", &reason);
        return;
    }
    let daemon = Daemon::start();
    let listed = daemon.berth_ok(&["runtime", "ls"]);
    let qemu_line = listed.lines().find(|l| l.starts_with("qemu")).unwrap();
    assert!(
        qemu_line.contains("no") && qemu_line.contains("run `berth image build`"),
        "{listed}"
    );

    // The running daemon notices the build: no restart needed.
    if daemon.offer_qemu().is_none() {
        return;
    }

    daemon.berth_ok(&[
        "box",
        "create",
        "vm1",
        "--runtime",
        "qemu",
        "--template",
        "minimal",
    ]);
    let shown = daemon.berth_ok(&["box", "ls", "--json"]);
    assert!(shown.contains("\"runtime\": \"qemu\""), "{shown}");

    let host = std::process::Command::new("uname")
        .arg("-r")
        .output()
        .unwrap();
    let guest = daemon.berth_ok(&["exec", "vm1", "--", "uname", "-r"]);
    let host = stdout(&host);
    assert!(!guest.trim().is_empty());
    assert_ne!(guest.trim(), host.trim(), "the box runs the host's kernel");
    assert!(
        guest.contains("cloud"),
        "not Debian's cloud kernel: {guest}"
    );

    let cmdline = daemon.berth_ok(&["exec", "vm1", "--", "cat", "/proc/cmdline"]);
    assert!(cmdline.contains("rdinit="), "{cmdline}");

    let mounts = daemon.berth_ok(&["exec", "vm1", "--", "cat", "/proc/mounts"]);
    let options = |point: &str| -> Vec<String> {
        mounts
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .filter(|f| f.len() > 3 && f[1] == point)
            .map(|f| f[3].to_owned())
            .collect()
    };
    let root = options("/");
    assert!(
        root.last().is_some_and(|o| o.split(',').any(|x| x == "ro")),
        "/ is not read-only: {mounts}"
    );
    let home = options("/home/user");
    assert!(
        home.last().is_some_and(|o| o.split(',').any(|x| x == "rw")),
        "/home/user is not writable: {mounts}"
    );

    daemon.berth_ok(&[
        "exec",
        "vm1",
        "--",
        "sh",
        "-c",
        "echo kept > /home/user/kept.txt",
    ]);
    daemon.berth_ok(&["box", "stop", "vm1"]);
    // The volume as `box show` sees it: the image's size, the free space its file system
    // recorded at the stop, the host disk it takes (sparse: far below its size).
    let shown: serde_json::Value =
        serde_json::from_str(&daemon.berth_ok(&["box", "show", "vm1"])).unwrap();
    let volume = &shown["volume"];
    let size = volume["size_mib"]
        .as_u64()
        .unwrap_or_else(|| panic!("{shown}"));
    assert_eq!(Some(size), shown["disk_mib"].as_u64(), "{shown}");
    let free = volume["free_mib"].as_u64().unwrap();
    assert!(free > 0 && free < size, "{shown}");
    assert!(
        volume["allocated_mib"].as_u64().unwrap() < size / 2,
        "{shown}"
    );
    assert_eq!(
        daemon.berth_ok(&["exec", "vm1", "--", "cat", "/home/user/kept.txt"]),
        "kept\n"
    );

    // A layer on a VM: its mount point is added to (a copy of) the read-only image; a
    // target under a symlink of the image is refused before the boot, with the reason.
    let skills = daemon.dir().join("skills-src");
    fs::create_dir_all(&skills).unwrap();
    fs::write(skills.join("SKILL.md"), "# a skill\n").unwrap();
    fs::create_dir_all(daemon.dir().join("templates")).unwrap();
    for (name, target) in [("skills", "/opt/skills"), ("blocked", "/linuxrc/skills")] {
        fs::write(
            daemon.dir().join(format!("templates/{name}.toml")),
            format!(
                "name = \"{name}\"\nbase = \"minimal\"\n\n[[layers]]\nsource = \"{}\"\ntarget = \"{target}\"\n",
                skills.display()
            ),
        )
        .unwrap();
    }
    daemon.berth_ok(&["template", "reload"]);
    daemon.berth_ok(&[
        "box",
        "create",
        "vm2",
        "--runtime",
        "qemu",
        "--template",
        "skills",
    ]);
    assert_eq!(
        daemon.berth_ok(&["exec", "vm2", "--", "cat", "/opt/skills/SKILL.md"]),
        "# a skill\n"
    );
    let refused = daemon.berth(&["exec", "vm2", "--", "touch", "/opt/skills/x"]);
    assert!(!refused.status.success(), "the layer is writable");
    daemon.berth_ok(&["box", "rm", "vm2"]);
    let created = daemon.berth(&[
        "box",
        "create",
        "vm3",
        "--runtime",
        "qemu",
        "--template",
        "blocked",
    ]);
    let out = if created.status.success() {
        daemon.berth(&["exec", "vm3", "--", "true"])
    } else {
        created
    };
    assert!(!out.status.success(), "a layer under a symlink booted");
    assert!(
        stderr(&out).contains("/linuxrc is a symlink in the rootfs image"),
        "{}",
        stderr(&out)
    );
    daemon.berth_ok(&["box", "rm", "vm3"]);

    let data = daemon.dir().to_string_lossy().into_owned();
    let running: Vec<String> = processes_naming(&data)
        .into_iter()
        .map(|(_, c)| c)
        .collect();
    assert!(
        running.iter().any(|p| p.contains("qemu-system")),
        "no QEMU names the data dir while the box runs: {running:?}"
    );
    daemon.berth_ok(&["box", "rm", "vm1"]);
    let left: Vec<String> = processes_naming(&data)
        .into_iter()
        .map(|(_, c)| c)
        .filter(|p| p.contains("qemu") || p.contains(" bridge --serial "))
        .collect();
    assert!(left.is_empty(), "left running after box rm: {left:?}");
}
