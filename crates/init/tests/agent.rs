//! Runs the real `berth-init` binary (as root, not as PID 1) with `--run-dir` in a temp
//! directory and talks to it with the host's own client, `berth_runtime::GuestClient`.

use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use berth_protocol::guest::{
    BoxUser, Environment, ExecFrame, ExecRequest, FileKind, FileQuery, BOX_USER_UID,
};
use berth_protocol::ErrorCode;
use berth_runtime::{BootToken, GuestAddr, GuestClient, GuestError};
use bytes::Bytes;

/// One running agent; killed and cleaned up on drop.
struct Agent {
    child: Child,
    dir: tempfile::TempDir,
    token: BootToken,
    client: GuestClient,
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Agent {
    fn start() -> Agent {
        // Not the box's ports: tests run side by side on the host's loopback.
        Agent::start_with(|_| {}, ["127.0.0.1:0", "127.0.0.1:0"])
    }

    /// Starts an agent after `prepare` ran on its run dir, with the egress listeners at
    /// `egress` (TLS, proxy).
    fn start_with(prepare: impl FnOnce(&Path), egress: [&str; 2]) -> Agent {
        let dir = tempfile::tempdir().unwrap();
        // The box user must be able to reach its home inside the temp dir.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let run = dir.path().join("run");
        let home = dir.path().join("home");
        std::fs::create_dir(&run).unwrap();
        std::fs::create_dir(&home).unwrap();
        std::os::unix::fs::chown(&home, Some(BOX_USER_UID), Some(BOX_USER_UID)).unwrap();
        let mut random = [0u8; 32];
        std::fs::File::open("/dev/urandom")
            .unwrap()
            .read_exact(&mut random)
            .unwrap();
        let token = BootToken::from_random(random);
        std::fs::write(run.join("token"), token.as_str()).unwrap();
        prepare(&run);
        let child = Command::new(env!("CARGO_BIN_EXE_berth-init"))
            .arg("--run-dir")
            .arg(&run)
            .arg("--home")
            .arg(&home)
            .arg("--memory")
            .arg(dir.path().join("memory"))
            // Not the host's /var/lib/berth: the agent journals its events there.
            .arg("--state-dir")
            .arg(dir.path().join("state"))
            .args(["--egress-tls", egress[0], "--egress-proxy", egress[1]])
            .spawn()
            .unwrap();
        let socket = run.join("agent.sock");
        let client = GuestClient::new(GuestAddr::Unix(socket.clone()), token.clone());
        let mut agent = Agent {
            child,
            dir,
            token,
            client,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !socket.exists() {
            assert!(
                agent.child.try_wait().unwrap().is_none(),
                "berth-init exited during boot"
            );
            assert!(
                Instant::now() < deadline,
                "berth-init did not listen in time"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        agent
    }

    fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    fn socket(&self) -> PathBuf {
        self.dir.path().join("run/agent.sock")
    }

    fn query(&self, rel: &str, user: BoxUser) -> FileQuery {
        FileQuery {
            path: self.home().join(rel).to_string_lossy().into_owned(),
            user,
            ..Default::default()
        }
    }

    /// Sends one raw HTTP request and returns the whole answer.
    fn raw(&self, head: &str) -> String {
        let mut stream = std::os::unix::net::UnixStream::connect(self.socket()).unwrap();
        stream.write_all(head.as_bytes()).unwrap();
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer);
        answer
    }
}

#[derive(Debug, Default)]
struct Outcome {
    pid: Option<u32>,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    exit: Option<(Option<i32>, Option<i32>, bool)>,
    error: Option<ErrorCode>,
}

async fn run(client: &GuestClient, req: ExecRequest) -> Outcome {
    let mut stream = client.exec(&req).await.unwrap();
    let mut out = Outcome::default();
    while let Some(frame) = stream.next_frame().await.unwrap() {
        assert!(
            out.exit.is_none() && out.error.is_none(),
            "a frame after the last one: {frame:?}"
        );
        match frame {
            ExecFrame::Started { pid } => out.pid = Some(pid),
            ExecFrame::Stdout { data } => out.stdout.extend(data),
            ExecFrame::Stderr { data } => out.stderr.extend(data),
            ExecFrame::Exit {
                code,
                signal,
                timed_out,
            } => out.exit = Some((code, signal, timed_out)),
            ExecFrame::Error { code, .. } => out.error = Some(code),
            ExecFrame::Unknown => panic!("unknown frame"),
        }
    }
    out
}

fn sh(script: &str) -> ExecRequest {
    ExecRequest {
        argv: vec!["sh".into(), "-c".into(), script.into()],
        ..Default::default()
    }
}

fn remote_code(err: GuestError) -> (u16, ErrorCode) {
    match err {
        GuestError::Remote { status, body } => (status, body.error.code),
        other => panic!("expected an error answer, got {other:?}"),
    }
}

fn gone(pid: u32) -> bool {
    // SAFETY: signal 0 only checks for existence.
    unsafe { libc::kill(pid as i32, 0) != 0 }
}

#[tokio::test]
async fn info_reports_the_boot() {
    let agent = Agent::start();
    let info = agent.client.info().await.unwrap();
    assert_eq!(info.protocol_version, berth_protocol::PROTOCOL_VERSION);
    assert_eq!(info.agent_version, env!("CARGO_PKG_VERSION"));
    assert_eq!(info.boot_id.len(), 32);
    assert_eq!(info.environment, Environment::Sandbox);
    let phases: Vec<_> = info.phases.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        phases,
        ["mount", "seal", "volume", "egress", "harness", "serve"]
    );
    // The token file is consumed at boot.
    assert!(!agent.dir.path().join("run/token").exists());
    let mode = std::fs::metadata(agent.socket())
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
}

#[tokio::test]
async fn calls_need_the_token_and_a_known_version() {
    let agent = Agent::start();
    let wrong = GuestClient::new(
        GuestAddr::Unix(agent.socket()),
        BootToken::from_random([7; 32]),
    );
    assert_eq!(
        remote_code(wrong.info().await.unwrap_err()),
        (401, ErrorCode::Unauthorized)
    );
    let answer = agent.raw("GET /v1/info HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    let head = format!(
        "GET /v1/info HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {}\r\nberth-protocol: 0\r\nconnection: close\r\n\r\n",
        agent.token.as_str()
    );
    let answer = agent.raw(&head);
    assert!(
        answer.starts_with("HTTP/1.1 400") && answer.contains("invalid_request"),
        "{answer}"
    );
    let head = format!(
        "PUT /v1/files?path=/tmp/big HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {}\r\ncontent-length: 300000000\r\nconnection: close\r\n\r\n",
        agent.token.as_str()
    );
    let answer = agent.raw(&head);
    assert!(
        answer.starts_with("HTTP/1.1 413") && answer.contains("payload_too_large"),
        "{answer}"
    );
}

#[tokio::test]
async fn exec_runs_sealed_as_the_box_user() {
    let agent = Agent::start();
    let out = run(&agent.client, sh("echo hi; id -u")).await;
    assert!(out.pid.is_some());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hi\n1001\n");
    assert_eq!(out.exit, Some((Some(0), None, false)));
    let out = run(&agent.client, sh("pwd; echo $HOME $USER; id -G; grep -E '^(CapEff|CapBnd|CapInh|NoNewPrivs|Seccomp):' /proc/self/status")).await;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let home = agent.home().to_string_lossy().into_owned();
    assert!(
        text.starts_with(&format!("{home}\n{home} user\n1001\n")),
        "{text}"
    );
    assert!(text.contains("CapEff:\t0000000000000000"), "{text}");
    assert!(text.contains("CapInh:\t0000000000000000"), "{text}");
    assert!(text.contains("CapBnd:\t0000000000000000"), "{text}");
    assert!(text.contains("NoNewPrivs:\t1"), "{text}");
    assert!(text.contains("Seccomp:\t2"), "{text}");
    // The user filter refuses new user namespaces (unshare and clone) with EPERM.
    let out = run(&agent.client, sh("unshare --user true 2>&1; echo rc=$?")).await;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        text.contains("Operation not permitted") && !text.contains("rc=0"),
        "{text}"
    );
    // clone3 is ENOSYS (libc falls back to clone), keyctl is EPERM; root has neither rule.
    if Path::new("/usr/bin/python3").exists() {
        let probe = "import ctypes; l = ctypes.CDLL(None, use_errno=True); \
            r = l.syscall(435, 0, 0); a = ctypes.get_errno(); \
            k = l.syscall(250, 0, -3, 0); print(r, a, k, ctypes.get_errno())";
        let req = ExecRequest {
            argv: vec!["python3".into(), "-c".into(), probe.into()],
            ..Default::default()
        };
        let out = run(&agent.client, req.clone()).await;
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!("-1 {} -1 {}\n", libc::ENOSYS, libc::EPERM)
        );
        let out = run(
            &agent.client,
            ExecRequest {
                user: BoxUser::Root,
                ..req
            },
        )
        .await;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(!text.ends_with(&format!("-1 {}\n", libc::EPERM)), "{text}");
    } else {
        berth_testkit::skip("python3", "no python3 to probe clone3 and keyctl");
    }
    // Root keeps root and gets no extra filter.
    let mut req = sh("id -u; pwd");
    req.user = BoxUser::Root;
    let out = run(&agent.client, req).await;
    assert_eq!(String::from_utf8_lossy(&out.stdout), format!("0\n{home}\n"));
}

