//! Tenant quotas over HTTP: the admin sets them (create, PATCH, `null` clears), the listing
//! shows them with the usage, and a tenant is refused with 403 `quota_exceeded` naming the
//! limit and the usage at create (boxes, memory, disk) and at every cold start (running
//! boxes), the implicit wake of an exec included. Id slots return once a box is deleted.

use std::sync::Arc;

use http::{Method, StatusCode};
use serde_json::{json, Value};

use crate::fake::FakeRuntime;
use crate::harness::{error_code, TestServer};
use crate::tenants::call_as;

/// Creates tenant `name` with `quota` (admin); returns its key.
async fn tenant_with(server: &TestServer, name: &str, quota: Value) -> String {
    let mut body = json!({"name": name});
    body.as_object_mut()
        .unwrap()
        .extend(quota.as_object().unwrap().clone());
    let (status, created) = server.call(Method::POST, "/v1/tenants", Some(body)).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    created["api_key"].as_str().unwrap().to_owned()
}

/// Asserts a 403 `quota_exceeded` on `limit` with `usage`; returns the message.
fn assert_quota(status: StatusCode, body: &Value, limit: &str, max: u64, usage: u64) -> String {
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(error_code(body), "quota_exceeded", "{body}");
    let details = &body["error"]["details"];
    assert_eq!(details["limit"], limit, "{body}");
    assert_eq!(details["max"], max, "{body}");
    assert_eq!(details["usage"], usage, "{body}");
    let message = body["error"]["message"].as_str().unwrap().to_owned();
    assert!(
        message.contains(limit) && message.contains(&usage.to_string()),
        "{message}"
    );
    message
}

fn tenant<'a>(list: &'a Value, name: &str) -> &'a Value {
    list["tenants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("no tenant {name} in {list}"))
}

#[tokio::test]
async fn boxes_memory_and_disk_are_refused_past_the_quota_and_shown() {
    let server = TestServer::without_runtime().await;
    let key = tenant_with(
        &server,
        "acme",
        json!({"max_boxes": 2, "max_memory_mib": 1024, "max_disk_mib": 3000}),
    )
    .await;
    let create = |body: Value| call_as(&server, &key, Method::POST, "/v1/boxes", Some(body));

    let (status, body) =
        create(json!({"name": "a", "limits": {"memory_mib": 512}, "disk_mib": 2048})).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, body) = create(json!({"name": "b", "limits": {"memory_mib": 768}})).await;
    assert_quota(status, &body, "max_memory_mib", 1024, 512);
    let (status, body) =
        create(json!({"name": "b", "limits": {"memory_mib": 256}, "disk_mib": 1024})).await;
    assert_quota(status, &body, "max_disk_mib", 3000, 2048);
    let (status, body) =
        create(json!({"name": "b", "limits": {"memory_mib": 256}, "disk_mib": 512})).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, body) =
        create(json!({"name": "c", "limits": {"memory_mib": 64}, "disk_mib": 64})).await;
    let message = assert_quota(status, &body, "max_boxes", 2, 2);
    assert!(message.contains("max_boxes is 2"), "{message}");

    let (status, list) = server.call(Method::GET, "/v1/tenants", None).await;
    assert_eq!(status, StatusCode::OK, "{list}");
    let acme = tenant(&list, "acme");
    assert_eq!(
        (&acme["quota"], &acme["usage"]),
        (
            &json!({"max_boxes": 2, "max_running": null, "max_memory_mib": 1024, "max_disk_mib": 3000}),
            &json!({"boxes": 2, "running": 0, "memory_mib": 768, "disk_mib": 2560})
        )
    );
    // A tenant sees its own quota, not the listing.
    let (status, body) = call_as(&server, &key, Method::GET, "/v1/tenants", None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let (status, own) = call_as(&server, &key, Method::GET, "/v1/tenants/acme", None).await;
    assert_eq!(status, StatusCode::OK, "{own}");
    assert_eq!(own["usage"]["boxes"], 2);
    let (status, body) = call_as(&server, &key, Method::GET, "/v1/tenants/default", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "another tenant: {body}");

    // Only the admin changes a quota; `null` clears a limit, an absent one stays.
    let patch = json!({"max_boxes": null, "max_running": 1});
    let (status, body) = call_as(
        &server,
        &key,
        Method::PATCH,
        "/v1/tenants/acme",
        Some(patch.clone()),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let (status, body) = server
        .call(Method::PATCH, "/v1/tenants/acme", Some(patch))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body["quota"],
        json!({"max_boxes": null, "max_running": 1, "max_memory_mib": 1024, "max_disk_mib": 3000})
    );
    let (status, body) =
        create(json!({"name": "c", "limits": {"memory_mib": 64}, "disk_mib": 64})).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    for bad in [
        json!({"max_boxes": -1}),
        json!({"max_pods": 1}),
        json!({"max_boxes": "2"}),
    ] {
        let (status, body) = server
            .call(Method::PATCH, "/v1/tenants/acme", Some(bad.clone()))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
    }
    let (status, body) = server
        .call(Method::PATCH, "/v1/tenants/nobody", Some(json!({})))
        .await;
    assert_eq!(
        (status, error_code(&body)),
        (StatusCode::NOT_FOUND, "not_found")
    );
}

#[tokio::test]
async fn concurrent_creates_cannot_pass_max_boxes() {
    let server = TestServer::without_runtime().await;
    let key = tenant_with(&server, "acme", json!({"max_boxes": 3})).await;
    let calls = (0..12).map(|i| {
        call_as(
            &server,
            &key,
            Method::POST,
            "/v1/boxes",
            Some(json!({"name": format!("b{i}")})),
        )
    });
    let results = futures_util::future::join_all(calls).await;
    let created = results
        .iter()
        .filter(|(s, _)| *s == StatusCode::CREATED)
        .count();
    assert_eq!(created, 3, "{results:?}");
    for (status, body) in results.iter().filter(|(s, _)| *s != StatusCode::CREATED) {
        assert_quota(*status, body, "max_boxes", 3, 3);
    }
}

