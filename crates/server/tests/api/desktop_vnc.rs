//! `GET /v1/boxes/{ref}/desktop/vnc` through a standard WebSocket client
//! (tokio-tungstenite). On the fake runtime: a box whose template runs no `vnc` service is
//! 409 before any upgrade, a request that is no upgrade is 400, and neither wakes the box.
//! On a real sandbox box whose `vnc` service is a stand-in RFB server (it says its version
//! and echoes what it gets): RFB's bytes go both ways as binary messages under the
//! `binary` subprotocol; a viewer's requests do not keep the box awake, a person's pointer
//! events do; and when the box goes to sleep the daemon closes the socket with the reason.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_server::{HostConfig, Runtimes};
use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http::{Method, StatusCode};
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use crate::end_to_end::sandbox;
use crate::fake::FakeRuntime;
use crate::harness::{error_code, TestServer};
use crate::idle::{stays, wait_state};

type Socket = WebSocketStream<TcpStream>;

/// A template like `desktop`'s, on the fake runtime (whose agent dials no port).
const FAKE_DESKTOP: &str = r#"name = "desk"
base = "host"

[[services]]
name = "vnc"
command = ["berth-vnc"]
"#;

/// A stand-in for the desktop's VNC server on 127.0.0.1:5910: it sends RFB's version line,
/// then echoes every byte, one connection at a time.
const ECHO_RFB: &str = r#"import socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 5910))
s.listen(4)
while True:
    c, _ = s.accept()
    c.sendall(b"RFB 003.008\n")
    while True:
        data = c.recv(65536)
        if not data:
            break
        c.sendall(data)
    c.close()
"#;

/// The WebSocket handshake on `box_name`'s desktop, offering the `binary` subprotocol:
/// the socket and the subprotocol chosen, or the refusal's status and body.
async fn connect(
    server: &TestServer,
    box_name: &str,
) -> Result<(Socket, Option<String>), (u16, String)> {
    let url = format!("ws://{}/v1/boxes/{box_name}/desktop/vnc", server.addr);
    let mut request = url.into_client_request().unwrap();
    let headers = request.headers_mut();
    headers.insert(
        "authorization",
        format!("Bearer {}", server.key).parse().unwrap(),
    );
    headers.insert("sec-websocket-protocol", "binary".parse().unwrap());
    let tcp = TcpStream::connect(server.addr).await.unwrap();
    match tokio_tungstenite::client_async(request, tcp).await {
        Ok((socket, response)) => {
            let protocol = response
                .headers()
                .get("sec-websocket-protocol")
                .map(|v| v.to_str().unwrap().to_owned());
            Ok((socket, protocol))
        }
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => Err((
            response.status().as_u16(),
            String::from_utf8_lossy(response.body().as_deref().unwrap_or_default()).into_owned(),
        )),
        Err(e) => panic!("WebSocket connect: {e}"),
    }
}

/// Reads binary messages until they add up to `want`; 30 s at most.
async fn read_exactly(socket: &mut Socket, want: &[u8]) {
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while got.len() < want.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, socket.next()).await {
            Ok(Some(Ok(Message::Binary(bytes)))) => got.extend_from_slice(&bytes),
            Ok(Some(Ok(Message::Ping(_) | Message::Pong(_)))) => {}
            other => panic!("waiting for {want:?}, got {got:?} then {other:?}"),
        }
    }
    assert_eq!(got, want);
}

async fn send(socket: &mut Socket, bytes: &[u8]) {
    socket
        .send(Message::Binary(Bytes::copy_from_slice(bytes)))
        .await
        .unwrap();
}

#[tokio::test]
async fn no_desktop_is_409_and_no_upgrade_400_and_neither_wakes_the_box() {
    let data = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(data.path().join("templates")).unwrap();
    std::fs::write(data.path().join("templates/desk.toml"), FAKE_DESKTOP).unwrap();
    let fake = Arc::new(FakeRuntime::pausing(data.path().to_owned()));
    let server = TestServer::start(fake.clone(), None, data).await;
    for (name, template) in [("plain", None), ("desk", Some("desk"))] {
        let created = json!({"name": name, "template": template});
        let (status, body) = server.call(Method::POST, "/v1/boxes", Some(created)).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }

    // No `vnc` service: 409, to a WebSocket handshake and to a plain GET alike.
    let (status, body) = connect(&server, "plain").await.err().unwrap();
    assert_eq!(status, 409, "{body}");
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(error_code(&body), "conflict");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("has no desktop"), "{message}");
    let (status, body) = server
        .call(Method::GET, "/v1/boxes/plain/desktop/vnc", None)
        .await;
    assert_eq!(
        (status, error_code(&body)),
        (StatusCode::CONFLICT, "conflict")
    );

    // A desktop, but no upgrade asked for: 400.
    let (status, body) = server
        .call(Method::GET, "/v1/boxes/desk/desktop/vnc", None)
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(error_code(&body), "invalid_request");
    // Without a key: 401, whatever the box.
    let (status, _, _) = server
        .raw(
            Method::GET,
            "/v1/boxes/desk/desktop/vnc",
            None,
            &[],
            Bytes::new(),
        )
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    // None of it woke a box.
    assert_eq!(fake.starts.load(Ordering::SeqCst), 0, "a box was woken");
    for name in ["plain", "desk"] {
        let (_, body) = server
            .call(Method::GET, &format!("/v1/boxes/{name}"), None)
            .await;
        assert_eq!(body["state"], "stopped", "{name}");
    }
}

