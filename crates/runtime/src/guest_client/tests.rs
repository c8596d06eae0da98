//! The client against a fake agent on a Unix socket. The fake writes raw HTTP/1.1, so it can
//! do what only a hostile guest would: lines that never end, bodies past their announced
//! length, answers larger than any honest one.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use berth_protocol::guest::{MAX_FILE_BYTES, MAX_NDJSON_LINE_BYTES};
use berth_protocol::harness::DeliverRequest;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixListener;

use super::*;

#[tokio::test]
async fn unix_connect_refuses_a_planted_symlink() {
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("real.sock");
    let _listener = tokio::net::UnixListener::bind(&real).unwrap();
    connect_unix_nofollow(&real)
        .await
        .expect("a socket connects");
    let link = dir.path().join("agent.sock");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    assert!(connect_unix_nofollow(&link).await.is_err());
    let file = dir.path().join("file");
    std::fs::write(&file, "").unwrap();
    assert!(connect_unix_nofollow(&file).await.is_err());
}

#[test]
fn paths_are_percent_encoded() {
    let q = FileQuery {
        path: "/home/user/a b&c\0".into(),
        ..Default::default()
    };
    assert_eq!(
        file_uri("/v1/files", &q),
        "/v1/files?path=/home/user/a%20b%26c%00&user=user"
    );
}

/// What the fake agent answers to one request path.
#[derive(Clone)]
enum Reply {
    /// A whole response, head and body, as given.
    Raw(Vec<u8>),
    /// `head`, then `chunk` again and again until the host hangs up.
    Endless { head: String, chunk: Vec<u8> },
    /// Reads the request body until the host stops sending, then answers 204.
    Drain,
}

fn json_reply(body: &str) -> Reply {
    Reply::Raw(
        format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes(),
    )
}

/// A fake agent speaking protocol `version`; `reply` answers every other path.
struct FakeAgent {
    _dir: tempfile::TempDir,
    client: GuestClient,
    /// Requests other than `/v1/info` it received.
    calls: Arc<AtomicU64>,
    /// Body bytes it managed to write (the host's socket buffers included).
    written: Arc<AtomicU64>,
}

impl FakeAgent {
    fn start(version: u32, reply: impl Fn(&str) -> Reply + Send + Sync + 'static) -> FakeAgent {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let (calls, written) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let reply = Arc::new(reply);
        let (c, w) = (calls.clone(), written.clone());
        tokio::spawn(async move {
            loop {
                let (mut stream, _) = listener.accept().await.unwrap();
                let (reply, calls, written) = (reply.clone(), c.clone(), w.clone());
                tokio::spawn(async move {
                    let path = read_request_path(&mut stream).await;
                    let answer = if path == "/v1/info" {
                        json_reply(&format!(
                            r#"{{"protocol_version":{version},"boot_id":"b"}}"#
                        ))
                    } else {
                        calls.fetch_add(1, Ordering::SeqCst);
                        reply(&path)
                    };
                    match answer {
                        Reply::Raw(bytes) => {
                            let _ = stream.write_all(&bytes).await;
                        }
                        Reply::Drain => {
                            let mut buf = vec![0u8; 64 * 1024];
                            while stream.read(&mut buf).await.is_ok_and(|n| n > 0) {}
                            let _ = stream.write_all(b"HTTP/1.1 204 No Content\r\n\r\n").await;
                        }
                        Reply::Endless { head, chunk } => {
                            if stream.write_all(head.as_bytes()).await.is_err() {
                                return;
                            }
                            while stream.write_all(&chunk).await.is_ok() {
                                written.fetch_add(chunk.len() as u64, Ordering::SeqCst);
                            }
                        }
                    }
                });
            }
        });
        let token = BootToken::from_random([7; 32]);
        FakeAgent {
            client: GuestClient::new(GuestAddr::Unix(path), token),
            _dir: dir,
            calls,
            written,
        }
    }
}

