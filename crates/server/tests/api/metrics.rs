//! `GET /metrics` against the fake runtime: the exposition is valid Prometheus text (read
//! by this crate's strict reader, and by Debian's `python3-prometheus-client`, part
//! `prom-parser`), it needs an admin key, and its numbers follow what the boxes do: boxes by
//! state, one count per transition, wake latency by rung, streams per tenant, the store's
//! calls. Also every answer's `X-Request-Id`.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, StatusCode};
use serde_json::{json, Value};

use crate::end_to_end::exec;
use crate::fake::FakeRuntime;
use crate::harness::{error_code, TestServer};
use crate::idle::create;
use crate::prometheus_text::Exposition;
use crate::sse::open_sse;
use crate::tenants::new_tenant;

/// Where Debian's `python3-prometheus-client` is importable (not a virtualenv's python).
const DEBIAN_PYTHON: &str = "/usr/bin/python3";

async fn pausing() -> TestServer {
    let data = tempfile::tempdir().unwrap();
    let fake = Arc::new(FakeRuntime::pausing(data.path().to_owned()));
    TestServer::start(fake, None, data).await
}

/// `/metrics` with `key`: the status, the Content-Type and the body.
async fn scrape_as(server: &TestServer, key: Option<&str>) -> (StatusCode, String, String) {
    let (status, headers, body) = server
        .raw(Method::GET, "/metrics", key, &[], Bytes::new())
        .await;
    let content_type = headers
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (
        status,
        content_type,
        String::from_utf8(body.to_vec()).unwrap(),
    )
}

