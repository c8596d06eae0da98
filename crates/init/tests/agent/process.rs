//! Background processes on the real agent: they outlive every connection, their output is
//! followed from an offset, their stdin streams any length, their exit is an event.

use std::time::{Duration, Instant};

use berth_protocol::guest::ExecRequest;
use berth_protocol::process::{OutputStream, ProcessExit, ProcessFrame, ProcessRequest};
use berth_protocol::ErrorCode;
use berth_runtime::{GuestClient, ProcessOutput};
use bytes::Bytes;

use super::common::{remote_code, sh, Agent};

fn background(script: &str) -> ProcessRequest {
    ProcessRequest {
        exec: sh(script),
        keep_awake: true,
        open_stdin: false,
        tag: None,
    }
}

/// Follows the output from `offset` to the exit: (stdout, stderr, exit, offsets seen).
async fn follow(
    c: &GuestClient,
    id: &str,
    offset: u64,
) -> (Vec<u8>, Vec<u8>, ProcessExit, Vec<u64>) {
    read_to_exit(c.process_output(id, offset).await.unwrap()).await
}

/// Reads `stream` to the exit: (stdout, stderr, exit, offsets seen).
async fn read_to_exit(mut stream: ProcessOutput) -> (Vec<u8>, Vec<u8>, ProcessExit, Vec<u64>) {
    let (mut out, mut err, mut offsets) = (Vec::new(), Vec::new(), Vec::new());
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let frame = tokio::time::timeout(left, stream.next_frame())
            .await
            .expect("no exit in time")
            .unwrap()
            .expect("the stream ended before the exit frame");
        match frame {
            ProcessFrame::Output {
                stream,
                offset,
                data,
            } => {
                offsets.push(offset);
                match stream {
                    OutputStream::Stdout => out.extend_from_slice(&data),
                    _ => err.extend_from_slice(&data),
                }
            }
            ProcessFrame::Exit { exit, .. } => return (out, err, exit, offsets),
            ProcessFrame::Unknown => {}
        }
    }
}

#[tokio::test]
async fn a_background_process_outlives_its_readers_and_its_exit_is_an_event() {
    let agent = Agent::start();
    let c = &agent.client;
    let go = agent.home().join("go");
    let script = format!(
        "echo first; echo oops >&2; while [ ! -e {} ]; do sleep 0.02; done; echo second; exit 4",
        go.display()
    );
    let info = c.process_start(&background(&script)).await.unwrap();
    assert!(info.id.starts_with("pr_") && info.exit.is_none());
    assert_eq!(c.busy().await.unwrap().processes, 1);
    // A reader that leaves before the end changes nothing.
    let mut first = c.process_output(&info.id, 0).await.unwrap();
    let frame = first.next_frame().await.unwrap().unwrap();
    let ProcessFrame::Output {
        offset: 0, data, ..
    } = frame
    else {
        panic!("{frame:?}")
    };
    let received = data.len() as u64;
    drop(first);
    std::fs::write(&go, b"").unwrap();
    // Resuming from what was received: the rest, once.
    let (out, err, exit, offsets) = follow(c, &info.id, received).await;
    assert_eq!(offsets[0], received);
    let mut all_out = data.clone();
    all_out.extend_from_slice(&out);
    let text = String::from_utf8_lossy(&all_out);
    assert!(
        text.matches("first").count() + String::from_utf8_lossy(&err).matches("first").count() == 1
            && text.contains("second"),
        "{text:?} / {err:?}"
    );
    assert_eq!(exit.shell_status(), 4);
    // From the start again: everything is still kept.
    let (out, err, _, _) = follow(c, &info.id, 0).await;
    assert_eq!(String::from_utf8_lossy(&out), "first\nsecond\n");
    assert_eq!(String::from_utf8_lossy(&err), "oops\n");
    assert_eq!(c.busy().await.unwrap().processes, 0);
    let listed = c.processes().await.unwrap().processes;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].exit.unwrap().code, Some(4));
    // The exit is on the box's event stream.
    let mut events = c.events(0).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let event = tokio::time::timeout(left, events.next_frame())
            .await
            .expect("no process_exit event")
            .unwrap()
            .unwrap();
        if event.kind == "process_exit" {
            assert_eq!(event.data["id"], info.id.as_str());
            assert_eq!(event.data["status"], 4);
            break;
        }
    }
}

