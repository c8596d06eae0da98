//! A tenant's API keys over HTTP: several per tenant, listed without their secret, revoked
//! at once (401 on the next request), rotated (add, then revoke); a tenant manages its own
//! and no other's. And what a tenant sees of the host: no paths in templates, runtimes or
//! box views, while the admin sees them.

use http::{Method, StatusCode};
use serde_json::{json, Value};

use crate::harness::{error_code, TestServer};
use crate::tenants::{call_as, new_tenant};

fn key_ids(list: &Value) -> Vec<String> {
    list["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["id"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn keys_are_listed_rotated_and_revoked_at_once() {
    let server = TestServer::without_runtime().await;
    let first = new_tenant(&server, "acme").await;
    new_tenant(&server, "other").await;

    let (status, list) = call_as(&server, &first, Method::GET, "/v1/tenants/acme/keys", None).await;
    assert_eq!(status, StatusCode::OK, "{list}");
    let keys = list["keys"].as_array().unwrap();
    assert_eq!(keys.len(), 1, "{list}");
    let old_id = keys[0]["id"].as_str().unwrap().to_owned();
    assert!(
        first.starts_with(keys[0]["prefix"].as_str().unwrap()),
        "{list}"
    );
    assert!(
        keys[0]["last_used_at"].is_string(),
        "this very call used it: {list}"
    );
    assert_eq!(keys[0]["admin"], false);
    assert!(
        !list.to_string().contains(&first[14..]),
        "the key itself is never listed"
    );

    // Rotation: the tenant adds a key with its own, then revokes the old one.
    let (status, added) =
        call_as(&server, &first, Method::POST, "/v1/tenants/acme/keys", None).await;
    assert_eq!(status, StatusCode::CREATED, "{added}");
    let second = added["api_key"].as_str().unwrap().to_owned();
    let new_id = added["key"]["id"].as_str().unwrap().to_owned();
    let (_, list) = call_as(&server, &second, Method::GET, "/v1/tenants/acme/keys", None).await;
    assert_eq!(key_ids(&list), [old_id.clone(), new_id.clone()]);
    let (status, body) = call_as(
        &server,
        &second,
        Method::DELETE,
        &format!("/v1/tenants/acme/keys/{old_id}"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let (status, body) = call_as(&server, &first, Method::GET, "/v1/boxes", None).await;
    assert_eq!(
        status,
        StatusCode::UNAUTHORIZED,
        "a revoked key fails at once: {body}"
    );
    let (status, _) = call_as(&server, &second, Method::GET, "/v1/boxes", None).await;
    assert_eq!(status, StatusCode::OK);

    // A tenant cannot make an admin key, nor see or touch another tenant's keys.
    let (status, body) = call_as(
        &server,
        &second,
        Method::POST,
        "/v1/tenants/acme/keys",
        Some(json!({"admin": true})),
    )
    .await;
    assert_eq!(
        (status, error_code(&body)),
        (StatusCode::FORBIDDEN, "permission_denied")
    );
    for (method, path) in [
        (Method::GET, "/v1/tenants/other/keys"),
        (Method::POST, "/v1/tenants/other/keys"),
        (Method::GET, "/v1/tenants/default/keys"),
    ] {
        let (status, body) = call_as(&server, &second, method, path, None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}: {body}");
    }
    // The admin sees and revokes any tenant's keys.
    let (status, list) = server
        .call(Method::GET, "/v1/tenants/acme/keys", None)
        .await;
    assert_eq!(
        (status, key_ids(&list)),
        (StatusCode::OK, vec![new_id.clone()])
    );
    let (status, _) = server
        .call(
            Method::DELETE,
            &format!("/v1/tenants/acme/keys/{new_id}"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = call_as(&server, &second, Method::GET, "/v1/boxes", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, body) = server
        .call(Method::DELETE, "/v1/tenants/acme/keys/key_0000", None)
        .await;
    assert_eq!(
        (status, error_code(&body)),
        (StatusCode::NOT_FOUND, "not_found")
    );
}

#[tokio::test]
async fn the_admin_key_rotates_and_the_last_one_stays() {
    let server = TestServer::without_runtime().await;
    let (_, list) = server
        .call(Method::GET, "/v1/tenants/default/keys", None)
        .await;
    let admin_id = key_ids(&list)[0].clone();
    let path = format!("/v1/tenants/default/keys/{admin_id}");
    let (status, body) = server.call(Method::DELETE, &path, None).await;
    assert_eq!(
        (status, error_code(&body)),
        (StatusCode::CONFLICT, "conflict"),
        "{body}"
    );
    let (status, added) = server
        .call(
            Method::POST,
            "/v1/tenants/default/keys",
            Some(json!({"admin": true})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{added}");
    let new_admin = added["api_key"].as_str().unwrap().to_owned();
    assert_eq!(added["key"]["admin"], true);
    let (status, _) = call_as(&server, &new_admin, Method::DELETE, &path, None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = server.call(Method::GET, "/v1/tenants", None).await;
    assert_eq!(
        status,
        StatusCode::UNAUTHORIZED,
        "the old admin key is revoked"
    );
    let (status, _) = call_as(&server, &new_admin, Method::GET, "/v1/tenants", None).await;
    assert_eq!(status, StatusCode::OK);
}

/// Every absolute path under `root` that `value` mentions (as a string anywhere in it).
fn mentions(value: &Value, needle: &str) -> bool {
    value.to_string().contains(needle)
}

#[tokio::test]
async fn a_tenant_sees_no_host_paths_in_templates_runtimes_or_boxes() {
    let server = TestServer::without_runtime().await;
    let data = server.data.path().display().to_string();
    let templates_dir = server.data.path().join("templates");
    std::fs::create_dir_all(&templates_dir).unwrap();
    let layer = server.data.path().join("skills-layer");
    std::fs::create_dir_all(&layer).unwrap();
    std::fs::write(
        templates_dir.join("custom.toml"),
        format!(
            "name = \"custom\"\nbase = \"dir:/srv/secret-rootfs\"\n\n[[layers]]\nsource = \"{}\"\ntarget = \"/mnt/skills/x\"\n",
            layer.display()
        ),
    )
    .unwrap();
    let (status, body) = server
        .call(Method::POST, "/v1/templates/reload", None)
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let key = new_tenant(&server, "acme").await;

    // The admin sees where things are.
    let (_, admin_templates) = server.call(Method::GET, "/v1/templates", None).await;
    assert!(
        mentions(&admin_templates, "/srv/secret-rootfs"),
        "{admin_templates}"
    );
    assert!(mentions(&admin_templates, &data), "{admin_templates}");

    let (status, templates) = call_as(&server, &key, Method::GET, "/v1/templates", None).await;
    assert_eq!(status, StatusCode::OK, "{templates}");
    for needle in [data.as_str(), "/srv/secret-rootfs", "/usr", "/var/lib"] {
        assert!(!mentions(&templates, needle), "{needle} in {templates}");
    }
    let custom = templates["templates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "custom")
        .unwrap_or_else(|| panic!("{templates}"));
    assert_eq!(
        (&custom["base"], &custom["origin"], &custom["layers"]),
        (
            &json!("dir"),
            &json!("file"),
            &json!([{"source": null, "target": "/mnt/skills/x"}])
        )
    );

    let (status, runtimes) = call_as(&server, &key, Method::GET, "/v1/runtimes", None).await;
    assert_eq!(status, StatusCode::OK, "{runtimes}");
    assert!(!mentions(&runtimes, &data), "{runtimes}");
    assert!(runtimes["runtimes"]
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["details"].is_null()));

    // A failed start's reason names host paths; the tenant reads it without them.
    let (status, body) = call_as(
        &server,
        &key,
        Method::POST,
        "/v1/boxes",
        Some(json!({"name": "a", "template": "custom"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, failed) = call_as(&server, &key, Method::POST, "/v1/boxes/a/start", None).await;
    assert!(status.is_server_error(), "{failed}");
    let message = failed["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("<host path>")
            && !message.contains("/srv/secret-rootfs")
            && !message.contains(&data),
        "{message}"
    );
    let (_, view) = call_as(&server, &key, Method::GET, "/v1/boxes/a", None).await;
    let reason = view["state_reason"]
        .as_str()
        .unwrap_or_else(|| panic!("{view}"));
    assert!(
        reason.contains("<host path>")
            && !reason.contains("/srv/secret-rootfs")
            && !reason.contains(&data),
        "{reason}"
    );

    // The admin, who owns the host, reads the same failure whole.
    let (status, body) = server
        .call(
            Method::POST,
            "/v1/boxes",
            Some(json!({"name": "b", "template": "custom"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, failed) = server.call(Method::POST, "/v1/boxes/b/start", None).await;
    assert!(status.is_server_error(), "{failed}");
    let message = failed["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("/srv/secret-rootfs") && !message.contains("<host path>"),
        "{message}"
    );
}
