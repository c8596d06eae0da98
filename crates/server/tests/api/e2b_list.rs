//! Listing E2B sandboxes: pages that follow `x-next-token`, the metadata filter in the
//! encoding the SDKs send, the state filter, the order, and refused parameters.

use std::collections::BTreeSet;

use http::{Method, StatusCode};
use serde_json::{json, Value};

use crate::e2b_control::{assert_error, create, e2b, e2b_as, e2b_server};
use crate::harness::TestServer;

/// Every page of `path` (which has a `?`), following `x-next-token`; the ids in order.
async fn all_pages(server: &TestServer, path: &str) -> (Vec<String>, usize) {
    let mut ids = Vec::new();
    let mut token: Option<String> = None;
    let mut pages = 0;
    loop {
        let url = match &token {
            Some(t) => format!("{path}&nextToken={t}"),
            None => path.to_owned(),
        };
        let (status, headers, page) =
            e2b_as(server, Some(&server.key), Method::GET, &url, None).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        pages += 1;
        ids.extend(
            page.as_array()
                .unwrap()
                .iter()
                .map(|s| s["sandboxID"].as_str().unwrap().to_owned()),
        );
        match headers.get("x-next-token") {
            Some(t) => token = Some(t.to_str().unwrap().to_owned()),
            None => return (ids, pages),
        }
        assert!(pages < 20, "paging does not end");
    }
}

#[tokio::test]
async fn pages_filters_and_order() {
    let (server, _fake) = e2b_server().await;
    let mut made = Vec::new();
    for i in 0..5 {
        let team = if i % 2 == 0 { "a&b=c d" } else { "other" };
        let created = create(
            &server,
            json!({"templateID": "base", "metadata": {"team": team, "n": i.to_string()}}),
        )
        .await;
        made.push(created["sandboxID"].as_str().unwrap().to_owned());
    }
    // A berth box that is not a sandbox is never listed.
    server
        .call(Method::POST, "/v1/boxes", Some(json!({"name": "plain"})))
        .await;

    let (ids, pages) = all_pages(&server, "/v2/sandboxes?limit=2").await;
    assert_eq!(pages, 3);
    assert_eq!(ids.iter().collect::<BTreeSet<_>>().len(), 5, "{ids:?}");
    // Newest first: the order of creation (ties within a millisecond by id).
    let (_, listed) = e2b(&server, Method::GET, "/v2/sandboxes", None).await;
    let mut expected: Vec<(String, String)> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["startedAt"].as_str().unwrap().to_owned(),
                s["sandboxID"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    expected.sort();
    let oldest_first: Vec<String> = expected.into_iter().map(|(_, id)| id).collect();
    assert_eq!(
        ids,
        oldest_first.iter().rev().cloned().collect::<Vec<_>>(),
        "newest first"
    );
    let (asc, _) = all_pages(&server, "/v2/sandboxes?limit=3&order=asc").await;
    assert_eq!(asc, oldest_first, "oldest first");

    // The Python SDK's encoding of {"team": "a&b=c d"}: urlencode of quote()d pairs,
    // then encoded again as a query value.
    let (matching, _) = all_pages(
        &server,
        "/v2/sandboxes?metadata=team%3Da%252526b%25253Dc%252520d&limit=100",
    )
    .await;
    assert_eq!(
        matching.iter().collect::<BTreeSet<_>>(),
        [&made[0], &made[2], &made[4]].into_iter().collect(),
    );
    let (none, _) = all_pages(&server, "/v2/sandboxes?metadata=team%3Dnobody&limit=100").await;
    assert!(none.is_empty());

    let (status, _) = e2b(
        &server,
        Method::POST,
        &format!("/sandboxes/{}/pause", made[1]),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (paused, _) = all_pages(&server, "/v2/sandboxes?state=paused&limit=10").await;
    assert_eq!(paused, [made[1].clone()]);
    let (running, _) = all_pages(&server, "/v2/sandboxes?state=running&limit=10").await;
    assert_eq!(running.len(), 4);
    let (both, _) = all_pages(&server, "/v2/sandboxes?state=running,paused&limit=10").await;
    assert_eq!(both.len(), 5);
    let (_, headers, _) = e2b_as(
        &server,
        Some(&server.key),
        Method::GET,
        "/v2/sandboxes?limit=1",
        None,
    )
    .await;
    assert_eq!(headers["x-total-running"], "4");

    // v1: the running ones, filtered, unpaged.
    let (status, v1) = e2b(&server, Method::GET, "/sandboxes?metadata=n%3D1", None).await;
    assert_eq!(status, StatusCode::OK, "{v1}");
    assert_eq!(v1, json!([]), "n=1 is the paused one");
    let (_, v1) = e2b(&server, Method::GET, "/sandboxes", None).await;
    assert_eq!(v1.as_array().unwrap().len(), 4, "{v1}");
    let entry = &v1[0];
    for field in [
        "templateID",
        "clientID",
        "startedAt",
        "endAt",
        "cpuCount",
        "memoryMB",
        "diskSizeMB",
        "state",
        "envdVersion",
        "metadata",
    ] {
        assert!(
            entry.get(field).is_some_and(|v| !v.is_null()),
            "{field} in {entry}"
        );
    }

    for (query, needle) in [
        ("state=sleeping", "state"),
        ("limit=0", "limit"),
        ("limit=101", "limit"),
        ("order=up", "order"),
        ("nextToken=garbage", "nextToken"),
        ("startedAfter=yesterday", "startedAfter"),
        ("metadata=a%3D%25zz", "metadata"),
        ("colour=red", "colour"),
    ] {
        let (status, body) = e2b(
            &server,
            Method::GET,
            &format!("/v2/sandboxes?{query}"),
            None,
        )
        .await;
        assert_error(status, &body, StatusCode::BAD_REQUEST, needle);
    }
    let (status, body): (StatusCode, Value) = e2b(
        &server,
        Method::GET,
        "/v2/sandboxes?startedAfter=2000-01-01T00:00:00Z&template=base",
        None,
    )
    .await;
    assert_eq!(
        (status, body.as_array().map(Vec::len)),
        (StatusCode::OK, Some(5))
    );
}
