//! What the Web Push tests share: a local push service that records what it receives, a
//! browser's subscription that decrypts a push as a browser would (RustCrypto's p256, hkdf
//! and aes-gcm; the daemon uses ring), a push service that never answers, and the daemon's
//! host settings and calls they use.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use berth_server::HostConfig;
use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::harness::TestServer;

pub(crate) const SUBJECT: &str = "mailto:push-test@example.com";

/// One push as the service received it.
#[derive(Debug)]
pub(crate) struct Received {
    pub(crate) path: String,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
}

/// The local push service: answers `410 Gone` on paths ending in `/gone`, `503` with
/// `Retry-After: 1` the first time a path ending in `/flaky` is pushed to, else `201`.
pub(crate) struct PushService {
    pub(crate) addr: SocketAddr,
    pub(crate) received: mpsc::Receiver<Received>,
    pub(crate) task: tokio::task::JoinHandle<()>,
}

impl Drop for PushService {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl PushService {
    pub(crate) async fn start() -> PushService {
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

    pub(crate) fn origin(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The next push (60 s at most: a turn on a loaded host, then the delivery).
    pub(crate) async fn next(&mut self) -> Received {
        tokio::time::timeout(Duration::from_secs(60), self.received.recv())
            .await
            .expect("a push within 60 s")
            .expect("the push service runs")
    }
}

/// A browser's push subscription: its ECDH key and auth secret.
pub(crate) struct Browser {
    pub(crate) secret: p256::SecretKey,
    pub(crate) auth: [u8; 16],
    pub(crate) endpoint: String,
}

impl Browser {
    pub(crate) fn new(endpoint: String) -> Browser {
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

    pub(crate) fn public(&self) -> Vec<u8> {
        use p256::elliptic_curve::sec1::ToEncodedPoint;
        self.secret
            .public_key()
            .to_encoded_point(false)
            .as_bytes()
            .to_vec()
    }

    /// `PushSubscription.toJSON()`.
    pub(crate) fn subscription(&self) -> Value {
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
    pub(crate) fn decrypt(&self, body: &[u8]) -> Vec<u8> {
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
pub(crate) fn open_push(
    push: &Received,
    browser: &Browser,
    vapid_public: &str,
    origin: &str,
) -> Value {
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

pub(crate) fn host_allowing(origin: &str) -> HostConfig {
    host_allowing_all(&[origin])
}

pub(crate) fn host_allowing_all(origins: &[&str]) -> HostConfig {
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

pub(crate) async fn subscribe(server: &TestServer, body: Value) -> (StatusCode, Value) {
    server
        .call(Method::POST, "/v1/web/push/subscriptions", Some(body))
        .await
}

pub(crate) async fn results(server: &TestServer, name: &str) -> Vec<String> {
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

/// A push service that accepts connections, reads what comes, and never answers: it counts
/// the connections it was given and how many it held at once.
pub(crate) struct DeadService {
    pub(crate) addr: SocketAddr,
    pub(crate) accepted: Arc<AtomicUsize>,
    pub(crate) most_open: Arc<AtomicUsize>,
    pub(crate) task: tokio::task::JoinHandle<()>,
}

impl Drop for DeadService {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl DeadService {
    pub(crate) async fn start() -> DeadService {
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

    pub(crate) fn origin(&self) -> String {
        format!("http://{}", self.addr)
    }
}

/// The next push to `path`, and how long it took from `since`; others are skipped.
pub(crate) async fn next_to(service: &mut PushService, path: &str, since: Instant) -> Duration {
    loop {
        let push = service.next().await;
        if push.path == path {
            return since.elapsed();
        }
    }
}
