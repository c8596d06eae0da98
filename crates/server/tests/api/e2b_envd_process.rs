//! E2B's `process.Process` (envd) over raw HTTP: who may call it, what bad input gets (all
//! before a box is asked anything, so a fake runtime serves), and on a real sandbox box a
//! command started and listed in both Connect codecs, a berth background process.

use berth_e2b_wire::process::{
    process_event::{data_event::Output, Event},
    process_selector::Selector,
    ListResponse, ProcessConfig, ProcessEvent, ProcessSelector, SendSignalRequest, StartRequest,
    StartResponse,
};
use berth_e2b_wire::{envelope, Codec, EnvelopeDecoder, Frame, MAX_MESSAGE_BYTES};
use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode};
use serde_json::{json, Value};

use crate::e2b_control::{self, e2b_server, sandbox};
use crate::end_to_end::with_sandbox;
use crate::harness::TestServer;

/// One envd call to `/process.Process/<method>` with `content_type`, as sandbox `id` with
/// `token` (`None`: no token).
async fn envd(
    server: &TestServer,
    id: &str,
    token: Option<&str>,
    method: &str,
    content_type: &str,
    body: Vec<u8>,
) -> (StatusCode, HeaderMap, Bytes) {
    let headers = [
        ("content-type", content_type),
        ("connect-protocol-version", "1"),
    ];
    let path = format!("/process.Process/{method}");
    e2b_control::envd(
        server,
        Method::POST,
        &path,
        id,
        token,
        &headers,
        Bytes::from(body),
    )
    .await
}

/// A streaming answer's messages and its end-stream's error (`Null` when it ended well).
fn frames(body: &[u8]) -> (Vec<Vec<u8>>, Value) {
    let mut decoder = EnvelopeDecoder::new();
    decoder.push(body).unwrap();
    let mut messages = Vec::new();
    while let Some(frame) = decoder.next_frame() {
        match frame {
            Frame::Message(bytes) => messages.push(bytes.to_vec()),
            Frame::EndStream(bytes) => {
                let end: Value = serde_json::from_slice(&bytes).unwrap();
                return (messages, end["error"].clone());
            }
        }
    }
    panic!("no end-stream in {body:?}");
}

fn json_body(value: Value) -> Vec<u8> {
    value.to_string().into_bytes()
}

