//! Who may hold the API's connections, over raw TCP from several loopback addresses (as
//! different clients would come): a tenant never holds more than `max_connections` less
//! the share kept for others, one address without a key holds a bounded number, and a
//! connection without a key must send its first request soon.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use berth_server::host_config::ServerHostConfig;
use berth_server::HostConfig;
use http::{Method, StatusCode};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::event_limits::without_runtime;
use crate::harness::TestServer;

const GREEDY: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
const OTHER: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 3);
/// How long an answer may take on a loaded machine; a connection left waiting in the
/// listen backlog gets none.
const ANSWER_WITHIN: Duration = Duration::from_secs(10);

async fn server_with(server: ServerHostConfig) -> TestServer {
    without_runtime(HostConfig {
        server,
        ..Default::default()
    })
    .await
}

/// A connection to `to` from the loopback address `from`.
pub(crate) async fn connect_from(from: Ipv4Addr, to: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::new(from.into(), 0)).unwrap();
    socket.connect(to).await.unwrap()
}

/// One answer read off a connection.
#[derive(Debug)]
struct Answer {
    status: u16,
    /// The head, lowercased.
    head: String,
    body: String,
}

/// Sends `GET path` (with the key, if any) on `conn` and reads the answer; `None` if the
/// connection closed first.
async fn get(conn: &mut TcpStream, path: &str, key: Option<&str>) -> Option<Answer> {
    let auth = key
        .map(|k| format!("Authorization: Bearer {k}\r\n"))
        .unwrap_or_default();
    let request = format!("GET {path} HTTP/1.1\r\nHost: berth\r\n{auth}\r\n");
    conn.write_all(request.as_bytes()).await.ok()?;
    read_answer(conn).await
}

/// The next answer on `conn` (a `Content-Length` body); `None` if it closed first.
async fn read_answer(conn: &mut TcpStream) -> Option<Answer> {
    let mut bytes = Vec::new();
    let mut buf = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = bytes.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match conn.read(&mut buf).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => bytes.extend_from_slice(&buf[..n]),
        }
    };
    let head = String::from_utf8_lossy(&bytes[..head_end]).to_lowercase();
    let status = head.split(' ').nth(1)?.parse().ok()?;
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    while bytes.len() < head_end + length {
        match conn.read(&mut buf).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => bytes.extend_from_slice(&buf[..n]),
        }
    }
    let body = String::from_utf8_lossy(&bytes[head_end..head_end + length]).into_owned();
    Some(Answer { status, head, body })
}

