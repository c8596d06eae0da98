//! A box's ports through berth, on real sandbox boxes: `python3 -m http.server` and a small
//! standard-library app (`fixtures/port_app.py`: echoes headers, counts bodies, streams,
//! and speaks WebSocket) started in the box so that they outlive their exec, reached
//! through the proxy by path and by `base_domain` host name, with an API key or a share
//! link.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use berth_server::Runtimes;
use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http::{HeaderMap, Method, StatusCode};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

use crate::end_to_end::{exec, sandbox};
use crate::harness::{error_code, TestServer};

pub(crate) const APP: &str = include_str!("fixtures/port_app.py");
pub(crate) const BASE_DOMAIN: &str = "boxes.test";
/// The file server (`python3 -m http.server`) and the app.
const FILES_PORT: u16 = 8000;
pub(crate) const APP_PORT: u16 = 8001;

/// A daemon with `[ports]` set, and box `web` running both servers.
pub(crate) async fn serving(listen_wait_s: u64) -> Option<TestServer> {
    serving_with(|ports| ports.listen_wait_s = listen_wait_s).await
}

/// [`serving`], with `[ports]` as `set` leaves it (the base domain set first).
pub(crate) async fn serving_with(
    set: impl FnOnce(&mut berth_server::ports::config::PortsHostConfig),
) -> Option<TestServer> {
    serving_host(|host| set(&mut host.ports)).await
}

/// [`serving`], with `berth.toml` as `set` leaves it (the base domain set first).
pub(crate) async fn serving_host(
    set: impl FnOnce(&mut berth_server::HostConfig),
) -> Option<TestServer> {
    let data = tempfile::tempdir().unwrap();
    let runtime = match sandbox(data.path()) {
        Ok(runtime) => runtime,
        Err(reason) => {
            berth_testkit::skip("sandbox", &reason);
            return None;
        }
    };
    let mut host = berth_server::HostConfig::default();
    host.ports.base_domain = Some(BASE_DOMAIN.into());
    set(&mut host);
    let server =
        TestServer::start_with_host(Runtimes::single(runtime), Some("runc".into()), data, host)
            .await;
    let (status, body) = server
        .call(Method::POST, "/v1/boxes", Some(json!({"name": "web"})))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    put_file(&server, "web", "/home/user/port_app.py", APP.as_bytes()).await;
    start_servers(&server, "web").await;
    Some(server)
}

pub(crate) async fn put_file(server: &TestServer, name: &str, path: &str, bytes: &[u8]) {
    let (status, _, body) = server
        .raw(
            Method::PUT,
            &format!("/v1/boxes/{name}/files?path={path}"),
            Some(&server.key),
            &[],
            Bytes::copy_from_slice(bytes),
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body:?}");
}

/// Starts both servers as background processes: they outlive the call that started them.
pub(crate) async fn start_servers(server: &TestServer, name: &str) {
    let out = exec(
        server,
        name,
        &[
            "sh",
            "-c",
            "mkdir -p ~/www && echo 'hello from the box' > ~/www/hi.txt",
        ],
    )
    .await;
    assert_eq!(out["exit_code"], 0, "{out}");
    let files_port = FILES_PORT.to_string();
    let app_port = APP_PORT.to_string();
    for cmd in [
        vec![
            "python3",
            "-m",
            "http.server",
            &files_port,
            "-b",
            "127.0.0.1",
            "-d",
            "/home/user/www",
        ],
        vec!["python3", "/home/user/port_app.py", &app_port],
    ] {
        let (status, started) = server
            .call(
                Method::POST,
                &format!("/v1/boxes/{name}/exec"),
                Some(serde_json::json!({"cmd": cmd, "background": true})),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{started}");
    }
}

/// One request on a fresh connection, with exactly these headers (the harness's adds a
/// `Host` of its own).
async fn send<B>(
    addr: SocketAddr,
    request: http::Request<B>,
) -> http::Response<hyper::body::Incoming>
where
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    sender.send_request(request).await.unwrap()
}

pub(crate) async fn get(
    addr: SocketAddr,
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> (StatusCode, HeaderMap, Bytes) {
    let mut request = http::Request::get(path).header("host", host);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = send(addr, request.body(Full::new(Bytes::new())).unwrap()).await;
    let (parts, body) = response.into_parts();
    (
        parts.status,
        parts.headers,
        body.collect().await.unwrap().to_bytes(),
    )
}

pub(crate) fn json_of(bytes: &Bytes) -> Value {
    serde_json::from_slice(bytes)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(bytes)))
}

