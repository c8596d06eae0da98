//! envd's files surface (`filesystem.Filesystem` and `/files`) against a fake runtime: both
//! Connect codecs, who may call (the access token, signed URLs, expired and forged ones),
//! berth's path rules, and the bounds (a multipart part's headers).

use base64::Engine as _;
use berth_e2b_wire::filesystem::{EntryInfo, FileType, StatRequest, StatResponse};
use berth_e2b_wire::Codec;
use bytes::Bytes;
use http::{Method, StatusCode};
use serde_json::{json, Value};
use sha2::Digest as _;

use crate::e2b_control::{e2b_server, envd, sandbox};
use crate::harness::{request, TestServer};

/// `Stat` of `path` in JSON, with `token`.
async fn stat_json(
    server: &TestServer,
    id: &str,
    token: Option<&str>,
    path: &str,
) -> (StatusCode, Bytes) {
    let json = [("content-type", "application/json")];
    let body = Bytes::from(json!({ "path": path }).to_string());
    let (status, _, answer) = envd(
        server,
        Method::POST,
        "/filesystem.Filesystem/Stat",
        id,
        token,
        &json,
        body,
    )
    .await;
    (status, answer)
}

fn json_of(bytes: &Bytes) -> Value {
    serde_json::from_slice(bytes)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", String::from_utf8_lossy(bytes)))
}

/// The SDK's `get_signature` (e2b/sandbox/signature.py).
fn signature(path: &str, operation: &str, token: &str, expiration: Option<i64>) -> String {
    let raw = match expiration {
        None => format!("{path}:{operation}::{token}"),
        Some(at) => format!("{path}:{operation}::{token}:{at}"),
    };
    let digest = sha2::Sha256::digest(raw.as_bytes());
    format!(
        "v1_{}",
        base64::engine::general_purpose::STANDARD_NO_PAD.encode(digest)
    )
}

fn query_value(value: &str) -> String {
    form_urlencoded::byte_serialize(value.as_bytes()).collect()
}

fn now_s() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp()
}

#[tokio::test]
async fn files_upload_download_and_stat_in_both_codecs() {
    let (server, _fake) = e2b_server().await;
    let (id, token) = sandbox(&server).await;
    let octet = [("content-type", "application/octet-stream")];

    // A relative path is under the user's home, as envd resolves it.
    let (status, _, body) = envd(
        &server,
        Method::POST,
        "/files?path=notes.txt",
        &id,
        Some(&token),
        &octet,
        Bytes::from_static(b"hello"),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body:?}");
    assert_eq!(
        json_of(&body),
        json!([{"name": "notes.txt", "type": "file", "path": "/home/user/notes.txt"}])
    );
    let (status, headers, body) = envd(
        &server,
        Method::GET,
        "/files?path=~/notes.txt",
        &id,
        Some(&token),
        &[],
        Bytes::new(),
    )
    .await;
    assert_eq!((status, &body[..]), (StatusCode::OK, &b"hello"[..]));
    assert_eq!(headers["content-length"], "5");

    // Stat in JSON...
    let (status, body) = stat_json(&server, &id, Some(&token), "/home/user/notes.txt").await;
    assert_eq!(status, StatusCode::OK, "{body:?}");
    let entry = &json_of(&body)["entry"];
    assert_eq!(entry["type"], "FILE_TYPE_FILE", "{entry}");
    assert_eq!(entry["permissions"], "-rw-r--r--", "{entry}");
    assert_eq!(entry["size"], "5", "{entry}");
    assert_eq!(entry["path"], "/home/user/notes.txt", "{entry}");

    // ... and in binary protobuf.
    let proto = [("content-type", "application/proto")];
    let request = Codec::Proto
        .encode(&StatRequest {
            path: "notes.txt".into(),
        })
        .unwrap();
    let (status, headers, body) = envd(
        &server,
        Method::POST,
        "/filesystem.Filesystem/Stat",
        &id,
        Some(&token),
        &proto,
        Bytes::from(request),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body:?}");
    assert_eq!(headers["content-type"], "application/proto");
    let answer: StatResponse = Codec::Proto.decode(&body).unwrap();
    let EntryInfo {
        name, r#type, size, ..
    } = answer.entry.unwrap();
    assert_eq!(
        (name.as_str(), r#type, size),
        ("notes.txt", FileType::File as i32, 5)
    );

    // A file that is not there is Connect's not_found (the SDK's FileNotFoundException).
    let (status, body) = stat_json(&server, &id, Some(&token), "/nope").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body:?}");
    assert_eq!(json_of(&body)["code"], "not_found");
}