/// Whether the server closes `conn` within `within` (reading and dropping what it sends).
async fn closed_within(conn: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 4096];
    tokio::time::timeout(within, async {
        loop {
            match conn.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .is_ok()
}

/// A refusal of a connection: 429 with `Retry-After`, the JSON error, and `Connection: close`.
fn assert_refused(answer: &Answer, what: &str) {
    assert_eq!(answer.status, 429, "{what}: {answer:?}");
    assert!(
        answer.head.contains("\r\nconnection: close\r\n"),
        "{what}: {answer:?}"
    );
    assert!(
        answer.head.contains("\r\nretry-after: "),
        "{what}: {answer:?}"
    );
    assert!(
        answer.body.contains("\"too_many_requests\""),
        "{what}: {answer:?}"
    );
}

#[tokio::test]
async fn a_tenant_cannot_take_every_connection() {
    let server = server_with(ServerHostConfig {
        max_connections: 8,
        // Held connections must not be cut as idle during the test.
        header_timeout_s: 60,
        ..Default::default()
    })
    .await;
    let (status, created) = server
        .call(Method::POST, "/v1/tenants", Some(json!({"name": "greedy"})))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let greedy_key = created["api_key"].as_str().unwrap().to_owned();

    // The greedy tenant opens every connection the daemon serves, each making a call and
    // then kept open.
    let mut held = Vec::new();
    let mut refusals = Vec::new();
    for _ in 0..8 {
        let mut conn = connect_from(GREEDY, server.addr).await;
        let answer = tokio::time::timeout(
            ANSWER_WITHIN,
            get(&mut conn, "/v1/boxes", Some(&greedy_key)),
        )
        .await
        .expect("the greedy tenant's connection is served or refused, not left waiting")
        .expect("an answer before the connection closed");
        if answer.status == 200 {
            held.push(conn);
        } else {
            refusals.push((answer, conn));
        }
    }
    eprintln!(
        "greedy tenant: {} connections held, {} refused",
        held.len(),
        refusals.len()
    );

    // Another tenant, and a client without a key, are still served.
    for (key, path) in [
        (Some(server.key.as_str()), "/v1/boxes"),
        (None, "/v1/health"),
    ] {
        let began = Instant::now();
        let mut conn = connect_from(OTHER, server.addr).await;
        let answer = tokio::time::timeout(ANSWER_WITHIN, get(&mut conn, path, key))
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "{path} waited {ANSWER_WITHIN:?} unanswered while one tenant held {} connections",
                    held.len()
                )
            })
            .expect("an answer");
        assert_eq!(answer.status, 200, "{path}: {answer:?}");
        eprintln!(
            "{path} from another client answered in {:?}",
            began.elapsed()
        );
    }

    // A quarter of 8 is kept for others: the greedy tenant holds 6, its 7th and 8th are
    // refused at once and closed.
    assert_eq!(held.len(), 6, "connections held by one tenant");
    for (answer, mut conn) in refusals {
        assert_refused(&answer, "the greedy tenant's connection over its share");
        assert!(
            answer.body.contains("connections"),
            "the message names what is over: {answer:?}"
        );
        assert!(
            closed_within(&mut conn, ANSWER_WITHIN).await,
            "a refused connection is closed"
        );
    }

    // One of its connections closes: its share has room again.
    drop(held.pop());
    let deadline = Instant::now() + ANSWER_WITHIN;
    loop {
        let mut conn = connect_from(GREEDY, server.addr).await;
        let answer = get(&mut conn, "/v1/boxes", Some(&greedy_key))
            .await
            .expect("an answer");
        if answer.status == 200 {
            break;
        }
        assert_refused(&answer, "while the closed connection is not yet seen");
        assert!(
            Instant::now() < deadline,
            "the connection's share never came back"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn one_address_without_a_key_cannot_take_every_connection() {
    let server = server_with(ServerHostConfig {
        header_timeout_s: 60,
        ..Default::default()
    })
    .await;
    // Slow clients from one address: each sends part of its headers, then nothing.
    const ADDRESS_CAP: usize = 64;
    assert_eq!(
        ServerHostConfig::default().max_anonymous_connections_per_address,
        ADDRESS_CAP
    );
    let mut slow = Vec::new();
    for _ in 0..ADDRESS_CAP {
        let mut conn = connect_from(GREEDY, server.addr).await;
        conn.write_all(b"GET /v1/health HTTP/1.1\r\nHost: ber")
            .await
            .unwrap();
        slow.push(conn);
    }
    // One more from that address is answered at once, and closed: not held.
    let began = Instant::now();
    let mut one_more = connect_from(GREEDY, server.addr).await;
    let answer = tokio::time::timeout(ANSWER_WITHIN, get(&mut one_more, "/v1/health", None))
        .await
        .expect("an answer, not a wait")
        .expect("an answer before the connection closed");
    eprintln!(
        "connection {} from one address: {} in {:?}",
        ADDRESS_CAP + 1,
        answer.status,
        began.elapsed()
    );
    assert_refused(&answer, "one connection over the address's cap");
    assert!(closed_within(&mut one_more, ANSWER_WITHIN).await);

    // Another address is served meanwhile.
    let mut conn = connect_from(OTHER, server.addr).await;
    let answer = tokio::time::timeout(ANSWER_WITHIN, get(&mut conn, "/v1/health", None))
        .await
        .expect("health from another address answered")
        .expect("an answer");
    assert_eq!(answer.status, 200, "{answer:?}");
    drop(slow);
}

#[tokio::test]
async fn a_connection_without_a_key_must_send_its_first_request_soon() {
    // The header timeout is long; the first request's deadline (5 s by default) is not.
    let server = server_with(ServerHostConfig {
        header_timeout_s: 60,
        ..Default::default()
    })
    .await;
    let first_request = Duration::from_secs(ServerHostConfig::default().first_request_timeout_s);
    let slack = Duration::from_secs(8);
    let began = Instant::now();
    let mut silent = connect_from(GREEDY, server.addr).await;
    let mut partial = connect_from(GREEDY, server.addr).await;
    partial
        .write_all(b"GET /v1/health HTTP/1.1\r\nHost: ber")
        .await
        .unwrap();
    let (silent_closed, partial_closed) = tokio::join!(
        closed_within(&mut silent, first_request + slack),
        closed_within(&mut partial, first_request + slack),
    );
    let took = began.elapsed();
    assert!(
        silent_closed && partial_closed,
        "a connection without a request (silent: {silent_closed}, partial headers: \
         {partial_closed}) was still open after {took:?}"
    );
    assert!(
        took >= first_request,
        "cut after {took:?}, before the deadline"
    );
    eprintln!("connections without a first request cut after {took:?}");

    // A connection that made a call goes on under the (long) header timeout.
    let mut keyed = connect_from(OTHER, server.addr).await;
    let answer = get(&mut keyed, "/v1/boxes", Some(&server.key))
        .await
        .expect("an answer");
    assert_eq!(answer.status, 200, "{answer:?}");
    assert!(
        !closed_within(&mut keyed, first_request + Duration::from_secs(2)).await,
        "a connection that made a call was cut at the first request's deadline"
    );
    let answer = get(&mut keyed, "/v1/boxes", Some(&server.key))
        .await
        .expect("the connection still serves");
    assert_eq!(answer.status, 200, "{answer:?}");
}