/// A loopback port nobody listens on right now (the kernel's pick; released at once).
fn free_port() -> String {
    let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    probe.local_addr().unwrap().to_string()
}

#[tokio::test]
async fn egress_forwards_to_the_run_dir_socket_and_processes_get_the_box_env() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let ports = [free_port(), free_port()];
    let mut gateway = None;
    let agent = Agent::start_with(
        |run| {
            std::fs::write(
                run.join("env.json"),
                r#"{"ANTHROPIC_API_KEY":"berth-ph-test","LANG":"box"}"#,
            )
            .unwrap();
            let listener = std::os::unix::net::UnixListener::bind(run.join("egress.sock"));
            gateway = Some(listener.unwrap());
        },
        [&ports[0], &ports[1]],
    );
    assert!(!agent.dir.path().join("run/env.json").exists());

    let mut req = sh("env");
    req.env.insert("LANG".into(), "own".into());
    let out = run(&agent.client, req).await;
    let env = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = env.lines().collect();
    for wanted in [
        "ANTHROPIC_API_KEY=berth-ph-test",
        "LANG=own",
        "HTTPS_PROXY=http://127.0.0.1:3128",
        "https_proxy=http://127.0.0.1:3128",
        "NO_PROXY=localhost,127.0.0.1",
        "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
    ] {
        assert!(lines.contains(&wanted), "{wanted} missing from {env}");
    }
    assert!(!lines
        .iter()
        .any(|l| l.to_ascii_uppercase().starts_with("HTTP_PROXY=")));

    let gateway = gateway.unwrap();
    gateway.set_nonblocking(true).unwrap();
    let gateway = tokio::net::UnixListener::from_std(gateway).unwrap();
    for (port, first) in ports.iter().zip([&b"\x16\x03\x01"[..], b"CONNECT a:443"]) {
        let mut client = tokio::net::TcpStream::connect(port.as_str()).await.unwrap();
        client.write_all(first).await.unwrap();
        let (mut host, _) = tokio::time::timeout(Duration::from_secs(5), gateway.accept())
            .await
            .unwrap()
            .unwrap();
        let mut buf = vec![0u8; first.len()];
        host.read_exact(&mut buf).await.unwrap();
        assert_eq!(buf, first);
        host.write_all(b"answer").await.unwrap();
        drop(host);
        let mut answer = Vec::new();
        client.read_to_end(&mut answer).await.unwrap();
        assert_eq!(answer, b"answer");
    }
}

