//! Terminals and in-box ports on the real agent: a PTY whose program sees its size and
//! signals, output kept while detached and replayed exactly once, the grace hang-up, and
//! a TCP connection to a listener "inside".

use std::time::{Duration, Instant};

use berth_protocol::guest::BoxUser;
use berth_protocol::terminal::{TerminalRequest, TerminalSize};
use berth_protocol::ErrorCode;
use berth_runtime::{GuestClient, GuestStream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::common::{gone, remote_code, Agent};

fn shell(script: &str, cols: u16, rows: u16) -> TerminalRequest {
    TerminalRequest {
        argv: vec!["sh".into(), "-c".into(), script.into()],
        size: TerminalSize { cols, rows },
        ..Default::default()
    }
}

/// Reads from `stream` into `seen` until it contains `needle`; panics after 10 s.
async fn read_until(stream: &mut GuestStream, seen: &mut Vec<u8>, needle: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(seen).contains(needle) {
        let left = deadline.saturating_duration_since(Instant::now());
        let n = tokio::time::timeout(left, stream.read(&mut buf))
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "no {needle:?} in time; got {:?}",
                    String::from_utf8_lossy(seen)
                )
            })
            .unwrap();
        assert!(
            n > 0,
            "stream ended before {needle:?}: {:?}",
            String::from_utf8_lossy(seen)
        );
        seen.extend_from_slice(&buf[..n]);
    }
}

/// Reads to the end of the stream (the program ended and everything was sent).
async fn read_to_end(stream: &mut GuestStream, seen: &mut Vec<u8>) {
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(seen))
        .await
        .expect("the stream did not end in time")
        .unwrap();
}