/// The headers the app saw, as `name → value`.
pub(crate) fn app_headers(seen: &Value) -> Vec<(String, String)> {
    seen["headers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|pair| {
            (
                pair[0].as_str().unwrap().to_owned(),
                pair[1].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

pub(crate) fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

#[tokio::test]
async fn ports_http_streams_both_ways_and_berths_credentials_stay_out() {
    let Some(server) = serving(30).await else {
        return;
    };
    let (addr, bearer) = (server.addr, format!("Bearer {}", server.key));
    let auth = [("authorization", bearer.as_str())];

    // A file written into the box by exec, from `python3 -m http.server`.
    let (status, _, body) = get(addr, "berth", "/v1/boxes/web/ports/8000/hi.txt", &auth).await;
    assert_eq!(
        (status, &body[..]),
        (StatusCode::OK, &b"hello from the box\n"[..])
    );
    // Without the slash: sent to the directory.
    let (status, headers, _) = get(addr, "berth", "/v1/boxes/web/ports/8000?a=1", &auth).await;
    assert_eq!(status, StatusCode::PERMANENT_REDIRECT);
    assert_eq!(headers["location"], "/v1/boxes/web/ports/8000/?a=1");

    // What the app is told, and what it is not: the key, berth's cookie, the client's own
    // X-Forwarded-For.
    let (status, _, body) = get(
        addr,
        "berth",
        "/v1/boxes/web/ports/8001/headers?x=1",
        &[
            ("authorization", &bearer),
            ("cookie", "berth_port=bps_forged; theme=dark"),
            ("x-forwarded-for", "6.6.6.6"),
            ("connection", "x-private-hop"),
            ("x-private-hop", "1"),
        ],
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body:?}");
    let seen = json_of(&body);
    assert_eq!(seen["path"], "/headers?x=1");
    let headers = app_headers(&seen);
    assert_eq!(header(&headers, "authorization"), None, "{headers:?}");
    assert!(
        !body
            .windows(server.key.len())
            .any(|w| w == server.key.as_bytes()),
        "the API key reached the app"
    );
    assert_eq!(header(&headers, "cookie"), Some("theme=dark"));
    assert_eq!(header(&headers, "x-forwarded-for"), Some("127.0.0.1"));
    assert_eq!(header(&headers, "x-forwarded-host"), Some("berth"));
    assert_eq!(
        header(&headers, "x-forwarded-prefix"),
        Some("/v1/boxes/web/ports/8001")
    );
    assert_eq!(header(&headers, "x-private-hop"), None);

    // 128 MiB up (chunked) and 128 MiB down, through a daemon whose memory stays flat.
    const MIB: usize = 1 << 20;
    const TOTAL_MIB: usize = 128;
    let chunk = Bytes::from(vec![b'y'; MIB]);
    let mut expected = Sha256::new();
    for _ in 0..TOTAL_MIB {
        expected.update(&chunk);
    }
    let before = rss_bytes();
    let frames = futures_util::stream::iter(
        (0..TOTAL_MIB).map(move |_| Ok::<_, Infallible>(Frame::data(chunk.clone()))),
    );
    let upload = http::Request::post("/v1/boxes/web/ports/8001/count")
        .header("host", "berth")
        .header("authorization", &bearer)
        .body(StreamBody::new(frames))
        .unwrap();
    let response = send(addr, upload).await;
    assert_eq!(response.status(), StatusCode::OK);
    let counted = json_of(&response.into_body().collect().await.unwrap().to_bytes());
    assert_eq!(counted["bytes"], TOTAL_MIB * MIB, "{counted}");
    assert_eq!(counted["sha256"], format!("{:x}", expected.finalize()));

    let download = http::Request::get(format!(
        "/v1/boxes/web/ports/8001/big?n={}",
        TOTAL_MIB * MIB
    ))
    .header("host", "berth")
    .header("authorization", &bearer)
    .body(Full::new(Bytes::new()))
    .unwrap();
    let mut body = send(addr, download).await.into_body();
    let mut received = 0usize;
    while let Some(frame) = body.frame().await {
        received += frame.unwrap().data_ref().map_or(0, Bytes::len);
    }
    assert_eq!(received, TOTAL_MIB * MIB);
    let grown = rss_bytes().saturating_sub(before);
    assert!(
        grown < 48 * MIB as u64,
        "the daemon grew by {} MiB moving {TOTAL_MIB} MiB each way",
        grown / MIB as u64
    );

    // The connection to the app is kept alive and reused by the next request.
    let peer = |body: &Bytes| json_of(body)["peer"].as_u64().unwrap();
    let (_, _, first) = get(addr, "berth", "/v1/boxes/web/ports/8001/headers", &auth).await;
    let (_, _, second) = get(addr, "berth", "/v1/boxes/web/ports/8001/headers", &auth).await;
    assert_eq!(peer(&first), peer(&second), "a new connection per request");

    // An app that closes without answering: a clear 502, not a hang.
    let (status, _, body) = get(addr, "berth", "/v1/boxes/web/ports/8001/close", &auth).await;
    let body = json_of(&body);
    assert_eq!(
        (status, error_code(&body)),
        (StatusCode::BAD_GATEWAY, "unavailable"),
        "{body}"
    );
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("the app on port 8001 gave no answer"),
        "{body}"
    );

    // The box still has no network device but lo.
    let out = exec(&server, "web", &["ls", "/sys/class/net"]).await;
    assert_eq!(out["stdout"], "lo\n", "{out}");
}

#[tokio::test]
async fn ports_websocket_echo_through_the_proxy() {
    let Some(server) = serving(30).await else {
        return;
    };
    let mut ws = open_echo(&server).await;
    ws.send(Message::Text("hello, box".into())).await.unwrap();
    let big: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    ws.send(Message::Binary(big.clone().into())).await.unwrap();
    let mut echoed = Vec::new();
    while echoed.len() < 2 {
        match ws.next().await.expect("an echo").unwrap() {
            Message::Text(text) => echoed.push(text.as_bytes().to_vec()),
            Message::Binary(bytes) => echoed.push(bytes.to_vec()),
            _ => {}
        }
    }
    assert_eq!(echoed[0], b"hello, box");
    assert_eq!(echoed[1], big);
    ws.close(None).await.unwrap();
}

/// Opens the app's WebSocket echo through the proxy with the key, and checks one echo.
async fn open_echo(
    server: &TestServer,
) -> tokio_tungstenite::WebSocketStream<tokio::net::TcpStream> {
    let mut request = format!("ws://{}/v1/boxes/web/ports/8001/ws", server.addr)
        .into_client_request()
        .unwrap();
    request.headers_mut().insert(
        "authorization",
        format!("Bearer {}", server.key).parse().unwrap(),
    );
    let stream = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let (mut ws, _) = tokio_tungstenite::client_async(request, stream)
        .await
        .expect("the app's WebSocket through berth");
    ws.send(Message::Text("ping".into())).await.unwrap();
    match ws.next().await.expect("an echo").unwrap() {
        Message::Text(text) => assert_eq!(text.as_str(), "ping"),
        other => panic!("not the echo: {other:?}"),
    }
    ws
}

/// `GET /headers` of the app with the key: the status and the body.
async fn app_headers_with_key(server: &TestServer) -> (StatusCode, Bytes) {
    let bearer = format!("Bearer {}", server.key);
    let (status, _, body) = get(
        server.addr,
        "berth",
        "/v1/boxes/web/ports/8001/headers",
        &[("authorization", &bearer)],
    )
    .await;
    (status, body)
}

#[tokio::test]
async fn ports_connections_are_capped_per_tenant_and_given_back() {
    let Some(server) = serving_with(|ports| ports.max_connections_per_tenant = 1).await else {
        return;
    };
    // The one slot, held by an open WebSocket: the next request is refused at once.
    let ws = open_echo(&server).await;
    let (status, body) = app_headers_with_key(&server).await;
    let body = json_of(&body);
    assert_eq!(
        (status, error_code(&body)),
        (StatusCode::TOO_MANY_REQUESTS, "too_many_requests"),
        "{body}"
    );
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("connections to box ports"),
        "{body}"
    );
    // Closed, the slot comes back (the splice ends as the close reaches it).
    drop(ws);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (status, _) = app_headers_with_key(&server).await;
        if status == StatusCode::OK {
            break;
        }
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
        assert!(
            tokio::time::Instant::now() < deadline,
            "the WebSocket's slot never came back"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Sends `path` (from a link's URL) as a browser would, without a key.
pub(crate) fn path_of(url: &str) -> &str {
    let rest = url.split_once("://").unwrap().1;
    &rest[rest.find('/').unwrap()..]
}

/// `POST …/ports/8001/links` of box `web`: the status and the answer.
pub(crate) async fn make_link(server: &TestServer, ttl_s: u64) -> (StatusCode, Value) {
    server
        .call(
            Method::POST,
            "/v1/boxes/web/ports/8001/links",
            Some(json!({ "ttl_s": ttl_s })),
        )
        .await
}

/// The status of a GET with only these cookies (no key), at the daemon's own host name.
pub(crate) async fn with_cookie(addr: SocketAddr, path: &str, cookie: &str) -> StatusCode {
    get(addr, "berth", path, &[("cookie", cookie)]).await.0
}

pub(crate) fn cookie_of(headers: &HeaderMap) -> String {
    let set = headers["set-cookie"].to_str().unwrap();
    set.split(';').next().unwrap().to_owned()
}

#[tokio::test]
async fn ports_base_domain_host_names_reach_the_port_at_the_root() {
    let Some(server) = serving(30).await else {
        return;
    };
    let addr = server.addr;
    let bearer = format!("Bearer {}", server.key);
    let host = format!("8001-web.{BASE_DOMAIN}:{}", addr.port());
    let (status, _, body) = get(addr, &host, "/headers?q=1", &[("authorization", &bearer)]).await;
    assert_eq!(status, StatusCode::OK, "{body:?}");
    let seen = json_of(&body);
    assert_eq!(seen["path"], "/headers?q=1");
    let headers = app_headers(&seen);
    assert_eq!(header(&headers, "x-forwarded-prefix"), None);
    assert_eq!(header(&headers, "authorization"), None);
    // The API's own paths at a port's host name are the app's.
    let (status, _, body) = get(addr, &host, "/v1/health", &[("authorization", &bearer)]).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body:?}");
    assert_eq!(json_of(&body)["error"], "no such path");

    // Not a port's name: a clear error. Another tenant: no such box.
    let (status, _, body) = get(
        addr,
        &format!("web.{BASE_DOMAIN}"),
        "/",
        &[("authorization", &bearer)],
    )
    .await;
    assert_eq!(
        (status, error_code(&json_of(&body))),
        (StatusCode::BAD_REQUEST, "invalid_request")
    );
    let (_, other) = server
        .call(Method::POST, "/v1/tenants", Some(json!({"name": "other"})))
        .await;
    let other_key = format!("Bearer {}", other["api_key"].as_str().unwrap());
    let (status, _, _) = get(addr, &host, "/headers", &[("authorization", &other_key)]).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // A share link's host URL sets a cookie for the whole host name.
    let (_, link) = make_link(&server, 600).await;
    // The host name the link names keeps the port of the Host the caller used ("berth").
    let host_url = link["host_url"].as_str().unwrap();
    assert!(
        host_url.starts_with(&format!("http://8001-web.{BASE_DOMAIN}/?berth_link=")),
        "{link}"
    );
    let (status, headers, _) = get(addr, &host, path_of(host_url), &[]).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(headers["location"], "/");
    assert!(headers["set-cookie"].to_str().unwrap().contains("Path=/;"));
    let cookie = cookie_of(&headers);
    let (status, _, _) = get(addr, &host, "/headers", &[("cookie", &cookie)]).await;
    assert_eq!(status, StatusCode::OK);
    // The same cookie at another port's host name opens nothing.
    let (status, _, _) = get(
        addr,
        &format!("8000-web.{BASE_DOMAIN}"),
        "/hi.txt",
        &[("cookie", &cookie)],
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn ports_wake_a_stopped_box_and_wait_for_the_port_bounded() {
    let Some(server) = serving(8).await else {
        return;
    };
    let (status, _) = server.call(Method::POST, "/v1/boxes/web/stop", None).await;
    assert_eq!(status, StatusCode::OK);
    // Opening a port wakes the box; the server starts later, from a second client.
    let (addr, key) = (server.addr, server.key.clone());
    let opening = tokio::spawn(async move {
        let bearer = format!("Bearer {key}");
        get(
            addr,
            "berth",
            "/v1/boxes/web/ports/8001/headers",
            &[("authorization", &bearer)],
        )
        .await
    });
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (_, record) = server.call(Method::GET, "/v1/boxes/web", None).await;
        if record["state"] == "running" {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the box never woke: {record}"
        );
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    start_servers(&server, "web").await;
    let (status, _, body) = opening.await.unwrap();
    assert_eq!(status, StatusCode::OK, "{body:?}");
    assert_eq!(json_of(&body)["path"], "/headers");

    // Nothing ever listens on 8009: a bounded wait, then a clear error.
    let began = std::time::Instant::now();
    let (status, body) = server
        .call(Method::GET, "/v1/boxes/web/ports/8009/", None)
        .await;
    assert_eq!(
        (status, error_code(&body)),
        (StatusCode::SERVICE_UNAVAILABLE, "unavailable")
    );
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("nothing listens on port 8009 in box web"),
        "{message}"
    );
    let waited = began.elapsed();
    assert!(
        waited >= Duration::from_secs(7) && waited < Duration::from_secs(20),
        "waited {waited:?}"
    );
    // Refused at the edge: port 0, and berth's own egress ports inside the box.
    let (status, _) = server
        .call(Method::GET, "/v1/boxes/web/ports/0/", None)
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, body) = server
        .call(Method::GET, "/v1/boxes/web/ports/3128/", None)
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
}