async fn with_fake() -> (TestServer, Arc<FakeRuntime>) {
    let data = tempfile::tempdir().unwrap();
    let fake = Arc::new(FakeRuntime::new(data.path().to_owned()));
    (TestServer::start(fake.clone(), None, data).await, fake)
}

#[tokio::test]
async fn starts_and_implicit_wakes_are_refused_past_max_running() {
    let (server, _fake) = with_fake().await;
    let key = tenant_with(&server, "acme", json!({"max_running": 1})).await;
    for name in ["a", "b"] {
        let (status, body) = call_as(
            &server,
            &key,
            Method::POST,
            "/v1/boxes",
            Some(json!({"name": name})),
        )
        .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    let (status, body) = call_as(&server, &key, Method::POST, "/v1/boxes/a/start", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = call_as(&server, &key, Method::POST, "/v1/boxes/b/start", None).await;
    assert_quota(status, &body, "max_running", 1, 1);
    // An exec wakes a stopped box: the same limit.
    let exec = json!({"cmd": ["echo", "hi"]});
    let (status, body) = call_as(
        &server,
        &key,
        Method::POST,
        "/v1/boxes/b/exec",
        Some(exec.clone()),
    )
    .await;
    assert_quota(status, &body, "max_running", 1, 1);
    let (_, b) = call_as(&server, &key, Method::GET, "/v1/boxes/b", None).await;
    assert_eq!(b["state"], "stopped", "{b}");
    // The running box is served; once it stops, the other may run.
    let (status, body) = call_as(
        &server,
        &key,
        Method::POST,
        "/v1/boxes/a/exec",
        Some(exec.clone()),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = call_as(&server, &key, Method::POST, "/v1/boxes/a/stop", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = call_as(&server, &key, Method::POST, "/v1/boxes/b/exec", Some(exec)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // The admin's own tenant has no limit.
    for name in ["x", "y"] {
        server
            .call(Method::POST, "/v1/boxes", Some(json!({"name": name})))
            .await;
        let (status, body) = server
            .call(Method::POST, &format!("/v1/boxes/{name}/start"), None)
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
}

#[tokio::test]
async fn a_deleted_box_s_id_slot_is_handed_out_again() {
    let (server, _fake) = with_fake().await;
    let slot_of = |name: &str| {
        let tenant = server
            .store
            .tenant_by_name(berth_store::DEFAULT_TENANT)
            .unwrap()
            .unwrap();
        server
            .store
            .get_box_by_name(&tenant.id, name)
            .unwrap()
            .unwrap()
            .id_slot
    };
    server
        .call(Method::POST, "/v1/boxes", Some(json!({"name": "keep"})))
        .await;
    let mut slots = std::collections::BTreeSet::new();
    for i in 0..10 {
        let name = format!("b{i}");
        let (status, body) = server
            .call(Method::POST, "/v1/boxes", Some(json!({"name": name})))
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        // Started, so the runtime made its files; deleted, so it removed them.
        let (status, body) = server
            .call(Method::POST, &format!("/v1/boxes/{name}/start"), None)
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        slots.insert(slot_of(&name));
        let (status, body) = server
            .call(Method::DELETE, &format!("/v1/boxes/{name}"), None)
            .await;
        assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    }
    assert_eq!(slots.len(), 1, "one slot for the whole loop: {slots:?}");
    assert_ne!(slots.first().copied(), Some(slot_of("keep")));
}

/// A template reload can raise its boxes' volume size: a start grows a volume only while
/// the tenant stays within `max_disk_mib` (else the box starts at its current size).
#[tokio::test]
async fn a_start_grows_a_volume_only_within_the_disk_quota() {
    let (server, fake) = with_fake().await;
    let key = tenant_with(&server, "acme", json!({"max_disk_mib": 1024})).await;
    let template = |disk_mib: u64| {
        let dir = server.data.path().join("templates");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("grow.toml"),
            format!("name = \"grow\"\nbase = \"host\"\ndisk_mib = {disk_mib}\n"),
        )
        .unwrap();
    };
    let reload = || server.call(Method::POST, "/v1/templates/reload", None);
    template(512);
    reload().await;
    let (status, created) = call_as(
        &server,
        &key,
        Method::POST,
        "/v1/boxes",
        Some(json!({"name": "a", "template": "grow"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    // The volume as a first start made it: 512 MiB, sparse.
    let id: berth_protocol::BoxId = created["id"].as_str().unwrap().parse().unwrap();
    let image = berth_runtime::volume_image(server.data.path(), &id);
    std::fs::create_dir_all(image.parent().unwrap()).unwrap();
    std::fs::File::create(&image)
        .unwrap()
        .set_len(512 << 20)
        .unwrap();

    template(2048);
    reload().await;
    let last_disk = || fake.specs.lock().unwrap().last().unwrap().1;
    let (status, body) = call_as(&server, &key, Method::POST, "/v1/boxes/a/start", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(last_disk(), 512, "grown past the tenant's disk quota");
    call_as(&server, &key, Method::POST, "/v1/boxes/a/stop", None).await;

    let (status, body) = server
        .call(
            Method::PATCH,
            "/v1/tenants/acme",
            Some(json!({"max_disk_mib": 4096})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = call_as(&server, &key, Method::POST, "/v1/boxes/a/start", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(last_disk(), 2048, "within the quota the volume grows");
}
