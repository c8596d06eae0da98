//! The dial against a fake agent on a Unix socket that hands the socket over, refuses the
//! handoff as an agent from before it does, or says nothing listens; and an "app" on
//! loopback that answers each 4 bytes with the same in upper case.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use berth_protocol::ErrorCode;
use berth_runtime::{BootToken, GuestAddr};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, UnixListener, UnixStream};

use super::*;

/// What the fake agent answers to a handoff.
#[derive(Debug, Clone, Copy)]
enum Handoff {
    /// Connects to the app and sends the socket, as berth-init in a sandbox does.
    Hands,
    /// `404`: an agent from before the handoff.
    Unknown,
    /// `503 unavailable`: nothing listens on the port.
    NothingListens,
}

struct FakeAgent {
    _dir: tempfile::TempDir,
    client: GuestClient,
    /// Upgrades (relayed connections) it served.
    relayed: Arc<AtomicUsize>,
}

fn answer(status: &str, code: &str) -> String {
    let body = format!(r#"{{"error":{{"code":"{code}","message":"said the fake"}}}}"#);
    format!(
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
}

impl FakeAgent {
    fn start(app: std::net::SocketAddr, handoff: Handoff) -> FakeAgent {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let relayed = Arc::new(AtomicUsize::new(0));
        let count = relayed.clone();
        tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                tokio::spawn(serve(stream, app, handoff, count.clone()));
            }
        });
        FakeAgent {
            client: GuestClient::new(GuestAddr::Unix(path), BootToken::from_random([3; 32])),
            _dir: dir,
            relayed,
        }
    }
}

async fn serve(
    mut stream: UnixStream,
    app: std::net::SocketAddr,
    handoff: Handoff,
    relayed: Arc<AtomicUsize>,
) {
    // The host's requests have no body: the head is all it sends.
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buf).await {
            Ok(n) if n > 0 => head.extend_from_slice(&buf[..n]),
            _ => return,
        }
    }
    let head = String::from_utf8_lossy(&head);
    let line = head.lines().next().unwrap_or("");
    let (method, path) = line.split_once(' ').unwrap();
    let path = path.split(' ').next().unwrap();
    match (method, path, handoff) {
        ("GET", "/v1/info", _) => {
            let body = r#"{"protocol_version":4,"boot_id":"b"}"#;
            let answer = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(answer.as_bytes()).await;
        }
        ("POST", _, Handoff::Hands) => {
            let socket = tokio::net::TcpStream::connect(app).await.unwrap();
            let fd: std::os::fd::OwnedFd = socket.into_std().unwrap().into();
            berth_handoff::send(&stream, fd).await.unwrap();
            let _ = stream.write_all(b"HTTP/1.1 204 No Content\r\n\r\n").await;
        }
        ("POST", _, Handoff::Unknown) => {
            let _ = stream
                .write_all(answer("404 Not Found", "not_found").as_bytes())
                .await;
        }
        ("POST", _, Handoff::NothingListens) => {
            let answer = answer("503 Service Unavailable", "unavailable");
            let _ = stream.write_all(answer.as_bytes()).await;
        }
        ("GET", _, _) => {
            relayed.fetch_add(1, Ordering::SeqCst);
            let mut app = tokio::net::TcpStream::connect(app).await.unwrap();
            let switching = "HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\nupgrade: berth-tcp\r\n\r\n";
            stream.write_all(switching.as_bytes()).await.unwrap();
            let _ = tokio::io::copy_bidirectional(&mut stream, &mut app).await;
        }
        other => panic!("the fake agent got {other:?}"),
    }
}

/// An app that answers each 4 bytes with the same in upper case.
async fn app() -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (mut conn, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                let mut buf = [0u8; 4];
                while conn.read_exact(&mut buf).await.is_ok() {
                    let _ = conn.write_all(&buf.to_ascii_uppercase()).await;
                }
            });
        }
    });
    addr
}

async fn round_trip(stream: AppStream) -> [u8; 4] {
    let mut stream = stream.into_io();
    stream.write_all(b"ping").await.unwrap();
    let mut buf = [0u8; 4];
    stream.read_exact(&mut buf).await.unwrap();
    buf
}

#[tokio::test]
async fn a_handed_socket_reaches_the_app_with_nothing_relayed() {
    let agent = FakeAgent::start(app().await, Handoff::Hands);
    let stream = dial(&agent.client, 8000, HandoffSender::ThisProcess)
        .await
        .unwrap();
    assert!(matches!(stream, AppStream::Handed(_)), "{stream:?}");
    assert_eq!(&round_trip(stream).await, b"PING");
    assert_eq!(agent.relayed.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn an_agent_without_the_handoff_is_reached_through_its_relay() {
    let agent = FakeAgent::start(app().await, Handoff::Unknown);
    let stream = dial(&agent.client, 8000, HandoffSender::ThisProcess)
        .await
        .unwrap();
    assert!(matches!(stream, AppStream::Relayed(_)), "{stream:?}");
    assert_eq!(&round_trip(stream).await, b"PING");
    assert_eq!(agent.relayed.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_socket_not_from_the_boxs_init_is_refused_and_the_relay_used() {
    // The fake runs in this process, not as PID 1 of a namespace below it.
    let agent = FakeAgent::start(app().await, Handoff::Hands);
    let stream = dial(&agent.client, 8000, HandoffSender::BoxInit)
        .await
        .unwrap();
    assert!(matches!(stream, AppStream::Relayed(_)), "{stream:?}");
    assert_eq!(&round_trip(stream).await, b"PING");
}

#[tokio::test]
async fn nothing_listening_is_the_answer_without_trying_the_relay() {
    let agent = FakeAgent::start(app().await, Handoff::NothingListens);
    let err = dial(&agent.client, 8000, HandoffSender::ThisProcess)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, GuestError::Remote { status: 503, body } if body.error.code == ErrorCode::Unavailable),
        "{err:?}"
    );
    assert_eq!(agent.relayed.load(Ordering::SeqCst), 0);
}