/// The exposition, read strictly (and by the real parser where it is installed).
async fn scrape(server: &TestServer) -> Exposition {
    let (status, content_type, text) = scrape_as(server, Some(&server.key)).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(content_type, "text/plain; version=0.0.4; charset=utf-8");
    Exposition::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

fn transitions(m: &Exposition, from: &str, to: &str) -> f64 {
    m.get("berth_box_transitions_total", &[("from", from), ("to", to)])
}

fn wakes(m: &Exposition, from: &str) -> f64 {
    m.get("berth_box_wake_seconds_count", &[("from", from)])
}

async fn post(server: &TestServer, name: &str, verb: &str) -> Value {
    let (status, body) = server
        .call(Method::POST, &format!("/v1/boxes/{name}/{verb}"), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{verb}: {body}");
    body
}

#[tokio::test]
async fn metrics_follow_the_boxes_transitions_and_wakes() {
    let server = pausing().await;
    let before = scrape(&server).await;
    for state in [
        "stopped",
        "starting",
        "running",
        "stopping",
        "paused",
        "snapshotted",
        "failed",
    ] {
        assert_eq!(
            before.get("berth_boxes", &[("state", state)]),
            0.0,
            "{state}"
        );
    }
    assert_eq!(transitions(&before, "stopped", "starting"), 0.0);
    assert_eq!(
        before.get(
            "berth_box_transition_seconds_count",
            &[("from", "starting"), ("to", "running")]
        ),
        0.0,
        "every legal transition is a series before it happens"
    );

    create(&server, json!({"name": "alpha"})).await;
    assert_eq!(
        scrape(&server)
            .await
            .get("berth_boxes", &[("state", "stopped")]),
        1.0
    );
    // A call that needs the box wakes it: a cold start.
    exec(&server, "alpha", &["echo", "hi"]).await;
    let running = scrape(&server).await;
    assert!(running.get("berth_boxes", &[("state", "running")]) >= 1.0);
    assert_eq!(running.get("berth_boxes", &[("state", "stopped")]), 0.0);
    assert_eq!(transitions(&running, "stopped", "starting"), 1.0);
    assert_eq!(transitions(&running, "starting", "running"), 1.0);
    assert_eq!(wakes(&running, "stopped"), 1.0);
    assert_eq!(wakes(&running, "paused"), 0.0);
    let boot = running.get(
        "berth_box_transition_seconds_sum",
        &[("from", "starting"), ("to", "running")],
    );
    assert!(boot > 0.0, "the boot took some time: {boot}");
    // A second call finds it running: no transition, no wake.
    exec(&server, "alpha", &["echo", "again"]).await;
    let again = scrape(&server).await;
    assert_eq!(transitions(&again, "starting", "running"), 1.0);
    assert_eq!(wakes(&again, "stopped"), 1.0);

    // Pause, then a call thaws it: a wake from `paused`.
    post(&server, "alpha", "pause").await;
    let paused = scrape(&server).await;
    assert_eq!(paused.get("berth_boxes", &[("state", "paused")]), 1.0);
    assert_eq!(transitions(&paused, "running", "paused"), 1.0);
    exec(&server, "alpha", &["echo", "thawed"]).await;
    let thawed = scrape(&server).await;
    assert_eq!(transitions(&thawed, "paused", "running"), 1.0);
    assert_eq!(wakes(&thawed, "paused"), 1.0);

    // Stop and start again: one more of each, per start.
    post(&server, "alpha", "stop").await;
    post(&server, "alpha", "start").await;
    let restarted = scrape(&server).await;
    assert_eq!(transitions(&restarted, "running", "stopping"), 1.0);
    assert_eq!(transitions(&restarted, "stopping", "stopped"), 1.0);
    assert_eq!(transitions(&restarted, "stopped", "starting"), 2.0);
    assert_eq!(transitions(&restarted, "starting", "running"), 2.0);
    assert_eq!(wakes(&restarted, "stopped"), 2.0);

    // A delete is a transition too, through the same place.
    let (status, body) = server.call(Method::DELETE, "/v1/boxes/alpha", None).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let deleted = scrape(&server).await;
    assert_eq!(transitions(&deleted, "running", "deleted"), 1.0);
    assert_eq!(deleted.get("berth_boxes", &[("state", "running")]), 0.0);

    // The store's own timing, read and write, and the rest of the families.
    for kind in ["read", "write"] {
        assert!(
            deleted.get("berth_store_seconds_count", &[("kind", kind)]) > 0.0,
            "{kind}"
        );
    }
    assert_eq!(
        deleted.get("berth_store_info", &[("backend", "sqlite")]),
        1.0
    );
    assert_eq!(deleted.get("berth_store_conflicts_total", &[]), 0.0);
    assert_eq!(
        deleted.get(
            "berth_build_info",
            &[("version", env!("CARGO_PKG_VERSION"))]
        ),
        1.0
    );
    assert!(deleted.get("berth_process_open_fds", &[]) > 0.0);
    assert!(deleted.get("berth_process_resident_memory_bytes", &[]) > 1e6);
    for family in [
        "berth_egress_sent_bytes_total",
        "berth_egress_received_bytes_total",
        "berth_egress_allowed_total",
        "berth_egress_denials_total",
        "berth_streams_open",
        "berth_streams_limit",
    ] {
        assert!(deleted.family(family).is_some(), "{family}");
    }
}

#[tokio::test]
async fn open_streams_are_shown_per_tenant() {
    let server = pausing().await;
    create(&server, json!({"name": "watched"})).await;
    let tenant = server
        .store
        .tenant_by_name(berth_store::DEFAULT_TENANT)
        .unwrap()
        .unwrap();
    let series = [("tenant", tenant.id.as_str())];
    assert_eq!(
        scrape(&server).await.value("berth_streams_open", &series),
        None
    );
    let (status, events) = open_sse(&server, "/v1/boxes/watched/events", &[]).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        scrape(&server).await.get("berth_streams_open", &series),
        1.0
    );
    drop(events);
    // The slot is given back when the server notices the stream is gone.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while scrape(&server)
        .await
        .value("berth_streams_open", &series)
        .is_some()
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the stream's slot stays held"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn metrics_need_an_admin_key() {
    let server = TestServer::without_runtime().await;
    let tenant_key = new_tenant(&server, "acme").await;
    for (key, want, code) in [
        (None, StatusCode::UNAUTHORIZED, "unauthorized"),
        (
            Some("berth_not-a-key"),
            StatusCode::UNAUTHORIZED,
            "unauthorized",
        ),
        (
            Some(tenant_key.as_str()),
            StatusCode::FORBIDDEN,
            "permission_denied",
        ),
    ] {
        let (status, content_type, body) = scrape_as(&server, key).await;
        assert_eq!(status, want, "{key:?}: {body}");
        assert!(
            content_type.starts_with("application/json"),
            "{content_type}"
        );
        let body: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(error_code(&body), code, "{body}");
    }
    // Not part of the versioned API, nor of its description.
    let (status, openapi) = server.call(Method::GET, "/openapi.json", None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(openapi["paths"].get("/metrics").is_none());
}

#[tokio::test]
async fn a_real_prometheus_parser_reads_the_exposition() {
    let server = pausing().await;
    create(&server, json!({"name": "parsed"})).await;
    exec(&server, "parsed", &["echo", "hi"]).await;
    let (status, _, text) = scrape_as(&server, Some(&server.key)).await;
    assert_eq!(status, StatusCode::OK);
    let ours = Exposition::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let Some(theirs) = python_parse(&text) else {
        return;
    };
    // Every sample, with its labels and value, is read the same by both.
    let mut samples = 0;
    for family in theirs.as_array().unwrap() {
        for sample in family["samples"].as_array().unwrap() {
            let name = sample["name"].as_str().unwrap();
            let labels: Vec<(&str, &str)> = sample["labels"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str().unwrap()))
                .collect();
            let value = sample["value"].as_f64().unwrap();
            let mine = ours.get(name, &labels);
            assert!(
                (mine - value).abs() <= 1e-9 * value.abs().max(1.0),
                "{name}{labels:?}: {mine} here, {value} by prometheus_client"
            );
            samples += 1;
        }
    }
    assert_eq!(samples, ours.sample_count(), "both read every sample");
    let families: Vec<&str> = theirs
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["type"].as_str().unwrap())
        .collect();
    assert!(families.contains(&"histogram") && families.contains(&"counter"));
}

