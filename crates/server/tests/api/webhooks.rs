//! Webhooks through the API: registrations the daemon must not accept are refused with the
//! API's errors, and a tenant's attempts are bounded: a receiver that holds every request
//! open never sees more than `[webhooks] max_in_flight_per_tenant` at once, and the rest
//! are delivered once it answers. (The whole delivery story, signatures and a crash
//! included, is `crates/cli/tests/webhooks.rs`.)

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use berth_server::webhooks::config::WebhooksHostConfig;
use berth_server::{HostConfig, Runtimes};
use http::{Method, StatusCode};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::harness::{NoBoxes, TestServer};

/// Polls `check` until it holds; fails naming `what` after `within`.
async fn wait_for<F: std::future::Future<Output = bool>>(
    what: &str,
    within: Duration,
    mut check: impl FnMut() -> F,
) {
    let deadline = tokio::time::Instant::now() + within;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A receiver that holds each request until released, counting how many it holds.
#[derive(Default)]
struct Holding {
    held: AtomicUsize,
    most: AtomicUsize,
    taken: AtomicUsize,
    released: AtomicBool,
    release: tokio::sync::Notify,
}

impl Holding {
    async fn serve(self: Arc<Self>, listener: TcpListener) {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(self.clone().take(stream));
        }
    }

    async fn take(self: Arc<Self>, mut stream: TcpStream) {
        let mut request = Vec::new();
        let mut buf = [0u8; 4096];
        // The daemon's request is small: its head and body come before it reads anything.
        while !request.ends_with(b"}") {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => request.extend_from_slice(&buf[..n]),
            }
        }
        self.taken.fetch_add(1, Ordering::SeqCst);
        let now = self.held.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        while !self.released.load(Ordering::SeqCst) {
            let notified = self.release.notified();
            if self.released.load(Ordering::SeqCst) {
                break;
            }
            notified.await;
        }
        self.held.fetch_sub(1, Ordering::SeqCst);
        let _ = stream
            .write_all(b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n")
            .await;
    }
}

#[tokio::test]
async fn a_tenants_attempts_are_bounded_and_bad_registrations_refused() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin = format!("http://{}", listener.local_addr().unwrap());
    let receiver = Arc::new(Holding::default());
    tokio::spawn(receiver.clone().serve(listener));
    let host = HostConfig {
        webhooks: WebhooksHostConfig {
            allow_endpoints: vec![origin.clone()],
            max_in_flight_per_tenant: 2,
            timeout_s: 30,
            ..WebhooksHostConfig::default()
        },
        ..HostConfig::default()
    };
    let server = TestServer::start_with_host(
        Runtimes::single(Arc::new(NoBoxes)),
        None,
        tempfile::tempdir().unwrap(),
        host,
    )
    .await;

    for (body, needle) in [
        (
            json!({"url": "http://127.0.0.1:1/in", "events": ["box.failed"]}),
            "https",
        ),
        (
            json!({"url": "https://192.168.1.1/in", "events": ["box.failed"]}),
            "192.168.1.1",
        ),
        (
            json!({"url": format!("{origin}/in"), "events": []}),
            "at least one",
        ),
        (
            json!({"url": format!("{origin}/in"), "events": ["box.gone"]}),
            "box.gone",
        ),
    ] {
        let (status, answer) = server.call(Method::POST, "/v1/webhooks", Some(body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
        assert_eq!(answer["error"]["code"], "invalid_request");
        assert!(
            answer["error"]["message"]
                .as_str()
                .unwrap()
                .contains(needle),
            "{answer}"
        );
    }
    let body = json!({"url": format!("{origin}/in"), "events": ["box.failed", "box.failed"]});
    let (status, made) = server.call(Method::POST, "/v1/webhooks", Some(body)).await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    assert!(made["secret"].as_str().unwrap().starts_with("whsec_"));
    assert_eq!(made["events"], json!(["box.failed"]));
    let id = made["id"].as_str().unwrap().to_owned();
    let (_, listed) = server.call(Method::GET, "/v1/webhooks", None).await;
    assert!(listed["webhooks"][0].get("secret").is_none(), "{listed}");

    // Six test deliveries at once; the receiver holds whatever comes.
    let server = Arc::new(server);
    let tests: Vec<_> = (0..6)
        .map(|_| {
            let (server, path) = (server.clone(), format!("/v1/webhooks/{id}/test"));
            tokio::spawn(async move { server.call(Method::POST, &path, None).await })
        })
        .collect();
    wait_for("two attempts held", Duration::from_secs(30), || {
        let held = receiver.held.load(Ordering::SeqCst);
        async move { held == 2 }
    })
    .await;
    // While those two are held no third may start: the daemon's worker has had every
    // chance (it wakes on each new delivery) by the time the six calls were all stored.
    wait_for("six deliveries stored", Duration::from_secs(30), || {
        let server = server.clone();
        let id = id.clone();
        async move {
            let (_, list) = server
                .call(Method::GET, &format!("/v1/webhooks/{id}/deliveries"), None)
                .await;
            list["deliveries"].as_array().map(Vec::len) == Some(6)
        }
    })
    .await;
    assert_eq!(receiver.taken.load(Ordering::SeqCst), 2);
    receiver.released.store(true, Ordering::SeqCst);
    receiver.release.notify_waiters();
    for test in tests {
        let (status, delivery) = test.await.unwrap();
        assert_eq!(status, StatusCode::OK, "{delivery}");
    }
    wait_for("every delivery answered", Duration::from_secs(60), || {
        let server = server.clone();
        let id = id.clone();
        async move {
            let (_, list) = server
                .call(Method::GET, &format!("/v1/webhooks/{id}/deliveries"), None)
                .await;
            list["deliveries"]
                .as_array()
                .is_some_and(|d| d.len() == 6 && d.iter().all(|d| d["state"] == "delivered"))
        }
    })
    .await;
    assert_eq!(receiver.most.load(Ordering::SeqCst), 2);
    assert_eq!(receiver.taken.load(Ordering::SeqCst), 6);

    let (status, _) = server
        .call(Method::DELETE, &format!("/v1/webhooks/{id}"), None)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = server
        .call(Method::GET, &format!("/v1/webhooks/{id}"), None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}
