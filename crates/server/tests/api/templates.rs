//! Templates in the daemon: the list, reload (admin; bad files reported with their line and
//! skipped), box creation from a template with overrides, a template that disappears before
//! a start, and — with real boxes — the echo template's layer and idle reclaim.

use std::time::{Duration, Instant};

use http::{Method, StatusCode};
use serde_json::{json, Value};

use crate::end_to_end::{exec, with_sandbox};
use crate::harness::{error_code, TestServer};
use crate::tenants::{call_as, new_tenant};

fn names(templates: &Value) -> Vec<&str> {
    templates
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect()
}

fn find<'a>(templates: &'a Value, name: &str) -> &'a Value {
    templates
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("no template {name} in {templates}"))
}

pub(crate) fn write_template(server: &TestServer, file: &str, text: &str) {
    let dir = server.data.path().join("templates");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(file), text).unwrap();
}

pub(crate) async fn reload(server: &TestServer) -> Value {
    let (status, body) = server
        .call(Method::POST, "/v1/templates/reload", None)
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

#[tokio::test]
async fn the_builtin_templates_are_host_echo_minimal_debian_and_desktop() {
    let server = TestServer::without_runtime().await;
    let (status, body) = server.call(Method::GET, "/v1/templates", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let templates = &body["templates"];
    assert_eq!(
        names(templates),
        ["debian", "desktop", "echo", "host", "minimal"]
    );
    assert_eq!(find(templates, "minimal")["base"], "minimal");
    assert_eq!(find(templates, "debian")["base"], "debian");
    let desktop = find(templates, "desktop");
    assert_eq!(desktop["base"], "desktop");
    assert_eq!(desktop["harness"], serde_json::Value::Null);
    let services: Vec<&str> = desktop["services"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(services, ["xvfb", "xfce", "vnc"]);
    assert_eq!(find(templates, "debian")["disk_mib"], 1024);
    let host = find(templates, "host");
    assert_eq!(host["base"], "host");
    assert_eq!(host["runtimes"], serde_json::json!(["sandbox"]));
    assert_eq!(
        find(templates, "minimal")["runtimes"],
        serde_json::json!(["sandbox", "qemu", "firecracker"])
    );
    assert_eq!(host["harness"], Value::Null);
    assert_eq!(host["origin"], "builtin");
    assert_eq!(host["stop_after_s"], 300);
    assert_eq!(
        host["limits"],
        json!({"memory_mib":512,"pids":256,"cpus":1.0})
    );
    let echo = find(templates, "echo");
    assert_eq!(echo["layers"][0]["target"], "/opt/harness");
    assert_eq!(
        echo["harness"]["command"],
        json!(["/opt/harness/bin/echo-harness"])
    );
    assert_eq!(
        echo["unavailable"],
        Value::Null,
        "make init builds the echo harness"
    );
    // Any key may list them.
    let key = new_tenant(&server, "acme").await;
    let (status, _) = call_as(&server, &key, Method::GET, "/v1/templates", None).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn reload_loads_good_files_reports_bad_ones_and_is_admin_only() {
    let server = TestServer::without_runtime().await;
    write_template(
        &server,
        "mine.toml",
        "name = \"mine\"\nstop_after_s = 60\n[limits]\nmemory_mib = 256\npids = 100\n\
         [harness]\ncommand = [\"/bin/agent\"]\n\
         [[services]]\nname = \"db\"\ncommand = [\"/bin/db\"]\nready = { port = 5432 }\n",
    );
    write_template(
        &server,
        "broken.toml",
        "name = \"broken\"\n\nstop_after_s = \"soon\"\n",
    );
    let key = new_tenant(&server, "acme").await;
    let (status, body) = call_as(&server, &key, Method::POST, "/v1/templates/reload", None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(error_code(&body), "permission_denied");

    let body = reload(&server).await;
    assert_eq!(
        names(&body["templates"]),
        ["debian", "desktop", "echo", "host", "mine", "minimal"]
    );
    let mine = find(&body["templates"], "mine");
    assert_eq!(mine["stop_after_s"], 60);
    assert_eq!(
        mine["limits"],
        json!({"memory_mib":256,"pids":100,"cpus":1.0})
    );
    assert!(mine["origin"]
        .as_str()
        .unwrap()
        .ends_with("templates/mine.toml"));
    // Its services as the guest gets them, every default spelled out.
    assert_eq!(
        mine["services"],
        json!([{"name":"db","command":["/bin/db"],"user":"user","env":{},"cwd":null,
            "restart":"on-failure","ready":{"port":5432},"after":[],"keep_awake":false,
            "max_restarts":5,"ready_timeout_s":60,"stop_timeout_s":5}])
    );
    assert_eq!(find(&body["templates"], "host")["services"], json!([]));
    let errors = body["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0]["file"].as_str().unwrap().ends_with("broken.toml"));
    assert_eq!(errors[0]["line"], 3, "{errors:?}");
    assert!(!errors[0]["message"].as_str().unwrap().is_empty());
    let (_, listed) = server.call(Method::GET, "/v1/templates", None).await;
    assert_eq!(
        names(&listed["templates"]),
        ["debian", "desktop", "echo", "host", "mine", "minimal"]
    );
}

#[tokio::test]
async fn boxes_take_their_templates_defaults_and_may_override_them() {
    let server = TestServer::without_runtime().await;
    write_template(
        &server,
        "mine.toml",
        "name = \"mine\"\nstop_after_s = 60\n[limits]\nmemory_mib = 256\ncpus = 0.5\n",
    );
    reload(&server).await;
    let (status, a) = server
        .call(
            Method::POST,
            "/v1/boxes",
            Some(json!({"name":"a","template":"mine"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{a}");
    assert_eq!(a["template"], "mine");
    assert_eq!(a["stop_after_s"], 60);
    assert_eq!(a["limits"], json!({"memory_mib":256,"pids":256,"cpus":0.5}));
    let (status, b) = server
        .call(
            Method::POST,
            "/v1/boxes",
            Some(json!({"name":"b","template":"mine","stop_after_s":5,"limits":{"cpus":2.0}})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{b}");
    assert_eq!(b["stop_after_s"], 5);
    assert_eq!(b["limits"], json!({"memory_mib":256,"pids":256,"cpus":2.0}));
    let (status, e) = server
        .call(
            Method::POST,
            "/v1/boxes",
            Some(json!({"name":"e","template":"echo"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{e}");
    assert_eq!(e["template"], "echo");

    let (status, body) = server
        .call(
            Method::POST,
            "/v1/boxes",
            Some(json!({"name":"c","template":"nope"})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(error_code(&body), "invalid_request");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("\"nope\"") && message.contains("echo, host, mine"),
        "{message}"
    );
}

#[tokio::test]
async fn a_box_whose_template_disappeared_fails_its_start_with_the_reason() {
    let server = TestServer::without_runtime().await;
    write_template(&server, "gone.toml", "name = \"gone\"\n");
    reload(&server).await;
    let (status, _) = server
        .call(
            Method::POST,
            "/v1/boxes",
            Some(json!({"name":"orphan","template":"gone"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    std::fs::remove_file(server.data.path().join("templates/gone.toml")).unwrap();
    let body = reload(&server).await;
    assert_eq!(
        names(&body["templates"]),
        ["debian", "desktop", "echo", "host", "minimal"]
    );

    let (status, body) = server
        .call(Method::POST, "/v1/boxes/orphan/start", None)
        .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(error_code(&body), "unavailable");
    let (_, got) = server.call(Method::GET, "/v1/boxes/orphan", None).await;
    assert_eq!(got["state"], "failed", "{got}");
    let reason = got["state_reason"].as_str().unwrap();
    assert!(
        reason.contains("\"gone\"") && reason.contains("no longer exists"),
        "{reason}"
    );
    // The box can still be stopped (failed → stopped) and deleted.
    let (status, stopped) = server
        .call(Method::POST, "/v1/boxes/orphan/stop", None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(stopped["state"], "stopped");
    let (status, _) = server.call(Method::DELETE, "/v1/boxes/orphan", None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
}

#[tokio::test]
async fn end_to_end_template_layers_are_mounted_read_only() {
    let Some(mut server) = with_sandbox().await else {
        return;
    };
    let (status, body) = server
        .call(
            Method::POST,
            "/v1/boxes",
            Some(json!({"name":"bob","template":"echo"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let out = exec(&server, "bob", &["ls", "/opt/harness/bin"]).await;
    assert_eq!(out["exit_code"], 0, "{out}");
    assert!(
        out["stdout"].as_str().unwrap().contains("echo-harness"),
        "{out}"
    );
    let out = exec(&server, "bob", &["touch", "/opt/harness/bin/x"]).await;
    assert_ne!(out["exit_code"], 0, "the layer is read-only: {out}");

    // A user template's layer: a host directory.
    let tools = tempfile::tempdir().unwrap();
    std::fs::write(tools.path().join("hello.txt"), "hi from the layer\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(tools.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    write_template(
        &server,
        "tools.toml",
        &format!(
            "name = \"tools\"\n[[layers]]\nsource = \"{}\"\ntarget = \"/opt/tools\"\n",
            tools.path().display()
        ),
    );
    let body = reload(&server).await;
    assert_eq!(body["errors"], json!([]), "{body}");
    let (status, body) = server
        .call(
            Method::POST,
            "/v1/boxes",
            Some(json!({"name":"t","template":"tools"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let out = exec(&server, "t", &["cat", "/opt/tools/hello.txt"]).await;
    assert_eq!(out["stdout"], "hi from the layer\n", "{out}");
    server.shut_down().await;
}

async fn state(server: &TestServer, name: &str) -> String {
    let (_, body) = server
        .call(Method::GET, &format!("/v1/boxes/{name}"), None)
        .await;
    body["state"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test]
async fn end_to_end_idle_boxes_are_reclaimed_and_busy_ones_are_not() {
    let Some(mut server) = with_sandbox().await else {
        return;
    };
    for (name, timeout) in [("idle", 1), ("busy", 2)] {
        let (status, body) = server
            .call(
                Method::POST,
                "/v1/boxes",
                Some(json!({"name": name, "stop_after_s": timeout})),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    // `idle` is used once, then left alone: it is reclaimed, its disk kept.
    exec(&server, "idle", &["sh", "-c", "echo kept > /home/user/f"]).await;
    let began = Instant::now();
    while state(&server, "idle").await != "stopped" {
        assert!(began.elapsed() < Duration::from_secs(15), "never reclaimed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let reclaimed_after = began.elapsed();
    assert!(
        reclaimed_after >= Duration::from_millis(800),
        "{reclaimed_after:?}"
    );
    println!("idle box (1 s) reclaimed {reclaimed_after:?} after its last call");

    // `busy` runs `sleep 5` through one exec call, past its 2 s timeout: it stays up and the
    // process finishes.
    let (addr, key) = (server.addr, server.key.clone());
    let sleeper = tokio::spawn(async move {
        crate::harness::request(
            addr,
            Method::POST,
            "/v1/boxes/busy/exec",
            Some(&key),
            &[("content-type", "application/json")],
            bytes::Bytes::from(r#"{"cmd":["sleep","5"]}"#),
        )
        .await
    });
    let began = Instant::now();
    while state(&server, "busy").await != "running" {
        assert!(began.elapsed() < Duration::from_secs(15), "never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    while !sleeper.is_finished() {
        assert_eq!(
            state(&server, "busy").await,
            "running",
            "reclaimed while busy"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (status, _, out) = sleeper.await.unwrap();
    assert_eq!(status, StatusCode::OK);
    let out: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(out["exit_code"], 0, "{out}");
    assert!(
        began.elapsed() >= Duration::from_secs(4),
        "{:?}",
        began.elapsed()
    );
    // Then it idles out too.
    let began = Instant::now();
    while state(&server, "busy").await != "stopped" {
        assert!(began.elapsed() < Duration::from_secs(15), "never reclaimed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // The next call wakes the reclaimed box cold, with its disk.
    let out = exec(&server, "idle", &["cat", "/home/user/f"]).await;
    assert_eq!(out["stdout"], "kept\n");
    server.shut_down().await;
}

#[tokio::test]
async fn end_to_end_a_harness_still_answering_keeps_its_box_up() {
    let Some(mut server) = with_sandbox().await else {
        return;
    };
    // A harness that takes 4 s per turn, in a layer of its own.
    use std::os::unix::fs::PermissionsExt;
    let layer = tempfile::tempdir().unwrap();
    let bin = layer.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::fs::write(
        bin.join("slow"),
        "#!/bin/sh\nwhile IFS= read -r line; do\n  sleep 4\n  \
         echo '{\"type\":\"result\",\"subtype\":\"success\",\"result\":\"slow done\"}'\ndone\n",
    )
    .unwrap();
    for (path, mode) in [
        (layer.path(), 0o755),
        (&bin, 0o755),
        (&bin.join("slow"), 0o755),
    ] {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    write_template(
        &server,
        "slow.toml",
        &format!(
            "name = \"slow\"\n[[layers]]\nsource = \"{}\"\ntarget = \"/opt/slow\"\n\
             [harness]\ncommand = [\"/opt/slow/bin/slow\"]\nack = \"write\"\n",
            layer.path().display()
        ),
    );
    let body = reload(&server).await;
    assert_eq!(body["errors"], json!([]), "{body}");
    let (status, body) = server
        .call(
            Method::POST,
            "/v1/boxes",
            Some(json!({"name": "thinker", "template": "slow", "stop_after_s": 1})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");

    let posted = Instant::now();
    let (status, body) = server
        .call(
            Method::POST,
            "/v1/boxes/thinker/messages",
            Some(json!({"content": "think hard"})),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    // Until the turn's `result`, the box stays up although nothing else uses it.
    let mut seen_running = false;
    loop {
        let (status, page) = server
            .call(
                Method::GET,
                "/v1/boxes/thinker/events?after=0&wait=false",
                None,
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{page}");
        let answered = page["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["type"] == "result");
        if answered {
            break;
        }
        let now = state(&server, "thinker").await;
        seen_running |= now == "running";
        assert!(
            !(seen_running && (now == "stopping" || now == "stopped")),
            "reclaimed mid-turn after {:?}",
            posted.elapsed()
        );
        assert!(posted.elapsed() < Duration::from_secs(30), "no answer");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let answered_after = posted.elapsed();
    assert!(
        answered_after >= Duration::from_millis(3500),
        "{answered_after:?}"
    );
    // Then, with nothing in flight, it idles out.
    let began = Instant::now();
    while state(&server, "thinker").await != "stopped" {
        assert!(began.elapsed() < Duration::from_secs(15), "never reclaimed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server.shut_down().await;
}

#[tokio::test]
async fn end_to_end_a_harness_that_keeps_crashing_fails_its_box_with_the_reason() {
    let Some(mut server) = with_sandbox().await else {
        return;
    };
    write_template(
        &server,
        "crashy.toml",
        "name = \"crashy\"\n[harness]\ncommand = [\"sh\", \"-c\", \"exit 7\"]\nmax_restarts = 2\n",
    );
    let body = reload(&server).await;
    assert_eq!(body["errors"], json!([]), "{body}");
    let (status, body) = server
        .call(
            Method::POST,
            "/v1/boxes",
            Some(json!({"name": "crashy", "template": "crashy"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, body) = server
        .call(
            Method::POST,
            "/v1/boxes/crashy/messages",
            Some(json!({"content": "hello?"})),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let deadline = Instant::now() + Duration::from_secs(30);
    let failed = loop {
        let (_, record) = server.call(Method::GET, "/v1/boxes/crashy", None).await;
        if record["state"] == "failed" {
            break record;
        }
        assert!(Instant::now() < deadline, "never failed: {record}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let reason = failed["state_reason"].as_str().unwrap_or_default();
    assert!(reason.contains("harness"), "{failed}");
    // Its processes are gone; the message waits for a working harness.
    assert!(server.runtime_containers_running().is_empty());
    let (_, page) = server
        .call(Method::GET, "/v1/boxes/crashy/messages", None)
        .await;
    assert_eq!(page["messages"][0]["state"], "queued", "{page}");
    server.shut_down().await;
}