#[tokio::test]
async fn envd_process_refuses_strangers_unknown_methods_and_bad_input_clearly() {
    let (server, _fake) = e2b_server().await;
    let (id, token) = sandbox(&server).await;
    let list = || json_body(json!({}));

    // No token, a wrong one, an unknown sandbox: one answer, unauthenticated.
    for (sandbox, token) in [
        (&*id, None),
        (&*id, Some("nope")),
        ("nosuchsandbox", Some(&*token)),
    ] {
        let (status, _, body) =
            envd(&server, sandbox, token, "List", "application/json", list()).await;
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
        assert_eq!(body["code"], "unauthenticated", "{body}");
    }
    // A stream is refused in its end-stream.
    let start = envelope::encode_message(Codec::Json, &StartRequest::default()).unwrap();
    let (status, _, body) = envd(
        &server,
        &id,
        None,
        "Start",
        "application/connect+json",
        start,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(frames(&body).1["code"], "unauthenticated");

    let (status, _, body) = envd(
        &server,
        &id,
        Some(&token),
        "Nope",
        "application/json",
        list(),
    )
    .await;
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(status, StatusCode::NOT_IMPLEMENTED, "{body}");
    assert_eq!(body["code"], "unimplemented", "{body}");

    // An envelope cut short, and one whose header claims more than a message may hold.
    let mut cut = envelope::encode_message(Codec::Json, &StartRequest::default()).unwrap();
    cut.truncate(cut.len() - 1);
    let mut huge = vec![0u8];
    huge.extend_from_slice(&(MAX_MESSAGE_BYTES as u32 + 1).to_be_bytes());
    huge.extend_from_slice(b"{}");
    for (body, code) in [(cut, "invalid_argument"), (huge, "resource_exhausted")] {
        let (status, _, body) = envd(
            &server,
            &id,
            Some(&token),
            "Start",
            "application/connect+json",
            body,
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        let error = frames(&body).1;
        assert_eq!(error["code"], code, "{error}");
        assert!(
            !error["message"].as_str().unwrap_or("").is_empty(),
            "{error}"
        );
    }
    // A unary body past the limit.
    let big = vec![b' '; MAX_MESSAGE_BYTES + 1];
    let (status, _, body) = envd(
        &server,
        &id,
        Some(&token),
        "SendInput",
        "application/json",
        big,
    )
    .await;
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(body["code"], "resource_exhausted", "{status} {body}");

    // Bad requests, each told why.
    let cases = [
        (
            "SendSignal",
            json!({"process": {"pid": 1}, "signal": 2}),
            "SIGTERM",
        ),
        (
            "SendSignal",
            json!({"signal": "SIGNAL_SIGKILL"}),
            "names no process",
        ),
        ("SendInput", json!({"process": {"pid": 1}}), "no input"),
        (
            "SendInput",
            json!({"input": {"stdin": "aGk="}}),
            "names no process",
        ),
        ("CloseStdin", json!({}), "names no process"),
        ("Update", json!({"process": {}}), "names no process"),
    ];
    for (method, request, needle) in cases {
        let (status, _, body) = envd(
            &server,
            &id,
            Some(&token),
            method,
            "application/json",
            json_body(request),
        )
        .await;
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(status, StatusCode::BAD_REQUEST, "{method}: {body}");
        assert_eq!(body["code"], "invalid_argument", "{method}: {body}");
        assert!(
            body["message"].as_str().unwrap().contains(needle),
            "{method}: {body}"
        );
    }
    for request in [json!({}), json!({"process": {"cmd": ""}})] {
        let start = envelope::encode_message(
            Codec::Json,
            &serde_json::from_value::<StartRequest>(request).unwrap(),
        )
        .unwrap();
        let (_, _, body) = envd(
            &server,
            &id,
            Some(&token),
            "Start",
            "application/connect+json",
            start,
        )
        .await;
        let (messages, error) = frames(&body);
        assert!(messages.is_empty(), "nothing started");
        assert_eq!(error["code"], "invalid_argument", "{error}");
    }
    // A binary SendSignal with a signal envd does not send.
    let bad = SendSignalRequest {
        process: Some(ProcessSelector {
            selector: Some(Selector::Pid(1)),
        }),
        signal: 1,
    };
    let (status, _, _) = envd(
        &server,
        &id,
        Some(&token),
        "SendSignal",
        "application/proto",
        Codec::Proto.encode(&bad).unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

/// The events of a Start answer in `codec`.
fn start_events(codec: Codec, body: &[u8]) -> Vec<Event> {
    let (messages, error) = frames(body);
    assert!(error.is_null(), "{error}");
    messages
        .iter()
        .map(|m| codec.decode::<StartResponse>(m).unwrap())
        .filter_map(|r| r.event.and_then(|e: ProcessEvent| e.event))
        .collect()
}

#[tokio::test]
async fn a_command_runs_as_a_berth_background_process_in_both_codecs() {
    let Some(server) = with_sandbox().await else {
        return;
    };
    let (id, token) = sandbox(&server).await;
    for (codec, content_type, unary) in [
        (Codec::Json, "application/connect+json", "application/json"),
        (
            Codec::Proto,
            "application/connect+proto",
            "application/proto",
        ),
    ] {
        let start = StartRequest {
            process: Some(ProcessConfig {
                cmd: "/bin/sh".into(),
                args: vec!["-c".into(), "echo out; echo err >&2; exit 3".into()],
                envs: Default::default(),
                cwd: Some("/tmp".into()),
            }),
            tag: Some("mine".into()),
            stdin: Some(false),
            ..Default::default()
        };
        let body = envelope::encode_message(codec, &start).unwrap();
        let (status, headers, body) =
            envd(&server, &id, Some(&token), "Start", content_type, body).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(headers["content-type"], content_type);
        let events = start_events(codec, &body);
        let Some(Event::Start(started)) = events.first() else {
            panic!("{events:?}");
        };
        assert!(started.pid > 0);
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        for event in &events {
            if let Event::Data(data) = event {
                match data.output.clone().unwrap() {
                    Output::Stdout(b) => stdout.extend(b),
                    Output::Stderr(b) => stderr.extend(b),
                    Output::Pty(_) => panic!("no PTY asked for"),
                }
            }
        }
        assert_eq!((&*stdout, &*stderr), (&b"out\n"[..], &b"err\n"[..]));
        let Some(Event::End(end)) = events.last() else {
            panic!("{events:?}");
        };
        assert_eq!((end.exit_code, end.exited), (3, true));
        assert_eq!(end.status, "exit status 3");

        // It is a berth background process, with the tag and cwd it was started with.
        let (status, listed) = server
            .call(Method::GET, &format!("/v1/boxes/{id}/processes"), None)
            .await;
        assert_eq!(status, StatusCode::OK);
        let found = listed["processes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["pid"] == started.pid)
            .unwrap_or_else(|| panic!("{listed}"));
        assert_eq!(found["tag"], "mine", "{found}");
        assert_eq!(found["cwd"], "/tmp", "{found}");
        assert_eq!(found["exit"]["code"], 3, "{found}");

        // An exited command is not envd's any more: List leaves it out.
        let (status, _, body) = envd(
            &server,
            &id,
            Some(&token),
            "List",
            unary,
            codec
                .encode(&berth_e2b_wire::process::ListRequest {})
                .unwrap(),
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        let list: ListResponse = codec.decode(&body).unwrap();
        assert!(
            list.processes.iter().all(|p| p.pid != started.pid),
            "{list:?}"
        );
    }
    // Connect by a tag no running process has.
    let connect = envelope::encode_message(
        Codec::Json,
        &serde_json::from_value::<berth_e2b_wire::process::ConnectRequest>(
            json!({"process": {"tag": "mine"}}),
        )
        .unwrap(),
    )
    .unwrap();
    let (_, _, body) = envd(
        &server,
        &id,
        Some(&token),
        "Connect",
        "application/connect+json",
        connect,
    )
    .await;
    assert_eq!(frames(&body).1["code"], "not_found");
}
