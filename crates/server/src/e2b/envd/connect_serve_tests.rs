//! The Connect serving plumbing, driven with requests built by hand: the shapes a client
//! gets for success and each failure, the bounds, keepalives and the deadline.

use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use berth_e2b_wire::process::{
    process_event, ConnectResponse, ListRequest, ListResponse, ProcessEvent, ProcessInfo,
    StartRequest,
};
use berth_e2b_wire::{Code, Codec, ConnectError, MAX_MESSAGE_BYTES};
use futures_util::StreamExt;
use http_body_util::BodyExt;
use serde_json::{json, Value};

use super::connect_serve::{client_stream, server_stream, unary, Events};

fn request(content_type: &str, headers: &[(&str, &str)], body: Vec<u8>) -> Request {
    let mut builder =
        http::Request::post("/process.Process/X").header("content-type", content_type);
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    builder.body(Body::from(body)).unwrap()
}

fn envelope(flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut frame = vec![flags];
    frame.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    frame.extend_from_slice(payload);
    frame
}

/// The frames of a streaming answer: (flags, payload).
async fn frames(response: Response) -> Vec<(u8, Vec<u8>)> {
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let mut rest = &bytes[..];
    let mut out = Vec::new();
    while !rest.is_empty() {
        let len = u32::from_be_bytes([rest[1], rest[2], rest[3], rest[4]]) as usize;
        out.push((rest[0], rest[5..5 + len].to_vec()));
        rest = &rest[5 + len..];
    }
    out
}

fn end_error(frame: &(u8, Vec<u8>)) -> Value {
    assert_eq!(frame.0 & 0x02, 0x02, "not an end-stream frame");
    serde_json::from_slice::<Value>(&frame.1).unwrap()["error"].clone()
}

async fn list(_: ListRequest) -> Result<ListResponse, ConnectError> {
    Ok(ListResponse {
        processes: vec![ProcessInfo {
            pid: 7,
            ..Default::default()
        }],
    })
}

#[tokio::test]
async fn a_unary_call_answers_in_the_codec_it_was_asked_in() {
    let response = unary(request("application/json", &[], b"{}".to_vec()), list).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/json");
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(
        serde_json::from_slice::<Value>(&body).unwrap(),
        json!({"processes":[{"pid":7}]})
    );

    let response = unary(request("application/proto", &[], Vec::new()), list).await;
    assert_eq!(response.headers()["content-type"], "application/proto");
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let decoded: ListResponse = Codec::Proto.decode(&body).unwrap();
    assert_eq!(decoded.processes[0].pid, 7);
}

#[tokio::test]
async fn a_unary_call_refuses_what_it_cannot_read_with_a_clear_error() {
    // Not a Connect content type: a plain 415.
    let response = unary(request("text/plain", &[], b"{}".to_vec()), list).await;
    assert_eq!(response.status(), 415);
    // Malformed JSON: invalid_argument, as Connect's JSON body.
    let response = unary(request("application/json", &[], b"{".to_vec()), list).await;
    assert_eq!(response.status(), 400);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(
        serde_json::from_slice::<Value>(&body).unwrap()["code"],
        "invalid_argument"
    );
    // Longer than a message may be: refused while reading, never held whole.
    let big = vec![b' '; MAX_MESSAGE_BYTES + 1];
    let response = unary(request("application/json", &[], big), list).await;
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(
        serde_json::from_slice::<Value>(&body).unwrap()["code"],
        "resource_exhausted"
    );
    // A compressed body berth never offered: unimplemented.
    let response = unary(
        request(
            "application/json",
            &[("content-encoding", "gzip")],
            b"{}".to_vec(),
        ),
        list,
    )
    .await;
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(
        serde_json::from_slice::<Value>(&body).unwrap()["code"],
        "unimplemented"
    );
    // The handler's error keeps its code.
    let response = unary(
        request("application/json", &[], b"{}".to_vec()),
        |_: ListRequest| async {
            Err::<ListResponse, _>(ConnectError::new(Code::NotFound, "no such process"))
        },
    )
    .await;
    assert_eq!(response.status(), 404);
}

fn keepalive() -> ConnectResponse {
    ConnectResponse {
        event: Some(ProcessEvent {
            event: Some(process_event::Event::Keepalive(process_event::KeepAlive {})),
        }),
    }
}

fn start_frame() -> Vec<u8> {
    envelope(0, &Codec::Json.encode(&StartRequest::default()).unwrap())
}

