//! Whole directories and watches, with real sandbox boxes: tars that try to write outside
//! their target are refused and nothing lands outside; a watch sees what an exec does; a
//! reader that does not keep up is told `overflow`.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};

use crate::end_to_end::{exec, with_sandbox};
use berth_testkit::raw_tar::{archive, entry};

use crate::harness::{error_code, TestServer};

async fn create_box(server: &TestServer, body: Value) {
    let (status, answer) = server.call(Method::POST, "/v1/boxes", Some(body)).await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
}

/// Polls box `name` until it is stopped; `deadline` passed fails with `why`.
async fn wait_stopped(server: &TestServer, name: &str, deadline: Instant, why: &str) {
    loop {
        let (_, view) = server
            .call(Method::GET, &format!("/v1/boxes/{name}"), None)
            .await;
        if view["state"] == "stopped" {
            return;
        }
        assert!(Instant::now() < deadline, "still {} {why}", view["state"]);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn tar(entries: &[Vec<u8>]) -> Bytes {
    Bytes::from(archive(entries))
}

async fn put_tar(server: &TestServer, name: &str, path: &str, body: Bytes) -> (StatusCode, Value) {
    let (status, _, bytes) = server
        .raw(
            Method::PUT,
            &format!("/v1/boxes/{name}/files/archive?path={path}"),
            Some(&server.key),
            &[("content-type", "application/x-tar")],
            body,
        )
        .await;
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

#[tokio::test]
async fn end_to_end_tars_that_reach_outside_their_target_are_refused() {
    let Some(mut server) = with_sandbox().await else {
        return;
    };
    create_box(&server, json!({"name":"arc"})).await;
    let out = exec(
        &server,
        "arc",
        &[
            "sh",
            "-c",
            "mkdir -p ~/outside ~/target && echo s > ~/outside/secret && ln -s ~/outside ~/target/planted",
        ],
    )
    .await;
    assert_eq!(out["exit_code"], 0, "{out}");

    let attacks = berth_testkit::raw_tar::attacks("/home/user/outside");
    for (name, body) in attacks {
        let name = name.as_str();
        let (status, answer) = put_tar(&server, "arc", "/home/user/target", body.into()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{name}: {answer}");
        assert_eq!(error_code(&answer), "invalid_request", "{name}: {answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains(name), "{name}: {message}");
    }
    // Nothing landed outside the target, or in the target from the refused entries.
    let out = exec(
        &server,
        "arc",
        &[
            "sh",
            "-c",
            "ls -A ~/outside; ls -A ~/target; test ! -e /etc/x && echo no-etc-x; \
             stat -c %h ~/outside/secret",
        ],
    )
    .await;
    assert_eq!(out["stdout"], "secret\nplanted\nno-etc-x\n1\n", "{out}");

    // Garbage is not a tar.
    let (status, answer) = put_tar(
        &server,
        "arc",
        "/home/user/target",
        Bytes::from(vec![b'x'; 4096]),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");

    // A good one goes in, as the box user, and comes back out.
    let good = tar(&[
        entry(b'5', "d", "", b""),
        entry(b'0', "d/f", "", b"hello"),
        entry(b'2', "d/l", "f", b""),
    ]);
    let (status, answer) = put_tar(&server, "arc", "/home/user/new/t", good).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(
        answer,
        json!({"files":1,"dirs":1,"links":1,"bytes":5}),
        "{answer}"
    );
    let out = exec(
        &server,
        "arc",
        &[
            "sh",
            "-c",
            "stat -c '%U %a' ~/new/t/d/f; readlink ~/new/t/d/l",
        ],
    )
    .await;
    assert_eq!(out["stdout"], "user 644\nf\n", "{out}");
    let (status, headers, body) = server
        .raw(
            Method::GET,
            "/v1/boxes/arc/files/archive?path=/home/user/new/t",
            Some(&server.key),
            &[],
            Bytes::new(),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers["content-type"], "application/x-tar");
    assert_eq!(body.len() % 512, 0);
    let names: Vec<String> = tar_names(&body);
    assert_eq!(names, ["d", "d/f", "d/l"], "{names:?}");

    // A path the box user cannot read is the call's error, before any tar.
    let (status, _, body) = server
        .raw(
            Method::GET,
            "/v1/boxes/arc/files/archive?path=/var/lib/berth",
            Some(&server.key),
            &[],
            Bytes::new(),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body:?}");
    server.shut_down().await;
}

/// The entry names of a tar (ustar headers only, as berth-init writes for short names).
fn tar_names(tar: &[u8]) -> Vec<String> {
    let mut names = Vec::new();
    let mut at = 0;
    while at + 512 <= tar.len() && tar[at] != 0 {
        let h = &tar[at..at + 512];
        let name = String::from_utf8_lossy(&h[..100])
            .trim_end_matches('\0')
            .trim_end_matches('/')
            .to_owned();
        let size_field = String::from_utf8_lossy(&h[124..136]);
        let size =
            u64::from_str_radix(size_field.trim_matches(|c| c == '\0' || c == ' '), 8).unwrap();
        names.push(name);
        at += 512 + usize::try_from(size.next_multiple_of(512)).unwrap();
    }
    names.sort();
    names
}

/// A streamed answer (NDJSON, read a line at a time, or any other). The socket's receive buffer is kept
/// small, so a reader that stops reading soon pushes back on the daemon.
struct Lines {
    body: Incoming,
    buf: Vec<u8>,
}

impl Lines {
    async fn open(server: &TestServer, path: &str) -> Lines {
        Lines::open_as(server, path, "application/x-ndjson").await
    }

    async fn open_as(server: &TestServer, path: &str, content_type: &str) -> Lines {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        let stream = socket.connect(server.addr).await.unwrap();
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .unwrap();
        tokio::spawn(conn);
        let request = http::Request::builder()
            .uri(path)
            .header("host", "berth")
            .header("authorization", format!("Bearer {}", server.key))
            .body(Empty::<Bytes>::new())
            .unwrap();
        let response = sender.send_request(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()["content-type"], content_type);
        Lines {
            body: response.into_body(),
            buf: Vec::new(),
        }
    }

    /// The next event (keepalive lines skipped), or a failure naming `what` at `deadline`.
    async fn next(&mut self, deadline: Instant, what: &str) -> Value {
        loop {
            if let Some(pos) = self.buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=pos).collect();
                if line.len() > 1 {
                    return serde_json::from_slice(&line).unwrap();
                }
                continue;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let frame = tokio::time::timeout(left, self.body.frame())
                .await
                .unwrap_or_else(|_| panic!("no {what} before the deadline"))
                .expect("the watch ended")
                .unwrap();
            if let Ok(data) = frame.into_data() {
                self.buf.extend_from_slice(&data);
            }
        }
    }

    /// Reads until an event equal to `want`; returns everything read.
    async fn until(&mut self, want: &Value, deadline: Instant) -> Vec<Value> {
        let mut seen = Vec::new();
        loop {
            let event = self.next(deadline, &want.to_string()).await;
            let found = &event == want;
            seen.push(event);
            if found {
                return seen;
            }
        }
    }
}

#[tokio::test]
async fn end_to_end_a_watch_sees_what_an_exec_does_and_a_slow_reader_gets_overflow() {
    let Some(mut server) = with_sandbox().await else {
        return;
    };
    create_box(&server, json!({"name":"w"})).await;
    let out = exec(&server, "w", &["mkdir", "-p", "/home/user/w/sub"]).await;
    assert_eq!(out["exit_code"], 0, "{out}");

    let mut watch = Lines::open(
        &server,
        "/v1/boxes/w/files/watch?path=/home/user/w&recursive=true",
    )
    .await;
    let out = exec(
        &server,
        "w",
        &[
            "sh",
            "-c",
            "cd ~/w && echo a > sub/f && echo b >> sub/f && mv sub/f g && rm g && mkdir n && touch n/x",
        ],
    )
    .await;
    assert_eq!(out["exit_code"], 0, "{out}");
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen = Vec::new();
    for want in [
        json!({"type":"create","path":"sub/f","dir":false}),
        json!({"type":"modify","path":"sub/f","dir":false}),
        json!({"type":"rename","from":"sub/f","to":"g","dir":false}),
        json!({"type":"delete","path":"g","dir":false}),
        json!({"type":"create","path":"n","dir":true}),
    ] {
        seen.extend(watch.until(&want, deadline).await);
    }
    // `n/x` may be made before the watch on `n` is: then only `n` is reported.
    drop(watch);

    // A reader that stops reading: the box's queue fills and an `overflow` is owed, then
    // sent once the reader catches up.
    let mut slow = Lines::open(&server, "/v1/boxes/w/files/watch?path=/home/user/w").await;
    let out = exec(
        &server,
        "w",
        &[
            "sh",
            "-c",
            "cd ~/w && for r in 1 2 3 4; do seq -f f%g 1 20000 | xargs touch && seq -f f%g 1 20000 | xargs rm; done",
        ],
    )
    .await;
    assert_eq!(out["exit_code"], 0, "{out}");
    // 160,000 events were made; far fewer fit in the queue and the sockets between.
    let deadline = Instant::now() + Duration::from_secs(120);
    let overflow = json!({"type":"overflow"});
    let before = slow.until(&overflow, deadline).await.len();
    eprintln!("{before} events before the overflow");
    assert!(before < 160_000, "{before} events before the overflow");
    drop(slow);
    server.shut_down().await;
}

/// A watch is watching, not work: a box with only a watch open idles out and stops, and the
/// watch ends with it.
#[tokio::test]
async fn end_to_end_a_watch_alone_does_not_keep_a_box_awake() {
    let Some(mut server) = with_sandbox().await else {
        return;
    };
    create_box(&server, json!({"name":"idle", "stop_after_s": 2})).await;
    let out = exec(&server, "idle", &["mkdir", "-p", "/home/user/w"]).await;
    assert_eq!(out["exit_code"], 0, "{out}");
    let mut watch = Lines::open(&server, "/v1/boxes/idle/files/watch?path=/home/user/w").await;
    let deadline = Instant::now() + Duration::from_secs(60);
    wait_stopped(&server, "idle", deadline, "with a watch open").await;
    // The box is gone, and so is the watch: its stream ends (cut or closed).
    let left = deadline.saturating_duration_since(Instant::now());
    let end = tokio::time::timeout(left, async {
        loop {
            match watch.body.frame().await {
                None | Some(Err(_)) => return,
                Some(Ok(_)) => continue,
            }
        }
    })
    .await;
    assert!(end.is_ok(), "the watch outlived its box");
    server.shut_down().await;
}

/// An archive read is work: while its tar is still streaming (the client reads slowly),
/// the box does not idle out; once it is done, the box does.
#[tokio::test]
async fn end_to_end_an_archive_being_read_keeps_its_box_awake() {
    let Some(mut server) = with_sandbox().await else {
        return;
    };
    create_box(&server, json!({"name":"busy", "stop_after_s": 1})).await;
    let out = exec(
        &server,
        "busy",
        &[
            "sh",
            "-c",
            "mkdir ~/big && head -c 134217728 /dev/zero > ~/big/zeros",
        ],
    )
    .await;
    assert_eq!(out["exit_code"], 0, "{out}");
    // The client reads nothing for three idle timeouts: the tar waits in the sockets.
    let mut tar = Lines::open_as(
        &server,
        "/v1/boxes/busy/files/archive?path=/home/user/big",
        "application/x-tar",
    )
    .await;
    let began = Instant::now();
    while began.elapsed() < Duration::from_secs(3) {
        let (_, view) = server.call(Method::GET, "/v1/boxes/busy", None).await;
        assert_eq!(view["state"], "running", "after {:?}", began.elapsed());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut received = 0u64;
    while let Some(frame) = tar.body.frame().await {
        if let Ok(data) = frame.unwrap().into_data() {
            received += data.len() as u64;
        }
    }
    assert!(received > 128 * 1024 * 1024, "{received}");
    let deadline = Instant::now() + Duration::from_secs(60);
    wait_stopped(&server, "busy", deadline, "after the read").await;
    server.shut_down().await;
}

/// Archive reads whose clients read nothing hold no shared worker: more of them than
/// berth-init's blocking pool has threads, and a file call still answers.
#[tokio::test]
async fn end_to_end_stalled_archive_readers_do_not_hold_up_file_calls() {
    let Some(mut server) = with_sandbox().await else {
        return;
    };
    create_box(&server, json!({"name":"stall"})).await;
    let out = exec(
        &server,
        "stall",
        &[
            "sh",
            "-c",
            "mkdir ~/big && head -c 67108864 /dev/zero > ~/big/zeros && echo hi > ~/small",
        ],
    )
    .await;
    assert_eq!(out["exit_code"], 0, "{out}");
    // Each step is bounded: a worker held by a stalled reader would make the next open,
    // or the file read, wait for ever.
    let within = Duration::from_secs(30);
    let mut stalled = Vec::new();
    for _ in 0..6 {
        let open = Lines::open_as(
            &server,
            "/v1/boxes/stall/files/archive?path=/home/user/big",
            "application/x-tar",
        );
        let opened = tokio::time::timeout(within, open).await;
        stalled.push(opened.expect("an archive read waited behind stalled ones"));
    }
    let read = server.raw(
        Method::GET,
        "/v1/boxes/stall/files?path=/home/user/small",
        Some(&server.key),
        &[],
        Bytes::new(),
    );
    let read = tokio::time::timeout(within, read)
        .await
        .expect("a file read waited behind stalled archive reads");
    assert_eq!((read.0, read.2.as_ref()), (StatusCode::OK, &b"hi\n"[..]));
    drop(stalled);
    server.shut_down().await;
}