async fn wait_for(
    client: &GuestClient,
    id: &str,
    what: &str,
    ok: impl Fn(&berth_protocol::terminal::TerminalInfo) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match client.terminal(id).await {
            Ok(info) if ok(&info) => return,
            _ if Instant::now() > deadline => {
                panic!("terminal {id}: {what} did not happen in time")
            }
            _ => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

#[tokio::test]
async fn a_terminal_has_a_size_a_controlling_tty_input_and_an_exit_code() {
    let agent = Agent::start();
    let c = &agent.client;
    let info = c
        .terminal_open(&shell(
            "stty size; tty; echo term=$TERM; id -u; read line; echo got:$line; exit 3",
            100,
            30,
        ))
        .await
        .unwrap();
    assert!(info.id.starts_with("tm_") && info.exit.is_none());
    let mut attached = c.terminal_attach(&info.id, Some(0)).await.unwrap();
    assert_eq!(attached.start, 0);
    let mut seen = Vec::new();
    read_until(&mut attached.stream, &mut seen, "30 100").await;
    read_until(&mut attached.stream, &mut seen, "term=xterm-256color").await;
    read_until(&mut attached.stream, &mut seen, "1001").await;
    let text = String::from_utf8_lossy(&seen).into_owned();
    assert!(
        text.contains("/dev/pts/"),
        "the PTY is its terminal: {text}"
    );
    attached.stream.write_all(b"hello\n").await.unwrap();
    read_to_end(&mut attached.stream, &mut seen).await;
    let text = String::from_utf8_lossy(&seen).into_owned();
    assert!(text.contains("got:hello"), "{text}");
    assert!(
        text.contains("\r\n"),
        "the line discipline turns \\n into \\r\\n: {text:?}"
    );
    wait_for(c, &info.id, "the exit", |i| i.exit.is_some()).await;
    let info = c.terminal(&info.id).await.unwrap();
    assert_eq!(info.exit.unwrap().shell_status(), 3);
    assert_eq!(info.output_end, seen.len() as u64);
}

#[tokio::test]
async fn resize_and_signals_reach_the_foreground_job() {
    let agent = Agent::start();
    let c = &agent.client;
    let script = "trap 'stty size' WINCH; echo ready; while :; do sleep 0.05; done";
    let info = c.terminal_open(&shell(script, 80, 24)).await.unwrap();
    let mut attached = c.terminal_attach(&info.id, None).await.unwrap();
    let mut seen = Vec::new();
    read_until(&mut attached.stream, &mut seen, "ready").await;
    c.terminal_resize(
        &info.id,
        TerminalSize {
            cols: 132,
            rows: 43,
        },
    )
    .await
    .unwrap();
    read_until(&mut attached.stream, &mut seen, "43 132").await;
    assert_eq!(c.terminal(&info.id).await.unwrap().size.cols, 132);
    // ^C typed on the terminal, as the line discipline sees it.
    attached.stream.write_all(&[0x03]).await.unwrap();
    read_to_end(&mut attached.stream, &mut seen).await;
    wait_for(c, &info.id, "the exit", |i| i.exit.is_some()).await;
    assert_eq!(
        c.terminal(&info.id)
            .await
            .unwrap()
            .exit
            .unwrap()
            .shell_status(),
        130
    );

    let info = c
        .terminal_open(&shell("echo up; sleep 100", 80, 24))
        .await
        .unwrap();
    let mut attached = c.terminal_attach(&info.id, None).await.unwrap();
    read_until(&mut attached.stream, &mut Vec::new(), "up").await;
    c.terminal_signal(&info.id, "TERM").await.unwrap();
    wait_for(c, &info.id, "the exit", |i| i.exit.is_some()).await;
    let err = c.terminal_signal(&info.id, "SEGV").await.unwrap_err();
    assert_eq!(remote_code(err), (400, ErrorCode::InvalidRequest));
    let bad = TerminalRequest {
        size: TerminalSize { cols: 0, rows: 24 },
        ..shell("true", 80, 24)
    };
    assert_eq!(
        remote_code(c.terminal_open(&bad).await.unwrap_err()),
        (400, ErrorCode::InvalidRequest)
    );
    assert_eq!(
        remote_code(c.terminal("tm_nosuch").await.unwrap_err()),
        (404, ErrorCode::NotFound)
    );
}

#[tokio::test]
async fn output_while_detached_is_replayed_once_on_reattach() {
    let agent = Agent::start();
    let c = &agent.client;
    let go = agent.home().join("go");
    let script = format!(
        "echo before; while [ ! -e {go} ]; do sleep 0.02; done; echo while-detached; read x; echo after:$x",
        go = go.display()
    );
    let info = c.terminal_open(&shell(&script, 80, 24)).await.unwrap();
    let mut first = c.terminal_attach(&info.id, None).await.unwrap();
    let mut seen = Vec::new();
    read_until(&mut first.stream, &mut seen, "before\r\n").await;
    drop(first);
    wait_for(c, &info.id, "the detach", |i| !i.attached).await;
    std::fs::write(&go, b"").unwrap();
    wait_for(c, &info.id, "output while detached", |i| {
        i.output_end > seen.len() as u64
    })
    .await;
    // Reattach from what this client received: the rest, once.
    let mut second = c
        .terminal_attach(&info.id, Some(seen.len() as u64))
        .await
        .unwrap();
    assert_eq!(second.start, seen.len() as u64);
    read_until(&mut second.stream, &mut seen, "while-detached\r\n").await;
    // A third attachment takes over: the second one's stream ends.
    let mut third = c.terminal_attach(&info.id, None).await.unwrap();
    let mut rest = Vec::new();
    read_to_end(&mut second.stream, &mut rest).await;
    third.stream.write_all(b"x\n").await.unwrap();
    let mut tail = Vec::new();
    read_to_end(&mut third.stream, &mut tail).await;
    seen.extend_from_slice(&rest);
    seen.extend_from_slice(&tail);
    let text = String::from_utf8_lossy(&seen).into_owned();
    assert_eq!(text.matches("before").count(), 1, "{text:?}");
    assert_eq!(text.matches("while-detached").count(), 1, "{text:?}");
    assert!(text.contains("after:x"), "{text:?}");
}

#[tokio::test]
async fn a_terminal_detached_past_its_grace_is_hung_up_and_stops_keeping_the_box_busy() {
    let agent = Agent::start();
    let c = &agent.client;
    let req = TerminalRequest {
        grace_ms: Some(300),
        ..shell("sleep 1000 & echo child=$!; wait", 80, 24)
    };
    let info = c.terminal_open(&req).await.unwrap();
    let mut attached = c.terminal_attach(&info.id, None).await.unwrap();
    let mut seen = Vec::new();
    read_until(&mut attached.stream, &mut seen, "child=").await;
    read_until(&mut attached.stream, &mut seen, "\r\n").await;
    let text = String::from_utf8_lossy(&seen).into_owned();
    let child: u32 = text
        .split("child=")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no child pid in {text:?}"));
    assert_eq!(c.busy().await.unwrap().terminals, 1, "attached");
    drop(attached);
    // Detached, within its grace: still busy; past it, hung up, every process of its
    // session gone (the background job too), and forgotten after another grace.
    let deadline = Instant::now() + Duration::from_secs(15);
    while !gone(info.pid) || !gone(child) {
        assert!(
            Instant::now() < deadline,
            "the terminal's processes outlived its grace"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(c.busy().await.unwrap().terminals, 0);
    wait_for_forgotten(c, &info.id).await;
}

async fn wait_for_forgotten(c: &GuestClient, id: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match c.terminal(id).await {
            Err(err) => {
                assert_eq!(remote_code(err), (404, ErrorCode::NotFound));
                return;
            }
            Ok(_) => {
                assert!(
                    Instant::now() < deadline,
                    "an ended terminal was never forgotten"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

#[tokio::test]
async fn root_terminals_need_asking_and_a_user_terminal_is_the_users() {
    let agent = Agent::start();
    let c = &agent.client;
    let req = TerminalRequest {
        user: BoxUser::Root,
        ..shell("id -u", 80, 24)
    };
    let info = c.terminal_open(&req).await.unwrap();
    let mut attached = c.terminal_attach(&info.id, None).await.unwrap();
    let mut seen = Vec::new();
    read_to_end(&mut attached.stream, &mut seen).await;
    assert!(
        String::from_utf8_lossy(&seen).starts_with("0\r\n"),
        "{seen:?}"
    );
    let info = c
        .terminal_open(&shell("stat -c %u $(tty)", 80, 24))
        .await
        .unwrap();
    let mut attached = c.terminal_attach(&info.id, None).await.unwrap();
    let mut seen = Vec::new();
    read_to_end(&mut attached.stream, &mut seen).await;
    assert!(
        String::from_utf8_lossy(&seen).starts_with("1001\r\n"),
        "{seen:?}"
    );
}

#[tokio::test]
async fn a_port_is_dialled_inside_and_a_closed_one_is_an_answer() {
    let agent = Agent::start();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = tokio::spawn(async move {
        let (mut conn, _) = listener.accept().await.unwrap();
        let mut buf = [0u8; 5];
        conn.read_exact(&mut buf).await.unwrap();
        conn.write_all(&buf.map(|b| b.to_ascii_uppercase()))
            .await
            .unwrap();
    });
    let mut stream = agent.client.port_connect(port).await.unwrap();
    stream.write_all(b"hello").await.unwrap();
    let mut back = Vec::new();
    read_to_end(&mut stream, &mut back).await;
    assert_eq!(back, b"HELLO");
    server.await.unwrap();
    // The listener is gone: nothing accepts there now.
    let err = agent.client.port_connect(port).await.unwrap_err();
    assert_eq!(remote_code(err), (503, ErrorCode::Unavailable));
    for reserved in [443, 3128, 0] {
        let err = agent.client.port_connect(reserved).await.unwrap_err();
        assert_eq!(
            remote_code(err),
            (400, ErrorCode::InvalidRequest),
            "{reserved}"
        );
    }
}
