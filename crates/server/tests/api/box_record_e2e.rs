//! The box record on real boxes (the sandbox runtime, berth-init, the echo harness): the
//! box's env reaches exec at once and the harness at its next start, changed limits reach
//! the box's cgroup at its next start, and an open event stream does not keep it awake.
//! Skips (part `sandbox`) when the host cannot run boxes.

use crate::box_record::watched_box_idles_out;
use crate::end_to_end::{exec, with_sandbox};
use crate::harness::TestServer;
use crate::idle::create;
use crate::sse::open_sse;
use crate::talk::{post, until_result};
use http::{Method, StatusCode};
use serde_json::{json, Value};

async fn exec_with_env(server: &TestServer, name: &str, script: &str, env: Value) -> Value {
    let (status, out) = server
        .call(
            Method::POST,
            &format!("/v1/boxes/{name}/exec"),
            Some(json!({"cmd": ["sh", "-c", script], "env": env})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{script}: {out}");
    out
}

#[tokio::test]
async fn the_box_env_reaches_exec_at_once_and_the_harness_at_its_start() {
    let Some(mut server) = with_sandbox().await else {
        return;
    };
    create(
        &server,
        json!({"name": "envy", "template": "echo", "env": {
            "GREETING": "from the box",
            "SHARED": "box",
            // Where the echo harness writes its timeline: proof that it got the env.
            "ECHO_HARNESS_MEMORY": "/home/user/notes",
        }}),
    )
    .await;
    let script = r#"printf '%s|%s' "$GREETING" "$SHARED""#;
    let out = exec_with_env(&server, "envy", script, json!({"SHARED": "request"})).await;
    assert_eq!(
        out["stdout"], "from the box|request",
        "the request wins: {out}"
    );

    // The harness of this boot got the box's env: its timeline is where the env says.
    let (status, mut sse) = open_sse(&server, "/v1/boxes/envy/events", &[]).await;
    assert_eq!(status, StatusCode::OK);
    post(&server, "envy", "hello").await;
    until_result(&mut sse).await;
    let out = exec(
        &server,
        "envy",
        &["sh", "-c", "ls /home/user/notes/timeline"],
    )
    .await;
    assert_eq!(out["exit_code"], 0, "{out}");
    assert!(out["stdout"].as_str().unwrap().ends_with(".md\n"), "{out}");

    // A change reaches the next exec of the running box at once.
    let (status, body) = server
        .call(
            Method::PATCH,
            "/v1/boxes/envy",
            Some(json!({"env": {"GREETING": "changed"}})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["state"], "running");
    let out = exec_with_env(&server, "envy", script, json!({})).await;
    assert_eq!(out["stdout"], "changed|", "{out}");
    server.shut_down().await;
}

#[tokio::test]
async fn changed_limits_reach_the_box_at_its_next_start() {
    let Some(mut server) = with_sandbox().await else {
        return;
    };
    create(&server, json!({"name": "tight", "limits": {"pids": 100}})).await;
    // The limit of the cgroup the exec runs in (berth-init's box cgroup: exactly the
    // box's `pids`), on cgroup v2 or v1.
    let pids_max = "g=$(sed -n 's/^[0-9]*:pids://p' /proc/self/cgroup); \
                    if [ -n \"$g\" ]; then cat /sys/fs/cgroup/pids$g/pids.max; \
                    else cat /sys/fs/cgroup$(sed -n 's/^0:://p' /proc/self/cgroup)/pids.max; fi";
    let out = exec(&server, "tight", &["sh", "-c", pids_max]).await;
    assert_eq!(out["stdout"], "100\n", "{out}");

    let (status, body) = server
        .call(
            Method::PATCH,
            "/v1/boxes/tight",
            Some(json!({"limits": {"pids": 200}})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        (&body["limits"]["pids"], &body["pending_limits"]["pids"]),
        (&json!(100), &json!(200))
    );
    let out = exec(&server, "tight", &["sh", "-c", pids_max]).await;
    assert_eq!(
        out["stdout"], "100\n",
        "the running boot keeps its limits: {out}"
    );

    let (status, _) = server
        .call(Method::POST, "/v1/boxes/tight/stop", None)
        .await;
    assert_eq!(status, StatusCode::OK);
    let out = exec(&server, "tight", &["sh", "-c", pids_max]).await;
    assert_eq!(out["stdout"], "200\n", "{out}");
    let (_, body) = server.call(Method::GET, "/v1/boxes/tight", None).await;
    assert_eq!(body["limits"]["pids"], 200);
    assert!(body.get("pending_limits").is_none(), "{body}");
    server.shut_down().await;
}

#[tokio::test]
async fn an_open_event_stream_does_not_keep_a_real_box_awake() {
    let Some(mut server) = with_sandbox().await else {
        return;
    };
    watched_box_idles_out(
        &server,
        json!({"name": "watched", "template": "echo", "stop_after_s": 1}),
    )
    .await;
    server.shut_down().await;
}
