//! An E2B sandbox's host names under `[ports] base_domain`, on a real sandbox box:
//! `<port>-<sandboxID>` opens with the sandbox's `trafficAccessToken` (and with nothing
//! else a stranger has), never showing the token to the app; `49983-<sandboxID>` is the
//! daemon's envd, whatever listens on that port in the box.

use berth_server::Runtimes;
use http::{Method, StatusCode};
use serde_json::json;

use crate::e2b_control::e2b_as;
use crate::end_to_end::sandbox;
use crate::harness::TestServer;
use crate::ports::{
    app_headers, get, header, json_of, put_file, start_servers, APP, APP_PORT, BASE_DOMAIN,
};

#[tokio::test]
async fn a_sandboxs_ports_open_with_its_traffic_token_and_its_envd_by_host_name() {
    let data = tempfile::tempdir().unwrap();
    let runtime = match sandbox(data.path()) {
        Ok(runtime) => runtime,
        Err(reason) => {
            berth_testkit::skip("sandbox", &reason);
            return;
        }
    };
    let mut host = berth_server::HostConfig::default();
    host.ports.base_domain = Some(BASE_DOMAIN.into());
    host.ports.listen_wait_s = 30;
    let server =
        TestServer::start_with_host(Runtimes::single(runtime), Some("runc".into()), data, host)
            .await;
    let mut sandboxes = Vec::new();
    for _ in 0..2 {
        let (status, _, created) = e2b_as(
            &server,
            Some(&server.key),
            Method::POST,
            "/v2/sandboxes",
            Some(json!({"templateID": "base", "timeout": 300})),
        )
        .await;
        assert_eq!(status, StatusCode::CREATED, "{created}");
        sandboxes.push(created);
    }
    let [mine, other] = [&sandboxes[0], &sandboxes[1]];
    let id = mine["sandboxID"].as_str().unwrap();
    let traffic = mine["trafficAccessToken"].as_str().unwrap();
    let envd_token = mine["envdAccessToken"].as_str().unwrap();
    assert_ne!(traffic, envd_token);
    put_file(&server, id, "/home/user/port_app.py", APP.as_bytes()).await;
    start_servers(&server, id).await;

    let addr = server.addr;
    let app = format!("{APP_PORT}-{id}.{BASE_DOMAIN}:{}", addr.port());
    let (status, _, body) = get(
        addr,
        &app,
        "/headers",
        &[("e2b-traffic-access-token", traffic)],
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body:?}");
    let headers = app_headers(&json_of(&body));
    assert_eq!(
        header(&headers, "e2b-traffic-access-token"),
        None,
        "the app sees the token"
    );
    // Nothing, the envd token, or another sandbox's traffic token: refused.
    let others_traffic = other["trafficAccessToken"].as_str().unwrap();
    for refused in [None, Some(envd_token), Some(others_traffic), Some("00")] {
        let headers: Vec<(&str, &str)> = refused
            .map(|t| vec![("e2b-traffic-access-token", t)])
            .unwrap_or_default();
        let (status, _, body) = get(addr, &app, "/headers", &headers).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{refused:?}: {body:?}");
    }

    // 49983 is the daemon's envd: its health with the envd token, 502 without it.
    let envd = format!("49983-{id}.{BASE_DOMAIN}:{}", addr.port());
    let (status, _, _) = get(addr, &envd, "/health", &[("x-access-token", envd_token)]).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _, _) = get(addr, &envd, "/health", &[("x-access-token", traffic)]).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY);
    // A Connect call without the token: unauthenticated, in Connect's shape.
    let (status, _, body) = get(addr, &envd, "/filesystem.Filesystem/Stat", &[]).await;
    assert_ne!(status, StatusCode::OK, "{body:?}");
    for sandbox in &sandboxes {
        let path = format!("/sandboxes/{}", sandbox["sandboxID"].as_str().unwrap());
        let (status, _, _) = e2b_as(&server, Some(&server.key), Method::DELETE, &path, None).await;
        assert_eq!(status, StatusCode::NO_CONTENT);
    }
}