/// A daemon on the sandbox runtime pinging every second, with box `d1` of a template whose
/// `vnc` service is [`ECHO_RFB`]; the box sleeps after a second of idleness.
async fn echo_desktop() -> Option<TestServer> {
    let data = tempfile::tempdir().unwrap();
    let runtime = sandbox(data.path())
        .map_err(|why| berth_testkit::skip("sandbox", &why))
        .ok()?;
    let template = format!(
        "name = \"desk\"\nbase = \"host\"\n\n[[services]]\nname = \"vnc\"\ncommand = [\"python3\", \"-c\", {}]\nready = {{ port = 5910 }}\n",
        toml_string(ECHO_RFB)
    );
    std::fs::create_dir_all(data.path().join("templates")).unwrap();
    std::fs::write(data.path().join("templates/desk.toml"), template).unwrap();
    let mut host = HostConfig::default();
    host.terminals.ping_every_s = 1;
    let runc = Some("runc".to_owned());
    let server = TestServer::start_with_host(Runtimes::single(runtime), runc, data, host).await;
    let created = json!({"name": "d1", "template": "desk", "stop_after_s": 1});
    let (status, body) = server.call(Method::POST, "/v1/boxes", Some(created)).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    Some(server)
}

/// `text` as a TOML basic string.
fn toml_string(text: &str) -> String {
    serde_json::to_string(text).unwrap()
}

#[tokio::test]
async fn rfb_goes_both_ways_and_only_input_keeps_the_box_awake() {
    let Some(server) = echo_desktop().await else {
        return;
    };
    // Connecting wakes the box; the server speaks first.
    let (mut socket, protocol) = connect(&server, "d1").await.unwrap();
    assert_eq!(protocol.as_deref(), Some("binary"));
    read_exactly(&mut socket, b"RFB 003.008\n").await;
    let handshake = b"RFB 003.008\n\x01\x01";
    send(&mut socket, handshake).await;
    read_exactly(&mut socket, handshake).await;

    // Input: a pointer event every 300 ms keeps the box up past several idle timeouts.
    let pointer = [5u8, 1, 0, 10, 0, 20];
    let began = Instant::now();
    while began.elapsed() < Duration::from_secs(4) {
        send(&mut socket, &pointer).await;
        read_exactly(&mut socket, &pointer).await;
        let (_, body) = server.call(Method::GET, "/v1/boxes/d1", None).await;
        assert_eq!(body["state"], "running", "after {:?}", began.elapsed());
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    // Watching: update requests (and the pongs) do not; the box sleeps, and the daemon
    // closes the socket with the reason.
    let watching = tokio::spawn(async move {
        let request = [3u8, 1, 0, 0, 0, 0, 4, 0, 3, 0];
        loop {
            if socket
                .send(Message::Binary(Bytes::copy_from_slice(&request)))
                .await
                .is_err()
            {
                return None;
            }
            let deadline = Instant::now() + Duration::from_millis(300);
            while let Ok(message) = tokio::time::timeout_at(deadline.into(), socket.next()).await {
                match message {
                    Some(Ok(Message::Close(frame))) => return frame,
                    None | Some(Err(_)) => return None,
                    Some(Ok(_)) => {}
                }
            }
        }
    });
    wait_state(&server, "d1", "stopped", Duration::from_secs(60)).await;
    let close = tokio::time::timeout(Duration::from_secs(30), watching)
        .await
        .expect("the socket closes once the box sleeps")
        .unwrap()
        .expect("a Close frame");
    assert_eq!(close.code, CloseCode::Normal);
    assert!(close.reason.contains("VNC server"), "{}", close.reason);
    stays(&server, "d1", "stopped", Duration::from_secs(2)).await;
}
