//! `GET /v1/boxes/{ref}/pty` through a standard WebSocket client (tokio-tungstenite) on a
//! real sandbox box: a resize reaches the program, output printed while detached is
//! replayed once on reattach, the exit status ends the socket, and a terminal keeps the box
//! awake while attached and within its grace, and no longer after: not even for a client
//! that stops reading while the program floods. The exit ends with a full closing handshake.

use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use http::{Method, StatusCode};
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use berth_server::{HostConfig, Runtimes};

use crate::end_to_end::{exec, sandbox, with_sandbox};
use crate::harness::TestServer;
use crate::idle::{stays, wait_state};

type Socket = WebSocketStream<TcpStream>;

async fn connect(server: &TestServer, query: &str) -> Result<Socket, (u16, String)> {
    let url = format!("ws://{}/v1/boxes/t1/pty?{query}", server.addr);
    let mut request = url.into_client_request().unwrap();
    request.headers_mut().insert(
        "authorization",
        format!("Bearer {}", server.key).parse().unwrap(),
    );
    let tcp = TcpStream::connect(server.addr).await.unwrap();
    match tokio_tungstenite::client_async(request, tcp).await {
        Ok((socket, _)) => Ok(socket),
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => Err((
            response.status().as_u16(),
            String::from_utf8_lossy(response.body().as_deref().unwrap_or_default()).into_owned(),
        )),
        Err(e) => panic!("WebSocket connect: {e}"),
    }
}

/// What a client has seen: the terminal's id, its first offset, the bytes, and the last
/// control message.
#[derive(Default)]
struct Seen {
    id: String,
    first_offset: u64,
    bytes: Vec<u8>,
    last: Option<Value>,
}

impl Seen {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }
}

/// Reads messages until `done` holds for what was seen, or the socket ends; 30 s at most.
async fn read_until(socket: &mut Socket, seen: &mut Seen, done: impl Fn(&Seen) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done(seen) {
        let left = deadline.saturating_duration_since(Instant::now());
        let message = tokio::time::timeout(left, socket.next())
            .await
            .unwrap_or_else(|_| panic!("nothing more in time; seen {:?}", seen.text()));
        match message {
            Some(Ok(Message::Binary(bytes))) => seen.bytes.extend_from_slice(&bytes),
            Some(Ok(Message::Text(text))) => {
                let value: Value = serde_json::from_str(text.as_str()).unwrap();
                if let Some(id) = value["id"].as_str() {
                    seen.id = id.to_owned();
                    seen.first_offset = value["offset"].as_u64().unwrap();
                } else {
                    seen.last = Some(value);
                }
            }
            Some(Ok(_)) => {}
            None | Some(Err(_)) => return,
        }
    }
}