/// What Debian's `prometheus_client` reads in `text`: one object per family (name, type,
/// samples); `None` (skipped, part `prom-parser`) where it is not installed.
fn python_parse(text: &str) -> Option<Value> {
    const SCRIPT: &str = r#"
import json, sys
from prometheus_client.parser import text_string_to_metric_families
families = []
for f in text_string_to_metric_families(sys.stdin.read()):
    families.append({"name": f.name, "type": f.type, "samples": [
        {"name": s.name, "labels": s.labels, "value": s.value} for s in f.samples]})
json.dump(families, sys.stdout)
"#;
    let probe = std::process::Command::new(DEBIAN_PYTHON)
        .args(["-c", "import prometheus_client.parser"])
        .output();
    match probe {
        Ok(out) if out.status.success() => {}
        Ok(out) => {
            berth_testkit::skip(
                "prom-parser",
                format!(
                    "{DEBIAN_PYTHON} cannot import prometheus_client (apt-get install python3-prometheus-client): {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                ),
            );
            return None;
        }
        Err(e) => {
            berth_testkit::skip("prom-parser", format!("no {DEBIAN_PYTHON}: {e}"));
            return None;
        }
    }
    let mut child = std::process::Command::new(DEBIAN_PYTHON)
        .args(["-c", SCRIPT])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), text.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "prometheus_client refused the exposition: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(serde_json::from_slice(&out.stdout).unwrap())
}

#[tokio::test]
async fn every_answer_carries_its_request_id_and_a_bad_one_is_replaced() {
    let server = TestServer::without_runtime().await;
    let id_of = |headers: &http::HeaderMap| {
        let all: Vec<_> = headers.get_all("x-request-id").iter().collect();
        assert_eq!(all.len(), 1, "one X-Request-Id: {all:?}");
        all[0].to_str().unwrap().to_owned()
    };
    let call = |headers: Vec<(&'static str, String)>| {
        let server = &server;
        async move {
            let headers: Vec<(&str, &str)> =
                headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
            server
                .raw(
                    Method::GET,
                    "/v1/boxes",
                    Some(&server.key),
                    &headers,
                    Bytes::new(),
                )
                .await
        }
    };
    let (status, headers, _) = call(vec![]).await;
    assert_eq!(status, StatusCode::OK);
    let fresh = id_of(&headers);
    assert!(fresh.starts_with("req_") && fresh.len() == 28, "{fresh}");
    let (_, headers, _) = call(vec![]).await;
    assert_ne!(id_of(&headers), fresh, "a new id per request");

    let kept = "trace-1.A_b".to_owned();
    let (_, headers, _) = call(vec![("x-request-id", kept.clone())]).await;
    assert_eq!(id_of(&headers), kept);
    for bad in [
        "a".repeat(65),
        "has space".to_owned(),
        "quote\"d".to_owned(),
        "x;level=error".to_owned(),
    ] {
        let (_, headers, _) = call(vec![("x-request-id", bad.clone())]).await;
        let id = id_of(&headers);
        assert_ne!(id, bad);
        assert!(id.starts_with("req_"), "{bad:?} → {id}");
    }
    // Errors carry one too, 404s and 401s included.
    let (status, headers, _) = server
        .raw(Method::GET, "/nowhere", None, &[], Bytes::new())
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(id_of(&headers).starts_with("req_"));
}
