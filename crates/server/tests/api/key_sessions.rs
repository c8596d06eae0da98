//! A revoked key's browser sessions end with it (issue 20, part 3): a browser signed in
//! with a key (`POST /v1/web/sessions {"api_key"}`) is refused (401) from the request after
//! that key is revoked, or rotated out; so is one of the same tenant whose origin berth
//! never recorded (signed in before it did: it may have been that key). A paired browser
//! of the tenant, and another tenant's browsers, stay signed in.

use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode};
use serde_json::{json, Value};

use crate::harness::TestServer;
use crate::tenants::{call_as, new_tenant};

/// The header a key's revocation answers with: how many web sessions it ended.
const ENDED: &str = "berth-web-sessions-ended";

/// Signs a browser in (no key, no cookie, no `Origin`); the `name=value` to send back as
/// `Cookie` and the session's id.
async fn sign_in(server: &TestServer, body: Value) -> (String, String) {
    let (status, headers, bytes) = server
        .raw(
            Method::POST,
            "/v1/web/sessions",
            None,
            &[],
            Bytes::from(body.to_string()),
        )
        .await;
    let session: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(status, StatusCode::CREATED, "{session}");
    let set = headers["set-cookie"].to_str().unwrap();
    let cookie = set.split(';').next().unwrap().to_owned();
    (cookie, session["id"].as_str().unwrap().to_owned())
}

/// A browser's read of the box list with its cookie.
async fn status_with(server: &TestServer, cookie: &str) -> StatusCode {
    let headers = [("cookie", cookie)];
    server
        .raw(Method::GET, "/v1/boxes", None, &headers, Bytes::new())
        .await
        .0
}

/// Revokes `key_id` of `tenant` with `key`: the answer's headers.
async fn revoke(server: &TestServer, key: &str, tenant: &str, key_id: &str) -> HeaderMap {
    let path = format!("/v1/tenants/{tenant}/keys/{key_id}");
    let (status, headers, body) = server
        .raw(Method::DELETE, &path, Some(key), &[], Bytes::new())
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body:?}");
    headers
}

fn ended(headers: &HeaderMap) -> Option<u64> {
    headers.get(ENDED)?.to_str().ok()?.parse().ok()
}

/// The id of the tenant's key whose plaintext is `key`.
async fn key_id(server: &TestServer, tenant: &str, key: &str) -> String {
    let (status, list) = call_as(
        server,
        key,
        Method::GET,
        &format!("/v1/tenants/{tenant}/keys"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{list}");
    list["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| key.starts_with(k["prefix"].as_str().unwrap()))
        .unwrap_or_else(|| panic!("no key {}… in {list}", &key[..14]))["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// Makes a session look as one signed in before berth recorded how (migration 15's
/// `unknown`), by writing the database as that migration left such rows.
fn make_unknown(server: &TestServer, session_id: &str) {
    let db = rusqlite::Connection::open(server.data.path().join(berth_store::DB_FILE)).unwrap();
    db.busy_timeout(std::time::Duration::from_secs(30)).unwrap();
    let changed = db
        .execute(
            "UPDATE web_sessions SET opened_with = 'unknown', api_key_id = NULL WHERE id = ?1",
            [session_id],
        )
        .unwrap();
    assert_eq!(changed, 1);
}

#[tokio::test]
async fn revoking_or_rotating_a_key_signs_out_the_browsers_it_signed_in() {
    let server = TestServer::without_runtime().await;
    let first = new_tenant(&server, "acme").await;
    let other_key = new_tenant(&server, "other").await;
    let (status, added) =
        call_as(&server, &first, Method::POST, "/v1/tenants/acme/keys", None).await;
    assert_eq!(status, StatusCode::CREATED, "{added}");
    let second = added["api_key"].as_str().unwrap().to_owned();
    let first_id = key_id(&server, "acme", &first).await;

    // The attacker's browser, signed in with the first key (stolen, so about to be
    // revoked); the owner's, with the second; the owner's phone, paired; a browser of
    // acme's from before berth recorded how it signed in; another tenant's, of both kinds.
    let (stolen, _) = sign_in(&server, json!({ "api_key": first })).await;
    let (laptop, _) = sign_in(&server, json!({ "api_key": second })).await;
    let (status, pairing) = call_as(
        &server,
        &second,
        Method::POST,
        "/v1/web/pairings",
        Some(json!({})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{pairing}");
    let (phone, _) = sign_in(&server, json!({ "pairing_code": pairing["code"] })).await;
    let (old, old_id) = sign_in(&server, json!({ "api_key": second })).await;
    make_unknown(&server, &old_id);
    let (theirs, _) = sign_in(&server, json!({ "api_key": other_key })).await;
    let (theirs_old, theirs_old_id) = sign_in(&server, json!({ "api_key": other_key })).await;
    make_unknown(&server, &theirs_old_id);
    for cookie in [&stolen, &laptop, &phone, &old, &theirs, &theirs_old] {
        assert_eq!(status_with(&server, cookie).await, StatusCode::OK);
    }

    let headers = revoke(&server, &second, "acme", &first_id).await;
    assert_eq!(
        status_with(&server, &stolen).await,
        StatusCode::UNAUTHORIZED,
        "a browser signed in with a revoked key still works"
    );
    assert_eq!(
        status_with(&server, &old).await,
        StatusCode::UNAUTHORIZED,
        "a browser of unknown origin of the tenant may have used that key"
    );
    for (cookie, whose) in [
        (&laptop, "signed in with another key"),
        (&phone, "paired"),
        (&theirs, "another tenant's"),
        (&theirs_old, "another tenant's, of unknown origin"),
    ] {
        assert_eq!(
            status_with(&server, cookie).await,
            StatusCode::OK,
            "{whose}"
        );
    }
    assert_eq!(ended(&headers), Some(2), "{headers:?}");

    // Rotation with the old key revoked (`berth tenant key rotate --revoke-old`): an add,
    // then the revocation, made with the old key itself.
    let (status, added) = call_as(
        &server,
        &second,
        Method::POST,
        "/v1/tenants/acme/keys",
        None,
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{added}");
    let third = added["api_key"].as_str().unwrap().to_owned();
    let second_id = key_id(&server, "acme", &second).await;
    let headers = revoke(&server, &second, "acme", &second_id).await;
    assert_eq!(
        status_with(&server, &laptop).await,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(status_with(&server, &phone).await, StatusCode::OK, "paired");
    assert_eq!(ended(&headers), Some(1), "{headers:?}");
    // Nothing else to end: the count says so.
    let (status, added) =
        call_as(&server, &third, Method::POST, "/v1/tenants/acme/keys", None).await;
    assert_eq!(status, StatusCode::CREATED, "{added}");
    let headers = revoke(
        &server,
        &third,
        "acme",
        added["key"]["id"].as_str().unwrap(),
    )
    .await;
    assert_eq!(ended(&headers), Some(0), "{headers:?}");

    // The sessions' list says how each signed in.
    let (status, list) = call_as(&server, &other_key, Method::GET, "/v1/web/sessions", None).await;
    assert_eq!(status, StatusCode::OK, "{list}");
    let mut origins: Vec<&str> = list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["opened_with"].as_str().unwrap_or("?"))
        .collect();
    origins.sort_unstable();
    assert_eq!(origins, ["api_key", "unknown"], "{list}");
    let other_id = key_id(&server, "other", &other_key).await;
    assert!(
        list["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["api_key_id"] == other_id.as_str()),
        "{list}"
    );
}