#[tokio::test]
async fn without_the_token_or_a_valid_signature_nothing_is_served() {
    let (server, _fake) = e2b_server().await;
    let (id, token) = sandbox(&server).await;
    let (other_id, other_token) = sandbox(&server).await;
    for bad in [
        None,
        Some("0".repeat(64).as_str()),
        Some(other_token.as_str()),
    ] {
        let (status, body) = stat_json(&server, &id, bad, "/home/user").await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{body:?}");
        assert_eq!(json_of(&body)["code"], "unauthenticated");
    }
    envd(
        &server,
        Method::POST,
        "/files?path=/home/user/a.txt",
        &id,
        Some(&token),
        &[("content-type", "application/octet-stream")],
        Bytes::from_static(b"secret"),
    )
    .await;

    let path = "/home/user/a.txt";
    let url = |sig: &str, exp: Option<i64>| {
        let mut url = format!(
            "/files?path={}&signature={}",
            query_value(path),
            query_value(sig)
        );
        if let Some(at) = exp {
            url.push_str(&format!("&signature_expiration={at}"));
        }
        url
    };
    let get = |url: String, sandbox: Option<String>| {
        let addr = server.addr;
        async move {
            let headers: Vec<(&str, &str)> = match &sandbox {
                Some(id) => vec![("e2b-sandbox-id", id.as_str())],
                None => vec![],
            };
            request(addr, Method::GET, &url, None, &headers, Bytes::new()).await
        }
    };

    // Good signatures, with and without an expiry, under /e2b and at berth's root (where the
    // SDK's URLs from E2B_SANDBOX_URL land, naming no sandbox).
    let good = signature(path, "read", &token, None);
    let (status, _, body) = get(format!("/e2b{}", url(&good, None)), Some(id.clone())).await;
    assert_eq!((status, &body[..]), (StatusCode::OK, &b"secret"[..]));
    let (status, _, body) = get(url(&good, None), None).await;
    assert_eq!((status, &body[..]), (StatusCode::OK, &b"secret"[..]));
    let later = now_s() + 60;
    let expiring = signature(path, "read", &token, Some(later));
    let (status, _, _) = get(url(&expiring, Some(later)), None).await;
    assert_eq!(status, StatusCode::OK);

    let refused = [
        // Expired.
        (
            url(
                &signature(path, "read", &token, Some(now_s() - 10)),
                Some(now_s() - 10),
            ),
            None,
        ),
        // An expiry added to a signature made without one.
        (url(&good, Some(later)), None),
        // Made for writing, used to read.
        (url(&signature(path, "write", &token, None), None), None),
        // Another sandbox's token, and another sandbox named.
        (
            url(&signature(path, "read", &other_token, None), None),
            Some(id.clone()),
        ),
        (url(&good, None), Some(other_id.clone())),
        // Not a signature at all; none.
        (url("v1_x", None), None),
        (format!("/files?path={}", query_value(path)), None),
    ];
    for (url, named) in refused {
        let prefixed = match named {
            Some(_) => format!("/e2b{url}"),
            None => url.clone(),
        };
        let (status, _, body) = get(prefixed, named).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{url}: {body:?}");
        assert_eq!(json_of(&body)["code"], 401, "{url}");
    }
}

#[tokio::test]
async fn odd_paths_and_multipart_bounds() {
    let (server, _fake) = e2b_server().await;
    let (id, token) = sandbox(&server).await;
    // `~user` is not expanded (envd: only the caller's own home); NUL is refused by berth.
    for path in ["~root/x", "/home/user/a\u{0}b"] {
        let (status, body) = stat_json(&server, &id, Some(&token), path).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path:?}: {body:?}");
        assert_eq!(json_of(&body)["code"], "invalid_argument", "{path:?}");
    }
    // An unknown user is envd's 400, in envd's error shape.
    let (status, _, body) = envd(
        &server,
        Method::GET,
        "/files?path=/etc/hostname&username=admin",
        &id,
        Some(&token),
        &[],
        Bytes::new(),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body:?}");
    assert_eq!(json_of(&body)["code"], 400);

    // A multipart part whose headers never end is refused once they pass the bound,
    // not buffered.
    let boundary = "XyZ";
    let mut body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.txt\"\r\nX-Pad: "
    )
    .into_bytes();
    body.extend(std::iter::repeat_n(b'a', 3 * 1024 * 1024));
    let content_type = format!("multipart/form-data; boundary={boundary}");
    let (status, _, answer) = envd(
        &server,
        Method::POST,
        "/files?path=/home/user/m.txt",
        &id,
        Some(&token),
        &[("content-type", &content_type)],
        Bytes::from(body),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer:?}");
    let message = json_of(&answer)["message"].as_str().unwrap().to_owned();
    assert!(message.contains("headers run past"), "{message}");

    // Two files in one multipart upload, each at its part's file name.
    let two = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"/home/user/one.txt\"\r\n\r\n1\r\n\
         --{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"two.txt\"\r\n\r\n22\r\n--{boundary}--\r\n"
    );
    let (status, _, answer) = envd(
        &server,
        Method::POST,
        "/files",
        &id,
        Some(&token),
        &[("content-type", &content_type)],
        Bytes::from(two),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer:?}");
    let paths: Vec<Value> = json_of(&answer)
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["path"].clone())
        .collect();
    assert_eq!(
        paths,
        [json!("/home/user/one.txt"), json!("/home/user/two.txt")]
    );
}

