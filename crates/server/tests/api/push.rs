//! Web Push end to end: a local push service (an HTTP server on 127.0.0.1 in the test)
//! receives the daemon's pushes, checks their VAPID token against the daemon's key, and
//! decrypts them as a browser would, with an implementation independent of the daemon's
//! (RustCrypto's p256, hkdf and aes-gcm; the daemon uses ring).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use berth_server::{HostConfig, Runtimes};
use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::end_to_end::sandbox;
use crate::harness::{error_code, NoBoxes, TestServer};
use crate::sse::open_sse;
use crate::talk::{post, until_result};
use crate::tenants::{call_as, new_tenant};

const SUBJECT: &str = "mailto:push-test@example.com";

/// One push as the service received it.
#[derive(Debug)]
struct Received {
    path: String,
    headers: HeaderMap,
    body: Bytes,
}

/// The local push service: answers `410 Gone` on paths ending in `/gone`, `503` with
/// `Retry-After: 1` the first time a path ending in `/flaky` is pushed to, else `201`.
struct PushService {
    addr: SocketAddr,
    received: mpsc::Receiver<Received>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for PushService {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl PushService {
    async fn start() -> PushService {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, received) = mpsc::channel(64);
        let flaked = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let (tx, flaked) = (tx.clone(), flaked.clone());
                let service = hyper::service::service_fn(move |req: http::Request<_>| {
                    let (tx, flaked) = (tx.clone(), flaked.clone());
                    async move {
                        let path = req.uri().path().to_owned();
                        let headers = req.headers().clone();
                        let body: Bytes = BodyExt::collect(req.into_body()).await?.to_bytes();
                        let status = if path.ends_with("/gone") {
                            StatusCode::GONE
                        } else if path.ends_with("/flaky")
                            && !flaked.swap(true, std::sync::atomic::Ordering::SeqCst)
                        {
                            StatusCode::SERVICE_UNAVAILABLE
                        } else {
                            StatusCode::CREATED
                        };
                        let _ = tx
                            .send(Received {
                                path,
                                headers,
                                body,
                            })
                            .await;
                        let answer = http::Response::builder()
                            .status(status)
                            .header("retry-after", "1")
                            .body(Full::new(Bytes::new()))
                            .unwrap();
                        Ok::<_, hyper::Error>(answer)
                    }
                });
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service),
                );
            }
        });
        PushService {
            addr,
            received,
            task,
        }
    }

    fn origin(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The next push (60 s at most: a turn on a loaded host, then the delivery).
    async fn next(&mut self) -> Received {
        tokio::time::timeout(Duration::from_secs(60), self.received.recv())
            .await
            .expect("a push within 60 s")
            .expect("the push service runs")
    }
}

/// A browser's push subscription: its ECDH key and auth secret.
struct Browser {
    secret: p256::SecretKey,
    auth: [u8; 16],
    endpoint: String,
}