#[tokio::test]
async fn exec_reports_codes_signals_stderr_env_and_stdin() {
    let agent = Agent::start();
    let out = run(&agent.client, sh("echo oops >&2; exit 7")).await;
    assert_eq!(out.stderr, b"oops\n");
    assert_eq!(out.exit, Some((Some(7), None, false)));
    let out = run(&agent.client, sh("kill -9 $$")).await;
    assert_eq!(out.exit, Some((None, Some(9), false)));
    let mut req = sh("cat; echo \" $X $LANG\"");
    req.stdin = Some("hello".into());
    req.env.insert("X".into(), "y".into());
    let out = run(&agent.client, req).await;
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello y C.UTF-8\n");
    let out = run(
        &agent.client,
        ExecRequest {
            argv: vec!["cat".into()],
            ..Default::default()
        },
    )
    .await;
    assert_eq!(
        (out.stdout.len(), out.exit),
        (0, Some((Some(0), None, false)))
    );
    let out = run(
        &agent.client,
        ExecRequest {
            argv: vec!["no-such-program".into()],
            ..Default::default()
        },
    )
    .await;
    assert_eq!((out.pid, out.error), (None, Some(ErrorCode::NotFound)));
    let mut req = sh("true");
    req.cwd = Some("/no/such/dir".into());
    assert_eq!(
        run(&agent.client, req).await.error,
        Some(ErrorCode::NotFound)
    );
    // A directory the user may not enter is checked as the user, in the child.
    let private = agent.dir.path().join("private");
    std::fs::create_dir(&private).unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
    let mut req = sh("true");
    req.cwd = Some(private.to_string_lossy().into_owned());
    assert_eq!(
        run(&agent.client, req.clone()).await.error,
        Some(ErrorCode::PermissionDenied)
    );
    req.user = BoxUser::Root;
    assert_eq!(
        run(&agent.client, req).await.exit,
        Some((Some(0), None, false))
    );
    let err = agent
        .client
        .exec(&ExecRequest::default())
        .await
        .err()
        .unwrap();
    assert_eq!(remote_code(err), (400, ErrorCode::InvalidRequest));
    // Output larger than one read chunk arrives whole and in order.
    let out = run(&agent.client, sh("seq 1 20000")).await;
    let expected: String = (1..=20000).map(|n| format!("{n}\n")).collect();
    assert_eq!(String::from_utf8_lossy(&out.stdout), expected);
}