#[tokio::test]
async fn a_listing_past_its_bound_is_refused_saying_so() {
    let (server, _fake) = e2b_server().await;
    let (id, token) = sandbox(&server).await;
    let boundary = "B0und";
    let content_type = format!("multipart/form-data; boundary={boundary}");
    // 10 001 files (the bound is 10 000), in uploads of 1 000 parts (the most one carries).
    for batch in 0..11 {
        let count = if batch == 10 { 1 } else { 1000 };
        let mut body = String::new();
        for i in 0..count {
            body.push_str(&format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"/home/user/big/f{batch}-{i}\"\r\n\r\nx\r\n"
            ));
        }
        body.push_str(&format!("--{boundary}--\r\n"));
        let (status, _, answer) = envd(
            &server,
            Method::POST,
            "/files",
            &id,
            Some(&token),
            &[("content-type", &content_type)],
            Bytes::from(body),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{answer:?}");
    }
    let json = [("content-type", "application/json")];
    let (status, _, body) = envd(
        &server,
        Method::POST,
        "/filesystem.Filesystem/ListDir",
        &id,
        Some(&token),
        &json,
        Bytes::from(json!({"path": "/home/user/big", "depth": 1}).to_string()),
    )
    .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body:?}");
    let answer = json_of(&body);
    assert_eq!(answer["code"], "resource_exhausted", "{answer}");
    let message = answer["message"].as_str().unwrap();
    assert!(message.contains("more than 10000 entries"), "{message}");
}

/// A refused upload whose client is still sending its body: the client reads the 401, as
/// from envd, rather than a reset that throws the answer away (undici's `fetch` of a
/// multipart body to an expired upload URL saw `EPIPE` more often than the answer).
#[tokio::test]
async fn a_refused_upload_is_answered_while_its_body_still_comes() {
    let (server, _fake) = e2b_server().await;
    let (_id, token) = sandbox(&server).await;
    let path = "/home/user/up.bin";
    let past = now_s() - 10;
    let target = format!(
        "/files?path={}&signature={}&signature_expiration={past}",
        query_value(path),
        query_value(&signature(path, "write", &token, Some(past)))
    );
    let addr = server.addr;
    let answer = tokio::task::spawn_blocking(move || {
        use std::io::{Read as _, Write as _};
        let mut stream = std::net::TcpStream::connect(addr).unwrap();
        // Chunked, as a streaming client (undici's fetch of a FormData) sends it.
        let head = format!(
            "POST {target} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\ncontent-type: application/octet-stream\r\ntransfer-encoding: chunked\r\n\r\n"
        );
        stream.write_all(head.as_bytes()).unwrap();
        let chunk = [b'x'; 16 * 1024];
        let mut sent = Ok(());
        for _ in 0..256 {
            sent = stream
                .write_all(format!("{:x}\r\n", chunk.len()).as_bytes())
                .and_then(|()| stream.write_all(&chunk))
                .and_then(|()| stream.write_all(b"\r\n"));
            if sent.is_err() {
                break;
            }
        }
        let sent = sent.and_then(|()| stream.write_all(b"0\r\n\r\n"));
        let mut answer = Vec::new();
        let read = stream.read_to_end(&mut answer);
        (sent.is_ok(), read.is_ok(), String::from_utf8_lossy(&answer).into_owned())
    })
    .await
    .unwrap();
    let (sent, read, text) = answer;
    assert!(sent && read, "sent {sent}, read {read}: {text:?}");
    assert!(text.starts_with("HTTP/1.1 401"), "{text:?}");
    assert!(text.contains(r#""code":401"#), "{text:?}");
}
