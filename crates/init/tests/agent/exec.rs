//! `/v1/exec` on the real agent: sealing, environment, egress, exit reports, timeouts,
//! disconnects and latency.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use berth_protocol::guest::{BoxUser, ExecFrame, ExecRequest};
use berth_protocol::ErrorCode;

use super::common::{gone, remote_code, run, sh, wait_gone, Agent};

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