impl Browser {
    fn new(endpoint: String) -> Browser {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes).unwrap();
        let mut auth = [0u8; 16];
        getrandom::fill(&mut auth).unwrap();
        Browser {
            secret: p256::SecretKey::from_slice(&bytes).expect("a scalar below the order"),
            auth,
            endpoint,
        }
    }

    fn public(&self) -> Vec<u8> {
        use p256::elliptic_curve::sec1::ToEncodedPoint;
        self.secret
            .public_key()
            .to_encoded_point(false)
            .as_bytes()
            .to_vec()
    }

    /// `PushSubscription.toJSON()`.
    fn subscription(&self) -> Value {
        json!({
            "endpoint": self.endpoint,
            "expirationTime": null,
            "keys": {
                "p256dh": URL_SAFE_NO_PAD.encode(self.public()),
                "auth": URL_SAFE_NO_PAD.encode(self.auth),
            }
        })
    }

    /// RFC 8291 decryption of an `aes128gcm` body, one record.
    fn decrypt(&self, body: &[u8]) -> Vec<u8> {
        use aes_gcm::aead::{Aead, KeyInit};
        use hkdf::Hkdf;
        use sha2::Sha256;
        let salt = &body[..16];
        let record_size = u32::from_be_bytes(body[16..20].try_into().unwrap());
        let id_len = body[20] as usize;
        assert_eq!(id_len, 65, "the key id is the sender's P-256 key");
        let as_public = &body[21..21 + id_len];
        let ciphertext = &body[21 + id_len..];
        assert!(ciphertext.len() <= record_size as usize, "one record");
        let sender = p256::PublicKey::from_sec1_bytes(as_public).unwrap();
        let shared =
            p256::ecdh::diffie_hellman(self.secret.to_nonzero_scalar(), sender.as_affine());
        let mut key_info = b"WebPush: info\0".to_vec();
        key_info.extend_from_slice(&self.public());
        key_info.extend_from_slice(as_public);
        let mut ikm = [0u8; 32];
        Hkdf::<Sha256>::new(Some(&self.auth), shared.raw_secret_bytes())
            .expand(&key_info, &mut ikm)
            .unwrap();
        let prk = Hkdf::<Sha256>::new(Some(salt), &ikm);
        let (mut cek, mut nonce) = ([0u8; 16], [0u8; 12]);
        prk.expand(b"Content-Encoding: aes128gcm\0", &mut cek)
            .unwrap();
        prk.expand(b"Content-Encoding: nonce\0", &mut nonce)
            .unwrap();
        let mut plain = aes_gcm::Aes128Gcm::new((&cek).into())
            .decrypt((&nonce).into(), ciphertext)
            .expect("the push decrypts with the browser's key");
        while plain.last() == Some(&0) {
            plain.pop();
        }
        assert_eq!(plain.pop(), Some(2), "the last record's delimiter");
        plain
    }
}

/// Checks a push's headers and VAPID token (RFC 8292) against the daemon's public key,
/// then decrypts it: the plaintext JSON.
fn open_push(push: &Received, browser: &Browser, vapid_public: &str, origin: &str) -> Value {
    use p256::ecdsa::signature::Verifier;
    let header = |name: &str| {
        push.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    };
    assert_eq!(header("content-encoding"), "aes128gcm");
    assert_eq!(header("ttl"), "86400");
    assert_eq!(header("urgency"), "normal");
    assert!(push.body.len() <= 4096, "{} bytes", push.body.len());
    let auth = header("authorization");
    let (jwt, k) = auth
        .strip_prefix("vapid t=")
        .and_then(|rest| rest.split_once(", k="))
        .unwrap_or_else(|| panic!("not a VAPID authorization: {auth:?}"));
    assert_eq!(k, vapid_public, "k is the daemon's key");
    let (input, signature) = jwt.rsplit_once('.').unwrap();
    let key =
        p256::ecdsa::VerifyingKey::from_sec1_bytes(&URL_SAFE_NO_PAD.decode(k).unwrap()).unwrap();
    let signature =
        p256::ecdsa::Signature::from_slice(&URL_SAFE_NO_PAD.decode(signature).unwrap()).unwrap();
    key.verify(input.as_bytes(), &signature)
        .expect("the ES256 signature verifies with the daemon's public key");
    let (head, claims) = input.split_once('.').unwrap();
    let head: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(head).unwrap()).unwrap();
    assert_eq!(head["alg"], "ES256");
    let claims: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(claims).unwrap()).unwrap();
    assert_eq!(claims["aud"], origin);
    assert_eq!(claims["sub"], SUBJECT);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let exp = claims["exp"].as_u64().unwrap();
    assert!(exp > now && exp <= now + 24 * 3600, "exp {exp}, now {now}");
    serde_json::from_slice(&browser.decrypt(&push.body)).unwrap()
}

fn host_allowing(origin: &str) -> HostConfig {
    host_allowing_all(&[origin])
}

fn host_allowing_all(origins: &[&str]) -> HostConfig {
    let listed: Vec<String> = origins.iter().map(|o| format!("\"{o}\"")).collect();
    HostConfig::parse(
        std::path::Path::new("berth.toml"),
        &format!(
            "[push]\nsubject = \"{SUBJECT}\"\nallow_endpoints = [{}]\n",
            listed.join(", ")
        ),
    )
    .unwrap()
}