#[tokio::test]
async fn a_timeout_kills_the_process_group() {
    let agent = Agent::start();
    let start = Instant::now();
    let mut req = sh("sleep 30 & echo $!; wait");
    req.timeout_ms = Some(300);
    let out = run(&agent.client, req).await;
    assert_eq!(out.exit, Some((None, Some(9), true)));
    assert!(start.elapsed() < Duration::from_secs(5));
    let child: u32 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    wait_gone(child).await;
}

#[tokio::test]
async fn a_disconnect_kills_the_process_group() {
    let agent = Agent::start();
    let mut stream = agent
        .client
        .exec(&sh("sleep 60 & echo $!; wait"))
        .await
        .unwrap();
    let Some(ExecFrame::Started { pid }) = stream.next_frame().await.unwrap() else {
        panic!("no started frame")
    };
    let Some(ExecFrame::Stdout { data }) = stream.next_frame().await.unwrap() else {
        panic!("no stdout frame")
    };
    let child: u32 = String::from_utf8_lossy(&data).trim().parse().unwrap();
    assert!(!gone(pid) && !gone(child));
    drop(stream);
    wait_gone(pid).await;
    wait_gone(child).await;
}

async fn wait_gone(pid: u32) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !gone(pid) {
        assert!(Instant::now() < deadline, "process {pid} still exists");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn files_round_trip_as_the_box_user() {
    let agent = Agent::start();
    let c = &agent.client;
    let user = BoxUser::User;
    c.write_file(
        &agent.query("notes.txt", user),
        Bytes::from_static(b"hello"),
    )
    .await
    .unwrap();
    assert_eq!(
        c.read_file(&agent.query("notes.txt", user)).await.unwrap(),
        "hello"
    );
    let meta = std::fs::metadata(agent.home().join("notes.txt")).unwrap();
    assert_eq!(
        (meta.uid(), meta.gid(), meta.mode() & 0o777),
        (BOX_USER_UID, BOX_USER_UID, 0o644)
    );
    let stat = c.stat(&agent.query("notes.txt", user)).await.unwrap();
    assert_eq!(
        (stat.name.as_str(), stat.kind, stat.size, stat.mode),
        ("notes.txt", FileKind::File, 5, 0o644)
    );
    let script = FileQuery {
        mode: Some(0o755),
        ..agent.query("run.sh", user)
    };
    c.write_file(&script, Bytes::from_static(b"#!/bin/sh\necho ran\n"))
        .await
        .unwrap();
    assert_eq!(c.stat(&script).await.unwrap().mode, 0o755);
    let out = run(
        c,
        ExecRequest {
            argv: vec!["./run.sh".into()],
            ..Default::default()
        },
    )
    .await;
    assert_eq!(out.stdout, b"ran\n");

    let deep = FileQuery {
        recursive: true,
        ..agent.query("a/b/c", user)
    };
    c.mkdir(&deep).await.unwrap();
    let (status, code) = remote_code(c.mkdir(&agent.query("a/b/c", user)).await.unwrap_err());
    assert_eq!((status, code), (409, ErrorCode::AlreadyExists));
    let list = c.list_files(&agent.query("", user)).await.unwrap();
    let names: Vec<_> = list
        .entries
        .iter()
        .map(|e| (e.name.as_str(), e.kind))
        .collect();
    assert_eq!(
        names,
        [
            ("a", FileKind::Dir),
            ("notes.txt", FileKind::File),
            ("run.sh", FileKind::File)
        ]
    );
    let (status, code) = remote_code(c.remove(&agent.query("a", user)).await.unwrap_err());
    assert_eq!((status, code), (409, ErrorCode::NotEmpty));
    c.remove(&FileQuery {
        recursive: true,
        ..agent.query("a", user)
    })
    .await
    .unwrap();
    c.remove(&agent.query("notes.txt", user)).await.unwrap();
    let (status, code) = remote_code(
        c.read_file(&agent.query("notes.txt", user))
            .await
            .unwrap_err(),
    );
    assert_eq!((status, code), (404, ErrorCode::NotFound));
    let (_, code) = remote_code(c.read_file(&agent.query("", user)).await.unwrap_err());
    assert_eq!(code, ErrorCode::IsADirectory);
}

#[tokio::test]
async fn root_owned_files_are_protected_from_the_user() {
    let agent = Agent::start();
    let secret = agent.home().join("secret");
    std::fs::write(&secret, "s3cret").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let c = &agent.client;
    let (status, code) = remote_code(
        c.read_file(&agent.query("secret", BoxUser::User))
            .await
            .unwrap_err(),
    );
    assert_eq!((status, code), (403, ErrorCode::PermissionDenied));
    let etc = FileQuery {
        path: "/etc/berth-test-denied".into(),
        ..Default::default()
    };
    let (status, _) = remote_code(
        c.write_file(&etc, Bytes::from_static(b"x"))
            .await
            .unwrap_err(),
    );
    assert_eq!(status, 403);
    // A body far larger than the socket's buffers: the agent refuses at once but still
    // reads it, so the client gets the 403 instead of a broken pipe.
    let (status, _) = remote_code(
        c.write_file(&etc, Bytes::from(vec![b'x'; 8 << 20]))
            .await
            .unwrap_err(),
    );
    assert_eq!(status, 403);
    assert!(!Path::new("/etc/berth-test-denied").exists());
    assert_eq!(
        c.read_file(&agent.query("secret", BoxUser::Root))
            .await
            .unwrap(),
        "s3cret"
    );
    let bad = FileQuery {
        path: "/tmp/a\0b".into(),
        ..Default::default()
    };
    assert_eq!(
        remote_code(c.stat(&bad).await.unwrap_err()),
        (400, ErrorCode::InvalidRequest)
    );
    let relative = FileQuery {
        path: "relative".into(),
        ..Default::default()
    };
    assert_eq!(
        remote_code(c.stat(&relative).await.unwrap_err()),
        (400, ErrorCode::InvalidRequest)
    );
}

#[tokio::test]
async fn the_memory_skeleton_is_made_for_the_box_user() {
    let agent = Agent::start();
    let memory = agent.dir.path().join("memory");
    let readme = std::fs::read_to_string(memory.join("README.md")).unwrap();
    assert!(readme.starts_with("# Persistent memory"));
    for dir in ["entities", "comms", "timeline", "workstreams"] {
        let meta = std::fs::metadata(memory.join(dir)).unwrap();
        assert!(meta.is_dir());
        assert_eq!((meta.uid(), meta.gid()), (BOX_USER_UID, BOX_USER_UID));
    }
}

#[tokio::test]
async fn shutdown_stops_every_process_and_exits_zero() {
    let mut agent = Agent::start();
    let mut stream = agent
        .client
        .exec(&sh("trap '' TERM; sleep 60 & echo $!; wait"))
        .await
        .unwrap();
    let Some(ExecFrame::Started { pid }) = stream.next_frame().await.unwrap() else {
        panic!("no started frame")
    };
    let Some(ExecFrame::Stdout { .. }) = stream.next_frame().await.unwrap() else {
        panic!("no stdout frame")
    };
    agent.client.shutdown().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = agent.child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "berth-init did not exit");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(status.success());
    wait_gone(pid).await;
    assert!(!agent.socket().exists());
}

