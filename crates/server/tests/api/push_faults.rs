//! Web Push against a push service that never answers: another tenant's pushes are not
//! delayed by it.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_server::Runtimes;
use http::{Method, StatusCode};
use serde_json::json;

use crate::harness::TestServer;
use crate::push_fixtures::{
    host_allowing_all, next_to, subscribe, Browser, DeadService, PushService,
};
use crate::talk::post;
use crate::tenants::{call_as, new_tenant};

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