#[tokio::test]
async fn a_start_followed_answers_the_process_then_all_its_output_on_one_call() {
    let agent = Agent::start();
    let c = &agent.client;
    let script = "echo one; echo two >&2; echo three; exit 3";
    let (info, output) = c.process_start_followed(&background(script)).await.unwrap();
    assert!(info.id.starts_with("pr_") && info.pid > 0, "{info:?}");
    let (out, err, exit, offsets) = read_to_exit(output).await;
    assert_eq!(String::from_utf8_lossy(&out), "one\nthree\n");
    assert_eq!(String::from_utf8_lossy(&err), "two\n");
    assert_eq!(exit.shell_status(), 3);
    assert_eq!(offsets.first(), Some(&0));
    // A background process like any other: listed, and followed again from its start.
    let listed = c.processes().await.unwrap().processes;
    assert!(listed.iter().any(|p| p.id == info.id), "{listed:?}");
    let (again, _, _, _) = follow(c, &info.id, 0).await;
    assert_eq!(again, out);
    // A start that fails is an error answer, not a stream.
    let missing = background("unused");
    let missing = ProcessRequest {
        exec: ExecRequest {
            argv: vec!["/no/such/program".into()],
            ..missing.exec
        },
        ..missing
    };
    let err = c.process_start_followed(&missing).await.err().unwrap();
    assert_eq!(remote_code(err).1, ErrorCode::NotFound);
}

#[tokio::test]
async fn stdin_streams_any_length_then_closes_and_signals_reach_the_group() {
    let agent = Agent::start();
    let c = &agent.client;
    let req = ProcessRequest {
        open_stdin: true,
        ..background("wc -c")
    };
    let info = c.process_start(&req).await.unwrap();
    assert!(info.stdin_open);
    // 64 MiB in 1 MiB chunks, in two writes: the first leaves stdin open.
    let chunk = Bytes::from(vec![b'x'; 1024 * 1024]);
    let body = |n: usize| {
        let chunks = std::iter::repeat_n(chunk.clone(), n)
            .map(|b| Ok::<_, std::convert::Infallible>(hyper::body::Frame::data(b)));
        http_body_util::StreamBody::new(futures_util::stream::iter(chunks))
    };
    c.process_stdin(&info.id, false)
        .await
        .unwrap()
        .send(body(32))
        .await
        .unwrap();
    c.process_stdin(&info.id, true)
        .await
        .unwrap()
        .send(body(32))
        .await
        .unwrap();
    let (out, _, exit, _) = follow(c, &info.id, 0).await;
    assert_eq!(
        String::from_utf8_lossy(&out).trim(),
        (64 * 1024 * 1024).to_string()
    );
    assert_eq!(exit.code, Some(0));
    let err = c
        .process_stdin(&info.id, true)
        .await
        .unwrap()
        .send(body(1))
        .await
        .unwrap_err();
    assert_eq!(remote_code(err), (409, ErrorCode::Conflict));

    let info = c
        .process_start(&ProcessRequest {
            keep_awake: false,
            ..background("sleep 100")
        })
        .await
        .unwrap();
    assert_eq!(c.busy().await.unwrap().processes, 0, "keep_awake: false");
    c.process_signal(&info.id, "TERM").await.unwrap();
    let (_, _, exit, _) = follow(c, &info.id, 0).await;
    assert_eq!(exit.signal, Some(15));
    let bad = ProcessRequest {
        open_stdin: true,
        exec: ExecRequest {
            stdin: Some("text".into()),
            ..sh("cat")
        },
        keep_awake: true,
        tag: None,
    };
    assert_eq!(
        remote_code(c.process_start(&bad).await.unwrap_err()),
        (400, ErrorCode::InvalidRequest)
    );
    let Err(missing) = c.process_output("pr_nosuch", 0).await else {
        panic!("an unknown process has no output")
    };
    assert_eq!(remote_code(missing), (404, ErrorCode::NotFound));
}

#[tokio::test]
async fn a_timeout_ends_a_background_process() {
    let agent = Agent::start();
    let c = &agent.client;
    let req = ProcessRequest {
        exec: ExecRequest {
            timeout_ms: Some(300),
            ..sh("sleep 100")
        },
        keep_awake: true,
        open_stdin: false,
        tag: None,
    };
    let info = c.process_start(&req).await.unwrap();
    let (_, _, exit, _) = follow(c, &info.id, 0).await;
    assert!(exit.timed_out && exit.signal == Some(9), "{exit:?}");
}