#[tokio::test]
async fn exec_round_trip_is_fast() {
    let agent = Agent::start();
    let mut times = Vec::new();
    for _ in 0..40 {
        let start = Instant::now();
        let out = run(
            &agent.client,
            ExecRequest {
                argv: vec!["true".into()],
                ..Default::default()
            },
        )
        .await;
        times.push(start.elapsed());
        assert_eq!(out.exit, Some((Some(0), None, false)));
    }
    times.sort();
    let p50 = times[times.len() / 2];
    eprintln!(
        "exec `true` round trip: p50 {p50:?}, max {:?}",
        times[times.len() - 1]
    );
    assert!(p50 < Duration::from_millis(100), "p50 {p50:?}");
}

/// An archive read as the box user that meets a file only root may read is cut, never
/// finished as if the file were not there; as root the same tree comes out whole.
#[tokio::test]
async fn an_archive_the_user_cannot_read_whole_is_cut() {
    let agent = Agent::start();
    let tree = agent.home().join("tree");
    std::fs::create_dir(&tree).unwrap();
    std::fs::write(tree.join("a"), vec![b'a'; 256 * 1024]).unwrap();
    std::fs::write(tree.join("secret"), "s3cret").unwrap();
    std::fs::set_permissions(tree.join("secret"), std::fs::Permissions::from_mode(0o600)).unwrap();
    let c = &agent.client;
    assert!(
        read_tar(c, &agent.query("tree", BoxUser::User))
            .await
            .is_err(),
        "a cut tar ended cleanly"
    );
    let whole = read_tar(c, &agent.query("tree", BoxUser::Root))
        .await
        .unwrap();
    // Two entries of data and headers, then the end-of-archive blocks.
    assert!(
        whole.len() >= 256 * 1024 + 3 * 512 + 1024,
        "{}",
        whole.len()
    );
    assert!(whole.ends_with(&[0; 1024]));
    // The tree's own directory, unreadable: the call's error, before any tar.
    let (status, code) = remote_code(
        c.download_archive(&FileQuery {
            path: "/root".into(),
            ..Default::default()
        })
        .await
        .err()
        .unwrap(),
    );
    assert_eq!((status, code), (403, ErrorCode::PermissionDenied));
}

async fn read_tar(c: &GuestClient, q: &FileQuery) -> Result<Vec<u8>, GuestError> {
    let mut tar = c.download_archive(q).await?;
    let mut bytes = Vec::new();
    while let Some(chunk) = tar.next_chunk().await? {
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}
#[path = "agent/process.rs"]
mod process;
#[path = "agent/terminal.rs"]
mod terminal;