async fn send_text(socket: &mut Socket, value: Value) {
    socket
        .send(Message::Text(value.to_string().into()))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_websocket_terminal_resizes_replays_what_it_missed_once_and_exits() {
    let Some(server) = with_sandbox().await else {
        return;
    };
    let (status, body) = server
        .call(Method::POST, "/v1/boxes", Some(json!({"name": "t1"})))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let script = "trap 'stty size' WINCH; echo ready; \
                  while [ ! -e /tmp/go ]; do sleep 0.05; done; echo printed-while-away; \
                  read line; echo got:$line; exit 5";
    let query = format!(
        "cmd=sh&cmd=-c&cmd={}&cols=90&rows=20",
        form_urlencoded::byte_serialize(script.as_bytes()).collect::<String>()
    );
    let mut socket = connect(&server, &query).await.unwrap();
    let mut seen = Seen::default();
    read_until(&mut socket, &mut seen, |s| s.text().contains("ready")).await;
    assert!(
        seen.id.starts_with("tm_"),
        "the first message names the terminal"
    );
    assert_eq!(seen.first_offset, 0);
    send_text(&mut socket, json!({"resize": {"cols": 111, "rows": 33}})).await;
    read_until(&mut socket, &mut seen, |s| s.text().contains("33 111")).await;
    // A bad control message is answered, and the terminal goes on.
    send_text(&mut socket, json!({"resize": "big"})).await;
    read_until(&mut socket, &mut seen, |s| s.last.is_some()).await;
    assert_eq!(
        seen.last.take().unwrap()["error"]["code"],
        "invalid_request"
    );

    // The connection drops; the program prints while no one is attached.
    drop(socket);
    exec(&server, "t1", &["touch", "/tmp/go"]).await;
    let received = seen.bytes.len() as u64;
    let query = format!("id={}&offset={received}", seen.id);
    let mut socket = connect(&server, &query).await.unwrap();
    let mut rest = Seen::default();
    read_until(&mut socket, &mut rest, |s| {
        s.text().contains("printed-while-away")
    })
    .await;
    assert_eq!(
        rest.first_offset, received,
        "resumes at what the client had"
    );
    seen.bytes.extend_from_slice(&rest.bytes);
    socket
        .send(Message::Binary(b"typed\n".to_vec().into()))
        .await
        .unwrap();
    read_until(&mut socket, &mut seen, |s| s.last.is_some()).await;
    assert_eq!(
        seen.last.as_ref().unwrap()["exit"]["code"],
        5,
        "{:?}",
        seen.last
    );
    let text = seen.text();
    assert_eq!(text.matches("ready").count(), 1, "{text:?}");
    assert_eq!(text.matches("printed-while-away").count(), 1, "{text:?}");
    assert!(text.contains("got:typed"), "{text:?}");

    // Reattaching to an unknown terminal, and a plain GET, are clear errors.
    let (status, body) = connect(&server, "id=tm_0000000000000000")
        .await
        .unwrap_err();
    assert_eq!(status, 404, "{body}");
    let (status, body) = server.call(Method::GET, "/v1/boxes/t1/pty", None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["error"]["code"], "invalid_request");
}

/// The exit is the server's last word, then a closing handshake the server waits out: had
/// it dropped the connection right after its Close, the client's Close would reach a closed
/// socket, and the reset that answers it can cost a client (Python's `websockets`) the exit
/// it had received but not yet read.
#[tokio::test]
async fn the_server_waits_for_the_clients_close_after_the_exit() {
    let Some(server) = with_sandbox().await else {
        return;
    };
    let (status, body) = server
        .call(Method::POST, "/v1/boxes", Some(json!({"name": "t1"})))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let mut socket = connect(&server, "cmd=sh&cmd=-c&cmd=exit%207")
        .await
        .unwrap();
    let mut seen = Seen::default();
    read_until(&mut socket, &mut seen, |s| s.last.is_some()).await;
    assert_eq!(seen.last.as_ref().unwrap()["exit"]["code"], 7);
    let close = tokio::time::timeout(Duration::from_secs(30), socket.next()).await;
    assert!(
        matches!(close, Ok(Some(Ok(Message::Close(_))))),
        "{close:?}"
    );
    // tungstenite sends its reply on the next poll: until then the server's side stays open.
    let mut byte = [0u8; 1];
    let early = tokio::time::timeout(
        Duration::from_secs(2),
        tokio::io::AsyncReadExt::read(socket.get_mut(), &mut byte),
    )
    .await;
    assert!(
        early.is_err(),
        "the server closed before the client's Close: {early:?}"
    );
    // The reply completes the handshake, and then the server closes.
    let end = tokio::time::timeout(Duration::from_secs(30), socket.next()).await;
    assert!(matches!(end, Ok(None | Some(Err(_)))), "{end:?}");
}

#[tokio::test]
async fn an_attached_terminal_keeps_the_box_awake_and_a_detached_one_only_for_its_grace() {
    let Some(server) = with_sandbox().await else {
        return;
    };
    let (status, body) = server
        .call(
            Method::POST,
            "/v1/boxes",
            Some(json!({"name": "t1", "stop_after_s": 1})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let mut socket = connect(&server, "cmd=sleep&cmd=600&grace_s=3")
        .await
        .unwrap();
    let mut seen = Seen::default();
    read_until(&mut socket, &mut seen, |s| !s.id.is_empty()).await;
    // Attached: several idle timeouts pass and the box stays up.
    stays(&server, "t1", "running", Duration::from_secs(4)).await;
    drop(socket);
    // Detached: the grace (3 s) keeps it up past its idle timeout (1 s), then it sleeps.
    let slept_after = wait_state(&server, "t1", "stopped", Duration::from_secs(60)).await;
    assert!(
        slept_after >= Duration::from_secs(2),
        "the box slept {slept_after:?} after the detach, inside the terminal's grace"
    );
}

#[tokio::test]
async fn a_reattach_brings_the_new_clients_window_size() {
    let Some(server) = with_sandbox().await else {
        return;
    };
    let (status, body) = server
        .call(Method::POST, "/v1/boxes", Some(json!({"name": "t1"})))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let script = "trap 'stty size' WINCH; echo ready; while :; do sleep 0.05; done";
    let query = format!(
        "cmd=sh&cmd=-c&cmd={}&cols=80&rows=24",
        form_urlencoded::byte_serialize(script.as_bytes()).collect::<String>()
    );
    let mut socket = connect(&server, &query).await.unwrap();
    let mut seen = Seen::default();
    read_until(&mut socket, &mut seen, |s| s.text().contains("ready")).await;
    drop(socket);
    let received = seen.bytes.len();
    let query = format!("id={}&offset={received}&cols=99&rows=11", seen.id);
    let mut socket = connect(&server, &query).await.unwrap();
    let mut after = Seen::default();
    read_until(&mut socket, &mut after, |s| s.text().contains("11 99")).await;
    // A reattach that names a new terminal's parameter is refused by name.
    let (status, body) = connect(&server, &format!("id={}&cmd=sh", seen.id))
        .await
        .unwrap_err();
    assert_eq!(status, 400);
    assert!(body.contains("cmd"), "{body}");
}

/// A daemon on the sandbox runtime whose terminals ping every second, and that counts the
/// client of a terminal or a stream as gone after [`SHORT_LIMIT`] of silence or of not
/// reading; with box `name`, which sleeps after a second of idleness.
pub(crate) async fn napping_box_with_short_stream_limits(name: &str) -> Option<TestServer> {
    let data = tempfile::tempdir().unwrap();
    let runtime = sandbox(data.path())
        .map_err(|why| berth_testkit::skip("sandbox", &why))
        .ok()?;
    let mut host = HostConfig::default();
    host.terminals.ping_every_s = 1;
    host.terminals.silent_limit_s = SHORT_LIMIT.as_secs();
    host.server.send_timeout_s = SHORT_LIMIT.as_secs();
    let runc = Some("runc".to_owned());
    let server = TestServer::start_with_host(Runtimes::single(runtime), runc, data, host).await;
    let created = json!({"name": name, "stop_after_s": 1});
    let (status, body) = server.call(Method::POST, "/v1/boxes", Some(created)).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    Some(server)
}

pub(crate) const SHORT_LIMIT: Duration = Duration::from_secs(3);

/// Box `name` sleeps soon after its client stopped reading: within [`SHORT_LIMIT`] and a
/// margin of `baseline`, the time from a client's goodbye to the box asleep.
pub(crate) async fn sleeps_on_time(server: &TestServer, name: &str, baseline: Duration) {
    let slept = wait_state(server, name, "stopped", Duration::from_secs(60)).await;
    eprintln!(
        "a client's goodbye to the box asleep: {baseline:?}; a client that stopped reading to the box asleep: {slept:?} (limits {SHORT_LIMIT:?})"
    );
    assert!(
        slept < baseline + SHORT_LIMIT + Duration::from_secs(20),
        "the box slept {slept:?} after the client stopped reading (baseline {baseline:?})"
    );
}

#[tokio::test]
async fn a_client_that_stops_reading_a_flooding_terminal_is_detached_and_the_box_sleeps() {
    let Some(server) = napping_box_with_short_stream_limits("t1").await else {
        return;
    };

    // A client that reads (and so answers every ping) stays attached past several limits.
    let mut live = connect(&server, "cmd=sleep&cmd=600&grace_s=1")
        .await
        .unwrap();
    let mut seen = Seen::default();
    read_until(&mut live, &mut seen, |s| !s.id.is_empty()).await;
    let reading = tokio::spawn(async move { while let Some(Ok(_)) = live.next().await {} });
    stays(&server, "t1", "running", 3 * SHORT_LIMIT).await;
    assert!(!reading.is_finished(), "a client that reads was detached");
    // The baseline: from a client's goodbye to the box asleep (grace, idle timeout, stop).
    reading.abort();
    let baseline = wait_state(&server, "t1", "stopped", Duration::from_secs(60)).await;

    // The attack: the program floods, the client never reads again.
    let mut flooded = connect(&server, "cmd=yes&cmd=flood&grace_s=1")
        .await
        .unwrap();
    let mut seen = Seen::default();
    read_until(&mut flooded, &mut seen, |s| s.bytes.len() > 64 * 1024).await;
    sleeps_on_time(&server, "t1", baseline).await;
    drop(flooded);
}