#[tokio::test]
async fn a_stream_sends_keepalives_while_quiet_and_ends_at_the_deadline() {
    let quiet = request(
        "application/connect+json",
        &[
            ("keepalive-ping-interval", "1"),
            ("connect-timeout-ms", "2500"),
        ],
        start_frame(),
    );
    let response = server_stream(quiet, keepalive, |_: StartRequest| async {
        Ok(Box::pin(futures_util::stream::pending()) as Events<ConnectResponse>)
    })
    .await;
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["content-type"],
        "application/connect+json"
    );
    let frames = frames(response).await;
    let (last, keepalives) = frames.split_last().unwrap();
    assert!(
        !keepalives.is_empty(),
        "no keepalive in 2.5 s at a 1 s interval"
    );
    for (flags, payload) in keepalives {
        assert_eq!(*flags, 0);
        let value: Value = serde_json::from_slice(payload).unwrap();
        assert_eq!(value, json!({"event":{"keepalive":{}}}));
    }
    assert_eq!(end_error(last)["code"], "deadline_exceeded");
}

#[tokio::test]
async fn a_stream_carries_its_events_then_an_end_with_the_error_if_any() {
    let events = |fail: bool| {
        let mut items: Vec<Result<ConnectResponse, ConnectError>> = vec![Ok(keepalive())];
        if fail {
            items.push(Err(ConnectError::new(Code::Internal, "the box went away")));
        }
        Box::pin(futures_util::stream::iter(items)) as Events<ConnectResponse>
    };
    for fail in [false, true] {
        let call = request("application/connect+json", &[], start_frame());
        let response = server_stream(call, keepalive, |_: StartRequest| async move {
            Ok(events(fail))
        })
        .await;
        let frames = frames(response).await;
        assert_eq!(frames.len(), 2, "{frames:?}");
        assert_eq!(frames[0].0, 0);
        match fail {
            true => assert_eq!(end_error(&frames[1])["code"], "internal"),
            false => assert_eq!(frames[1], (0x02, b"{}".to_vec())),
        }
    }
    // Two request messages, an end-stream from the client, or a cut envelope: refused in
    // the end-stream of a 200, as Connect streams answer errors.
    let two = [start_frame(), start_frame()].concat();
    let from_client = [start_frame(), envelope(0x02, b"{}")].concat();
    let cut = start_frame()[..4].to_vec();
    let oversized = [
        vec![0u8],
        ((MAX_MESSAGE_BYTES + 1) as u32).to_be_bytes().to_vec(),
    ]
    .concat();
    for body in [two, from_client, cut, Vec::new(), oversized] {
        let call = request("application/connect+json", &[], body.clone());
        let response = server_stream(call, keepalive, |_: StartRequest| async {
            Ok(Box::pin(futures_util::stream::empty()) as Events<ConnectResponse>)
        })
        .await;
        assert_eq!(response.status(), 200);
        let frames = frames(response).await;
        assert_eq!(frames.len(), 1, "{body:?}");
        let code = end_error(&frames[0])["code"].clone();
        assert!(
            code == "invalid_argument" || code == "resource_exhausted",
            "{code}"
        );
    }
}

#[tokio::test]
async fn a_client_stream_reads_its_messages_as_they_come_and_answers_once() {
    let body = [start_frame(), start_frame(), start_frame()].concat();
    let call = request("application/connect+proto", &[], Vec::new());
    let (parts, _) = call.into_parts();
    let proto_body = [0, 1, 2]
        .iter()
        .flat_map(|_| envelope(0, &Codec::Proto.encode(&StartRequest::default()).unwrap()))
        .collect::<Vec<u8>>();
    let call = Request::from_parts(parts, Body::from(proto_body));
    let response = client_stream(
        call,
        |incoming: super::connect_serve::Incoming<StartRequest>| async move {
            let count = incoming
                .filter(|m| std::future::ready(m.is_ok()))
                .count()
                .await;
            Ok(ListResponse {
                processes: vec![ProcessInfo {
                    pid: count as u32,
                    ..Default::default()
                }],
            })
        },
    )
    .await;
    assert_eq!(
        response.headers()["content-type"],
        "application/connect+proto"
    );
    let frames = frames(response).await;
    let answer: ListResponse = Codec::Proto.decode(&frames[0].1).unwrap();
    assert_eq!(answer.processes[0].pid, 3);
    assert_eq!(frames[1], (0x02, b"{}".to_vec()));
    // The kind of call decides the content types it takes.
    let call = request("application/json", &[], body);
    let response = client_stream(
        call,
        |_: super::connect_serve::Incoming<StartRequest>| async { Ok(ListResponse::default()) },
    )
    .await;
    assert_eq!(response.status(), 415);
}