async fn subscribe(server: &TestServer, body: Value) -> (StatusCode, Value) {
    server
        .call(Method::POST, "/v1/web/push/subscriptions", Some(body))
        .await
}

#[tokio::test]
async fn subscriptions_refuse_what_is_not_a_push_service_and_are_bounded() {
    let service = PushService::start().await;
    let server = TestServer::start_with_host(
        Runtimes::single(Arc::new(NoBoxes)),
        None,
        tempfile::tempdir().unwrap(),
        host_allowing(&service.origin()),
    )
    .await;
    let browser = Browser::new(format!("{}/push/phone", service.origin()));

    // The attacks first: a client must not make the daemon POST to its own host, the
    // host's private network, or anywhere but a push service.
    let daemon = server.addr;
    let other_port = service.addr.port().wrapping_add(1).max(1);
    for (endpoint, why) in [
        (format!("http://{daemon}/v1/boxes"), "https://"),
        (format!("https://{daemon}/v1/boxes"), "IP address"),
        (format!("http://127.0.0.1:{other_port}/push"), "https://"),
        ("https://127.0.0.1/push".into(), "IP address"),
        ("https://10.1.2.3/push".into(), "IP address"),
        (
            "https://169.254.169.254/latest/meta-data".into(),
            "IP address",
        ),
        ("https://[::1]/push".into(), "IP address"),
        ("https://localhost/push".into(), "not a known push service"),
        (
            "https://push.example.com/push".into(),
            "not a known push service",
        ),
        (
            "https://fcm.googleapis.com.attacker.example/x".into(),
            "not a known push service",
        ),
        ("http://fcm.googleapis.com/fcm/send/x".into(), "https://"),
        (
            "https://fcm.googleapis.com:8443/fcm/send/x".into(),
            "port 443",
        ),
        ("file:///etc/passwd".into(), "not an http(s) URL"),
        (
            format!("https://fcm.googleapis.com/{}", "a".repeat(2100)),
            "2048 bytes",
        ),
    ] {
        let mut body = browser.subscription();
        body["endpoint"] = json!(endpoint);
        let (status, answer) = subscribe(&server, body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{endpoint}: {answer}");
        assert_eq!(error_code(&answer), "invalid_request", "{answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains(why), "{endpoint}: {message}");
    }

    // Bad keys, each named.
    let mut off_curve = browser.public();
    off_curve[64] ^= 1;
    for (field, value, why) in [
        ("p256dh", "not base64!".to_owned(), "base64url"),
        ("p256dh", URL_SAFE_NO_PAD.encode([4u8; 33]), "65 bytes"),
        (
            "p256dh",
            URL_SAFE_NO_PAD.encode(&off_curve),
            "not a point on P-256",
        ),
        ("auth", URL_SAFE_NO_PAD.encode([1u8; 8]), "16 bytes"),
        ("auth", "***".to_owned(), "base64url"),
    ] {
        let mut body = browser.subscription();
        body["keys"][field] = json!(value);
        let (status, answer) = subscribe(&server, body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{field}={value}: {answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(field) && message.contains(why),
            "{message}"
        );
    }
    let (status, answer) = subscribe(&server, json!({"endpoint": browser.endpoint})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert!(server
        .call(Method::GET, "/v1/web/push/subscriptions", None)
        .await
        .1["subscriptions"]
        .as_array()
        .unwrap()
        .is_empty());

    // Known push services and the allowed origin pass; the same endpoint is the same id.
    let (status, first) = subscribe(&server, browser.subscription()).await;
    assert_eq!(status, StatusCode::CREATED, "{first}");
    assert!(first["id"].as_str().unwrap().starts_with("ps_"));
    assert_eq!(first["endpoint_host"], "127.0.0.1");
    let (status, again) = subscribe(&server, browser.subscription()).await;
    assert_eq!((status, &again["id"]), (StatusCode::CREATED, &first["id"]));
    let mut fcm = browser.subscription();
    fcm["endpoint"] = json!("https://fcm.googleapis.com/fcm/send/abc:def");
    let (status, answer) = subscribe(&server, fcm).await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    assert_eq!(answer["endpoint_host"], "fcm.googleapis.com");

    // 20 per tenant: the 21st is refused, saying so.
    for n in 2..20 {
        let mut body = browser.subscription();
        body["endpoint"] = json!(format!(
            "https://updates.push.services.mozilla.com/wpush/v2/{n}"
        ));
        let (status, answer) = subscribe(&server, body).await;
        assert_eq!(status, StatusCode::CREATED, "{n}: {answer}");
    }
    let mut body = browser.subscription();
    body["endpoint"] = json!("https://web.push.apple.com/twenty-first");
    let (status, answer) = subscribe(&server, body).await;
    assert_eq!(status, StatusCode::CONFLICT, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("at most 20 push subscriptions"),
        "{answer}"
    );

    let (status, list) = server
        .call(Method::GET, "/v1/web/push/subscriptions", None)
        .await;
    assert_eq!(status, StatusCode::OK);
    let subscriptions = list["subscriptions"].as_array().unwrap();
    assert_eq!(subscriptions.len(), 20);
    assert!(
        !list.to_string().contains("/push/phone"),
        "listings never show an endpoint: {list}"
    );
    let path = format!(
        "/v1/web/push/subscriptions/{}",
        first["id"].as_str().unwrap()
    );
    let (status, _) = server.call(Method::DELETE, &path, None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, answer) = server.call(Method::DELETE, &path, None).await;
    assert_eq!(
        (status, error_code(&answer)),
        (StatusCode::NOT_FOUND, "not_found")
    );

    // The key browsers subscribe with: an uncompressed P-256 point.
    let (status, key) = server.call(Method::GET, "/v1/web/push/key", None).await;
    assert_eq!(status, StatusCode::OK);
    let point = URL_SAFE_NO_PAD
        .decode(key["public_key"].as_str().unwrap())
        .unwrap();
    assert!(point.len() == 65 && point[0] == 4);
    let (status, _, _) = server
        .raw(Method::GET, "/v1/web/push/key", None, &[], Bytes::new())
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

/// The texts of box `name`'s ended turns (its `result` events), oldest first.
async fn results(server: &TestServer, name: &str) -> Vec<String> {
    let (status, page) = server
        .call(
            Method::GET,
            &format!("/v1/boxes/{name}/events?wait=false"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    page["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "result")
        .map(|e| e["data"]["result"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test]
async fn a_turn_nobody_watches_is_pushed_encrypted_and_a_gone_subscription_is_deleted() {
    let mut service = PushService::start().await;
    let data = tempfile::tempdir().unwrap();
    let runtime = match sandbox(data.path()) {
        Ok(runtime) => runtime,
        Err(reason) => {
            berth_testkit::skip("sandbox", &reason);
            return;
        }
    };
    let mut server = TestServer::start_with_host(
        Runtimes::single(runtime),
        Some("runc".into()),
        data,
        host_allowing(&service.origin()),
    )
    .await;
    let (status, created) = server
        .call(
            Method::POST,
            "/v1/boxes",
            Some(json!({"name": "pushy", "template": "echo"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let (_, key) = server.call(Method::GET, "/v1/web/push/key", None).await;
    let vapid_public = key["public_key"].as_str().unwrap().to_owned();
    let phone = Browser::new(format!("{}/push/phone", service.origin()));
    let gone = Browser::new(format!("{}/push/gone", service.origin()));
    let flaky = Browser::new(format!("{}/push/flaky", service.origin()));
    for browser in [&phone, &gone, &flaky] {
        let (status, answer) = subscribe(&server, browser.subscription()).await;
        assert_eq!(status, StatusCode::CREATED, "{answer}");
    }

    // A turn with no stream open: one push to each subscription, and the one the service
    // answered 503 once more after its Retry-After. The answer is longer than a
    // notification shows.
    let long = "4".repeat(200);
    post(&server, "pushy", &format!("remember {long}")).await;
    let (mut to_phone, mut to_gone, mut to_flaky) = (Vec::new(), 0, Vec::new());
    while to_phone.is_empty() || to_gone == 0 || to_flaky.len() < 2 {
        let push = service.next().await;
        let origin = service.origin();
        match push.path.as_str() {
            "/push/phone" => to_phone.push(open_push(&push, &phone, &vapid_public, &origin)),
            "/push/flaky" => to_flaky.push(open_push(&push, &flaky, &vapid_public, &origin)),
            "/push/gone" => {
                open_push(&push, &gone, &vapid_public, &origin);
                to_gone += 1;
            }
            other => panic!("a push to {other}"),
        }
    }
    assert_eq!(
        to_flaky[0], to_flaky[1],
        "the retry is the same notification"
    );
    assert_eq!(to_flaky[0], to_phone[0]);
    let answer = results(&server, "pushy").await.pop().unwrap_or_default();
    assert!(answer.starts_with("OK, I will remember 4444"), "{answer}");
    let expected: String = answer.chars().take(140).collect();
    assert_eq!(
        to_phone[0],
        json!({"title": "pushy", "body": expected, "url": "/#/boxes/pushy/chat", "box": "pushy"})
    );

    // The service answered 410 for `gone`: the daemon deletes that subscription.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, list) = server
            .call(Method::GET, "/v1/web/push/subscriptions", None)
            .await;
        let hosts = list["subscriptions"].as_array().unwrap().len();
        if hosts == 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the gone subscription stays: {list}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // A turn while an event stream is open: the screen shows it, no push.
    let (_, page) = server
        .call(Method::GET, "/v1/boxes/pushy/events?wait=false", None)
        .await;
    let after = page["next_after"].to_string();
    let (status, mut sse) = open_sse(
        &server,
        "/v1/boxes/pushy/events",
        &[("last-event-id", &after)],
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    post(&server, "pushy", "watched turn").await;
    let seen = until_result(&mut sse).await;
    let watched = seen.last().unwrap().data["data"]["result"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(watched, "echo: watched turn");
    let mut watched_results = results(&server, "pushy").await.len();
    // The daemon notices a closed stream at its next write to it: turns may end watched
    // until then. Each turn is posted after the last one's end, so the first push after
    // this is the first turn after the daemon noticed.
    drop(sse);
    let mut turn = 0;
    let pushed = loop {
        turn += 1;
        post(&server, "pushy", &format!("unwatched turn {turn}")).await;
        let deadline = Instant::now() + Duration::from_secs(60);
        while results(&server, "pushy").await.len() == watched_results {
            assert!(Instant::now() < deadline, "turn {turn} never ended");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        watched_results += 1;
        if let Ok(push) = service.received.try_recv() {
            break push;
        }
        if turn == 5 {
            // By now the stream is long closed: this turn's push must come.
            break service.next().await;
        }
    };
    // Pushes are sent in order: had the watched turn been pushed, its push would be the
    // first one to arrive after the first turn's.
    let mut later = vec![pushed];
    while let Ok(push) = service.received.try_recv() {
        later.push(push);
    }
    for push in &later {
        let browser = match push.path.as_str() {
            "/push/phone" => &phone,
            "/push/flaky" => &flaky,
            other => panic!("a push to {other}: the gone subscription gets nothing more"),
        };
        let opened = open_push(push, browser, &vapid_public, &service.origin());
        let body = opened["body"].as_str().unwrap();
        assert!(body.starts_with("echo: unwatched turn "), "{opened}");
    }
    assert_eq!(to_phone.len(), 1, "one push for the first turn");
    eprintln!("push: the daemon noticed the closed stream by unwatched turn {turn}");
    server.shut_down().await;
}

/// A push service that accepts connections, reads what comes, and never answers: it counts
/// the connections it was given and how many it held at once.
struct DeadService {
    addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    most_open: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for DeadService {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl DeadService {
    async fn start() -> DeadService {
        use tokio::io::AsyncReadExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (accepted, most_open) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let open = Arc::new(AtomicUsize::new(0));
        let (counted, most) = (accepted.clone(), most_open.clone());
        let task = tokio::spawn(async move {
            let mut held = tokio::task::JoinSet::new();
            while let Ok((mut stream, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                let now_open = open.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now_open, Ordering::SeqCst);
                let open = open.clone();
                held.spawn(async move {
                    let mut sink = [0u8; 4096];
                    while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
                    open.fetch_sub(1, Ordering::SeqCst);
                });
            }
        });
        DeadService {
            addr,
            accepted,
            most_open,
            task,
        }
    }

    fn origin(&self) -> String {
        format!("http://{}", self.addr)
    }
}

/// The next push to `path`, and how long it took from `since`; others are skipped.
async fn next_to(service: &mut PushService, path: &str, since: Instant) -> Duration {
    loop {
        let push = service.next().await;
        if push.path == path {
            return since.elapsed();
        }
    }
}

#[tokio::test]
async fn a_push_service_that_never_answers_does_not_delay_another_tenants_pushes() {
    let mut live = PushService::start().await;
    let dead = DeadService::start().await;
    let data = tempfile::tempdir().unwrap();
    let fake = Arc::new(crate::fake::FakeRuntime::new(data.path().to_owned()));
    let host = host_allowing_all(&[&live.origin(), &dead.origin()]);
    let server = TestServer::start_with_host(Runtimes::single(fake), None, data, host).await;

    // The victim (the admin's tenant): one box, one browser on the live service.
    let (status, body) = server
        .call(
            Method::POST,
            "/v1/boxes",
            Some(json!({"name": "victim", "template": "echo"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let phone = Browser::new(format!("{}/push/victim", live.origin()));
    let (status, answer) = subscribe(&server, phone.subscription()).await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    // The baseline: from a posted message to its turn's push.
    let posted = Instant::now();
    post(&server, "victim", "first").await;
    let baseline = next_to(&mut live, "/push/victim", posted).await;
    eprintln!("push: the victim's turn pushed in {baseline:?} alone");

    // The attacker: every subscription it may hold on a service that never answers, and
    // turn after turn.
    let attacker = new_tenant(&server, "attacker").await;
    let (status, body) = call_as(
        &server,
        &attacker,
        Method::POST,
        "/v1/boxes",
        Some(json!({"name": "flood", "template": "echo"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    for n in 0..berth_server::push::MAX_SUBSCRIPTIONS_PER_TENANT {
        let browser = Browser::new(format!("{}/push/dead/{n}", dead.origin()));
        let path = "/v1/web/push/subscriptions";
        let (status, answer) = call_as(
            &server,
            &attacker,
            Method::POST,
            path,
            Some(browser.subscription()),
        )
        .await;
        assert_eq!(status, StatusCode::CREATED, "{answer}");
    }
    for turn in 0..15 {
        let path = "/v1/boxes/flood/messages";
        let body = json!({"content": format!("turn {turn}")});
        let (status, answer) = call_as(&server, &attacker, Method::POST, path, Some(body)).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while dead.accepted.load(Ordering::SeqCst) == 0 {
        assert!(
            Instant::now() < deadline,
            "no push reached the dead service"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // The victim's next turn is pushed as fast as before, not after the dead service's
    // timeouts.
    let posted = Instant::now();
    post(&server, "victim", "second").await;
    let during = next_to(&mut live, "/push/victim", posted).await;
    let (accepted, most_open) = (
        dead.accepted.load(Ordering::SeqCst),
        dead.most_open.load(Ordering::SeqCst),
    );
    eprintln!(
        "push: the victim's turn pushed in {during:?} while the dead service held {most_open} connections at most ({accepted} in all)"
    );
    assert!(
        during < baseline + berth_server::push::sender::TIMEOUT / 2,
        "the victim's push took {during:?} (alone: {baseline:?})"
    );
    assert!(
        most_open <= berth_server::push::sender::MAX_IN_FLIGHT_PER_SERVICE,
        "{most_open} connections at once to one push service"
    );
}