/// Reads a request head (the fake's requests have no body but uploads, which it ignores)
/// and returns its path without the query.
async fn read_request_path(stream: &mut UnixStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte).await.unwrap_or(0) == 0 {
            break;
        }
        head.push(byte[0]);
    }
    let line = String::from_utf8_lossy(&head)
        .lines()
        .next()
        .unwrap_or("")
        .to_owned();
    let target = line.split(' ').nth(1).unwrap_or("").to_owned();
    target.split('?').next().unwrap_or("").to_owned()
}

fn query(path: &str) -> FileQuery {
    FileQuery {
        path: path.into(),
        ..Default::default()
    }
}

#[tokio::test]
async fn a_call_newer_than_the_agreed_version_is_refused_without_being_sent() {
    let agent = FakeAgent::start(1, |_| {
        json_reply(r#"{"name":"a","kind":"file","size":1,"mode":420,"mtime":0}"#)
    });
    let err = agent
        .client
        .deliver(&DeliverRequest {
            id: "msg_1".into(),
            content: "hi".into(),
        })
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            GuestError::Unsupported {
                call: Call::Deliver,
                needs: 2,
                agent: 1
            }
        ),
        "{err:?}"
    );
    assert_eq!(err.code(), ErrorCode::Unsupported);
    assert!(matches!(
        agent.client.events(0).await.err(),
        Some(GuestError::Unsupported {
            call: Call::Events,
            ..
        })
    ));
    assert_eq!(agent.calls.load(Ordering::SeqCst), 0, "nothing was sent");
    // A version-1 call goes through, and clones share what was agreed.
    agent.client.clone().stat(&query("/a")).await.unwrap();
    assert_eq!(agent.client.agreed_version().await.unwrap(), 1);
    assert_eq!(agent.calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn an_agent_newer_than_the_host_agrees_on_the_hosts_version() {
    let agent = FakeAgent::start(PROTOCOL_VERSION + 3, |_| json_reply("{}"));
    let info = agent.client.info().await.unwrap();
    assert_eq!(info.protocol_version, PROTOCOL_VERSION + 3);
    assert_eq!(
        agent.client.agreed_version().await.unwrap(),
        PROTOCOL_VERSION
    );
}

#[tokio::test]
async fn an_endless_ndjson_line_ends_the_stream_at_the_bound() {
    let agent = FakeAgent::start(PROTOCOL_VERSION, |_| Reply::Endless {
        head: "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n".into(),
        chunk: chunk_of(64 * 1024, b'a'),
    });
    let mut stream = agent.client.exec(&ExecRequest::default()).await.unwrap();
    let err = stream.next_frame().await.unwrap_err();
    assert!(
        matches!(err, GuestError::TooLong { what: "NDJSON line", limit_bytes } if limit_bytes == MAX_NDJSON_LINE_BYTES as u64),
        "{err:?}"
    );
    assert!(
        stream.next_frame().await.unwrap().is_none(),
        "the stream ended"
    );
}

/// A chunked-encoding chunk of `len` bytes of `byte`.
fn chunk_of(len: usize, byte: u8) -> Vec<u8> {
    let mut chunk = format!("{len:x}\r\n").into_bytes();
    chunk.extend(std::iter::repeat_n(byte, len));
    chunk.extend_from_slice(b"\r\n");
    chunk
}

#[tokio::test]
async fn a_huge_json_answer_is_refused_announced_or_not() {
    let agent = FakeAgent::start(PROTOCOL_VERSION, |path| match path {
        "/v1/files/stat" => Reply::Endless {
            head: "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n".into(),
            chunk: chunk_of(64 * 1024, b' '),
        },
        _ => Reply::Raw(b"HTTP/1.1 200 OK\r\ncontent-length: 99999999999\r\n\r\n{".to_vec()),
    });
    for result in [
        agent.client.stat(&query("/a")).await.map(drop),
        agent.client.list_files(&query("/a")).await.map(drop),
    ] {
        let err = result.unwrap_err();
        assert!(
            matches!(
                err,
                GuestError::TooLong {
                    what: "JSON answer",
                    ..
                }
            ),
            "{err:?}"
        );
        assert_eq!(err.code(), ErrorCode::PayloadTooLarge);
    }
    let limit = berth_protocol::guest::MAX_JSON_ANSWER_BYTES as u64;
    assert!(agent.written.load(Ordering::SeqCst) < limit + 16 * 1024 * 1024);
}

#[tokio::test]
async fn a_huge_error_body_is_refused() {
    let agent = FakeAgent::start(PROTOCOL_VERSION, |_| Reply::Endless {
        head: "HTTP/1.1 500 Internal Server Error\r\ntransfer-encoding: chunked\r\n\r\n".into(),
        chunk: chunk_of(64 * 1024, b'e'),
    });
    let err = agent.client.mkdir(&query("/a")).await.unwrap_err();
    assert!(
        matches!(
            err,
            GuestError::TooLong {
                what: "error body",
                ..
            }
        ),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_file_body_is_cut_at_its_announced_length() {
    let mut raw = b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n".to_vec();
    raw.extend(std::iter::repeat_n(b'x', 1024 * 1024));
    let agent = FakeAgent::start(PROTOCOL_VERSION, move |_| Reply::Raw(raw.clone()));
    let mut download = agent.client.download_file(&query("/a")).await.unwrap();
    assert_eq!(download.size_bytes(), Some(10));
    let mut got = Vec::new();
    while let Some(chunk) = download.next_chunk().await.unwrap() {
        got.extend_from_slice(&chunk);
    }
    assert_eq!(got, b"xxxxxxxxxx");
}

#[tokio::test]
async fn a_file_announced_over_the_limit_or_sent_past_it_is_refused() {
    let agent = FakeAgent::start(PROTOCOL_VERSION, |path| match path {
        "/v1/files" => Reply::Endless {
            head: "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n".into(),
            chunk: chunk_of(256 * 1024, b'z'),
        },
        _ => Reply::Raw(Vec::new()),
    });
    let mut download = agent.client.download_file(&query("/a")).await.unwrap();
    assert_eq!(download.size_bytes(), None);
    let mut received = 0u64;
    let err = loop {
        match download.next_chunk().await {
            Ok(Some(chunk)) => received += chunk.len() as u64,
            Ok(None) => panic!("an endless body ended"),
            Err(err) => break err,
        }
    };
    assert!(
        matches!(err, GuestError::TooLong { what: "file", .. }),
        "{err:?}"
    );
    // Read up to the limit, and not a byte past it.
    assert!(received > MAX_FILE_BYTES - 1024 * 1024, "{received}");
    assert!(received <= MAX_FILE_BYTES, "{received}");

    let agent = FakeAgent::start(PROTOCOL_VERSION, |_| {
        Reply::Raw(
            format!(
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n",
                MAX_FILE_BYTES + 1
            )
            .into_bytes(),
        )
    });
    let err = agent
        .client
        .download_file(&query("/a"))
        .await
        .err()
        .unwrap();
    assert!(
        matches!(err, GuestError::TooLong { what: "file", .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn an_upload_past_the_limit_is_cut_with_a_typed_error() {
    let agent = FakeAgent::start(PROTOCOL_VERSION, |_| Reply::Drain);
    let upload = agent
        .client
        .open_upload(&query("/a"), WriteMode::Atomic)
        .await
        .unwrap();
    let err = upload.send(endless_body(1024 * 1024)).await.unwrap_err();
    assert!(matches!(err, GuestError::UploadTooLarge { .. }), "{err:?}");
}

/// A body that announces no length and never ends, in `chunk`-byte frames.
fn endless_body(
    chunk: usize,
) -> impl hyper::body::Body<Data = Bytes, Error = std::convert::Infallible> + Send + 'static {
    struct Endless(Bytes);
    impl hyper::body::Body for Endless {
        type Data = Bytes;
        type Error = std::convert::Infallible;
        fn poll_frame(
            self: std::pin::Pin<&mut Self>,
            _cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
            std::task::Poll::Ready(Some(Ok(hyper::body::Frame::data(self.0.clone()))))
        }
    }
    Endless(Bytes::from(vec![0u8; chunk]))
}

#[tokio::test]
async fn directory_calls_need_protocol_3() {
    let agent = FakeAgent::start(2, |_| json_reply("{}"));
    let q = query("/home/user");
    for err in [
        agent.client.download_archive(&q).await.err(),
        agent.client.open_archive_upload(&q).await.err(),
        agent.client.watch(&q).await.err(),
    ] {
        assert!(
            matches!(
                err,
                Some(GuestError::Unsupported {
                    needs: 3,
                    agent: 2,
                    ..
                })
            ),
            "{err:?}"
        );
    }
    assert_eq!(agent.calls.load(Ordering::SeqCst), 0, "nothing was sent");
}

#[tokio::test]
async fn a_tar_the_agent_cuts_ends_in_an_error_not_a_clean_end() {
    let mut raw = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
    raw.extend(chunk_of(512, 0));
    // The connection closes here: no final chunk.
    let agent = FakeAgent::start(PROTOCOL_VERSION, move |_| Reply::Raw(raw.clone()));
    let mut tar = agent.client.download_archive(&query("/d")).await.unwrap();
    assert_eq!(tar.next_chunk().await.unwrap().unwrap().len(), 512);
    assert!(
        tar.next_chunk().await.is_err(),
        "a cut tar must not end cleanly"
    );
}

#[tokio::test]
async fn watch_events_are_read_and_keepalives_skipped() {
    let body = "\n{\"type\":\"create\",\"path\":\"a\",\"dir\":false}\n\n{\"type\":\"overflow\"}\n{\"type\":\"later\"}\n";
    let raw = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/x-ndjson\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let agent = FakeAgent::start(PROTOCOL_VERSION, move |_| {
        Reply::Raw(raw.clone().into_bytes())
    });
    let mut watch = agent.client.watch(&query("/d")).await.unwrap();
    use berth_protocol::files::WatchEvent;
    let mut events = Vec::new();
    while let Some(event) = watch.next_frame().await.unwrap() {
        events.push(event);
    }
    assert_eq!(
        events,
        [
            WatchEvent::Create {
                path: "a".into(),
                dir: false
            },
            WatchEvent::Overflow,
            WatchEvent::Unknown
        ]
    );
}

#[tokio::test]
async fn an_archive_upload_answers_what_was_written() {
    let agent = FakeAgent::start(PROTOCOL_VERSION, |_| {
        json_reply(r#"{"files":2,"dirs":1,"links":0,"bytes":9}"#)
    });
    let upload = agent
        .client
        .open_archive_upload(&query("/d"))
        .await
        .unwrap();
    let written = upload
        .send(http_body_util::Full::new(Bytes::from_static(&[0; 1024])))
        .await
        .unwrap();
    assert_eq!((written.files, written.dirs, written.bytes), (2, 1, 9));
}

fn ndjson_reply(body: &str) -> Reply {
    Reply::Raw(
        format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/x-ndjson\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes(),
    )
}

const STARTED: &str = r#"{"id":"pr_1","pid":7,"argv":["true"]}"#;
const EXITED: &str = r#"{"type":"output","stream":"stdout","offset":0,"data":"aGk="}
{"type":"exit","code":0,"output_end":2}
"#;

/// Reads a followed start to its exit: (the pid, stdout, whether the exit came).
async fn read_followed(client: &GuestClient) -> Result<(u32, Vec<u8>, bool), GuestError> {
    use berth_protocol::process::{ProcessFrame, ProcessRequest};
    let request = ProcessRequest {
        exec: berth_protocol::guest::ExecRequest {
            argv: vec!["true".into()],
            ..Default::default()
        },
        keep_awake: false,
        open_stdin: false,
        tag: None,
    };
    let (info, mut output) = client.process_start_followed(&request).await?;
    let (mut out, mut exited) = (Vec::new(), false);
    while let Some(frame) = output.next_frame().await? {
        match frame {
            ProcessFrame::Output { data, .. } => out.extend(data),
            ProcessFrame::Exit { .. } => exited = true,
            ProcessFrame::Unknown => {}
        }
    }
    Ok((info.pid, out, exited))
}

#[tokio::test]
async fn a_followed_start_is_one_call_to_a_protocol_6_agent() {
    let agent = FakeAgent::start(PROTOCOL_VERSION, |path| match path {
        "/v1/processes" => ndjson_reply(&format!("{STARTED}\n{EXITED}")),
        _ => json_reply("{}"),
    });
    let (pid, out, exited) = read_followed(&agent.client).await.unwrap();
    assert_eq!((pid, out.as_slice(), exited), (7, &b"hi"[..], true));
    assert_eq!(agent.calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_followed_start_is_a_start_then_a_follow_to_an_older_agent() {
    let agent = FakeAgent::start(5, |path| match path {
        "/v1/processes" => json_reply(STARTED),
        "/v1/processes/pr_1/output" => ndjson_reply(EXITED),
        _ => json_reply("{}"),
    });
    let (pid, out, exited) = read_followed(&agent.client).await.unwrap();
    assert_eq!((pid, out.as_slice(), exited), (7, &b"hi"[..], true));
    assert_eq!(agent.calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_followed_start_without_its_info_line_is_an_error() {
    let agent = FakeAgent::start(PROTOCOL_VERSION, |_| ndjson_reply("\n\n"));
    let err = read_followed(&agent.client).await.unwrap_err();
    assert!(matches!(err, GuestError::Cut { .. }), "{err:?}");
    assert_eq!(err.code(), ErrorCode::Unavailable);
}

#[tokio::test]
async fn service_calls_need_protocol_7() {
    let agent = FakeAgent::start(6, |_| json_reply(r#"{"services":[]}"#));
    let err = agent.client.services().await.unwrap_err();
    assert!(
        matches!(
            err,
            GuestError::Unsupported {
                call: Call::ServiceList,
                needs: 7,
                agent: 6
            }
        ),
        "{err:?}"
    );
    assert!(matches!(
        agent.client.service_logs("web", 0, false).await.err(),
        Some(GuestError::Unsupported {
            call: Call::ServiceLogs,
            ..
        })
    ));
    assert!(matches!(
        agent.client.service_restart("web").await.err(),
        Some(GuestError::Unsupported {
            call: Call::ServiceRestart,
            ..
        })
    ));
    assert_eq!(agent.calls.load(Ordering::SeqCst), 0, "nothing was sent");
}

const SERVICE: &str = r#"{"name":"web","state":"running","pid":9,"restarts":1,"log_end":6}"#;

#[tokio::test]
async fn a_services_list_logs_and_restart_reach_their_paths() {
    use berth_protocol::process::ProcessFrame;
    use berth_protocol::service::ServiceState;
    let agent = FakeAgent::start(7, |path| {
        match path {
        "/v1/services" => json_reply(&format!(r#"{{"services":[{SERVICE}]}}"#)),
        "/v1/services/web/logs" => ndjson_reply(
            "{\"type\":\"output\",\"stream\":\"stdout\",\"offset\":0,\"data\":\"aGVsbG8K\"}\n",
        ),
        "/v1/services/web/restart" => json_reply(SERVICE),
        _ => Reply::Raw(
            b"HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: 55\r\n\r\n{\"error\":{\"code\":\"not_found\",\"message\":\"no service x\"}}"
                .to_vec(),
        ),
    }
    });
    let list = agent.client.services().await.unwrap();
    assert_eq!(list.services.len(), 1);
    let web = &list.services[0];
    assert_eq!(
        (web.state, web.pid, web.restarts),
        (ServiceState::Running, Some(9), 1)
    );
    // Fields the agent left out take their defaults.
    assert_eq!((web.after.len(), web.keep_awake), (0, false));

    let mut logs = agent.client.service_logs("web", 0, false).await.unwrap();
    let Some(ProcessFrame::Output { offset, data, .. }) = logs.next_frame().await.unwrap() else {
        panic!("an output frame");
    };
    assert_eq!((offset, data.as_slice()), (0, &b"hello\n"[..]));
    assert!(
        logs.next_frame().await.unwrap().is_none(),
        "the stream ends with the log"
    );

    assert_eq!(
        agent.client.service_restart("web").await.unwrap().name,
        "web"
    );
    let err = agent.client.service_restart("x").await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::NotFound, "{err:?}");
}
