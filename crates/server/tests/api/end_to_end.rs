//! With real boxes: the sandbox runtime (runc) and the static berth-init.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use berth_runtime::Runtime;
use bytes::Bytes;
use http::{Method, StatusCode};
use serde_json::{json, Value};

use crate::harness::{error_code, TestServer};

/// The sandbox runtime, or why this host cannot run it.
pub(crate) fn sandbox(data: &Path) -> Result<Arc<dyn Runtime>, String> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Err("not root".into());
    }
    let runc_found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|dir| dir.join("runc").is_file()))
        .unwrap_or(false);
    if !runc_found {
        return Err("runc is not installed".into());
    }
    let init_bin = berth_runtime::init_binary().or_else(|e| {
        // `make init` puts the static build here.
        let built: PathBuf = [
            env!("CARGO_MANIFEST_DIR"),
            "..",
            "..",
            "target",
            std::env::consts::ARCH,
        ]
        .iter()
        .collect::<PathBuf>();
        let candidate =
            PathBuf::from(format!("{}-unknown-linux-gnu", built.display())).join("init/berth-init");
        if candidate.is_file() {
            Ok(candidate)
        } else {
            Err(format!("{e}"))
        }
    })?;
    let runtime =
        berth_runtime::sandbox::SandboxRuntime::new(berth_runtime::sandbox::SandboxConfig {
            data_dir: data.to_owned(),
            oci_runtime: "runc".into(),
            init_bin,
        })
        .map_err(|e| format!("the sandbox runtime cannot start: {e}"))?;
    Ok(Arc::new(runtime))
}

/// The sandbox runtime, or `None` (counted as skipped) where this host cannot run it.
pub(crate) fn sandbox_or_skip(data: &Path) -> Option<Arc<dyn Runtime>> {
    sandbox(data)
        .map_err(|reason| berth_testkit::skip("sandbox", &reason))
        .ok()
}

pub(crate) async fn with_sandbox() -> Option<TestServer> {
    let data = tempfile::tempdir().unwrap();
    match sandbox(data.path()) {
        Ok(runtime) => Some(TestServer::start(runtime, Some("runc".into()), data).await),
        Err(reason) => {
            berth_testkit::skip("sandbox", &reason);
            None
        }
    }
}

/// Runs `cmd` in box `name` (collected); asserts the call itself succeeded.
pub(crate) async fn exec(server: &TestServer, name: &str, cmd: &[&str]) -> Value {
    let (status, out) = server
        .call(
            Method::POST,
            &format!("/v1/boxes/{name}/exec"),
            Some(json!({"cmd": cmd})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{cmd:?}: {out}");
    out
}

#[tokio::test]
async fn end_to_end_exec_stop_start_keeps_the_disk() {
    let Some(mut server) = with_sandbox().await else {
        return;
    };
    let (status, _) = server
        .call(Method::POST, "/v1/boxes", Some(json!({"name":"alice"})))
        .await;
    assert_eq!(status, StatusCode::CREATED);

    let out = exec(&server, "alice", &["sh", "-c", "echo hi > ~/a.txt; id -u"]).await;
    assert_eq!(out["stdout"], "1001\n", "{out}");
    assert_eq!(out["exit_code"], 0);
    assert_eq!(out["timed_out"], false);
    let (_, alice) = server.call(Method::GET, "/v1/boxes/alice", None).await;
    assert_eq!(alice["state"], "running");

    let (status, stopped) = server
        .call(Method::POST, "/v1/boxes/alice/stop", None)
        .await;
    assert_eq!(
        (status, &stopped["state"]),
        (StatusCode::OK, &json!("stopped"))
    );
    let (status, started) = server
        .call(Method::POST, "/v1/boxes/alice/start", None)
        .await;
    assert_eq!(
        (status, &started["state"]),
        (StatusCode::OK, &json!("running")),
        "{started}"
    );

    let out = exec(&server, "alice", &["cat", "/home/user/a.txt"]).await;
    assert_eq!(out["stdout"], "hi\n", "{out}");
    let out = exec(&server, "alice", &["sh", "-c", "echo oops >&2; kill -9 $$"]).await;
    assert_eq!(
        (out["exit_code"].as_i64(), out["stderr"].as_str()),
        (Some(137), Some("oops\n")),
        "{out}"
    );

    // Streaming frames.
    let (status, headers, body) = server
        .raw(
            Method::POST,
            "/v1/boxes/alice/exec",
            Some(&server.key),
            &[("accept", "application/x-ndjson")],
            json!({"cmd":["echo","streamed"]}).to_string().into(),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers["content-type"], "application/x-ndjson");
    let frames: Vec<Value> = String::from_utf8_lossy(&body)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(frames.first().unwrap()["type"], "started", "{frames:?}");
    assert_eq!(frames.last().unwrap()["type"], "exit", "{frames:?}");
    assert!(frames.iter().any(|f| f["type"] == "stdout"), "{frames:?}");

    server.shut_down().await;
    let states: Vec<_> = server
        .store
        .list_all_boxes()
        .unwrap()
        .into_iter()
        .map(|b| b.state)
        .collect();
    assert_eq!(
        states,
        vec![berth_store::BoxState::Stopped],
        "shutdown stops every box"
    );
}

#[tokio::test]
async fn end_to_end_files_and_concurrent_wakes() {
    let Some(server) = with_sandbox().await else {
        return;
    };
    server
        .call(Method::POST, "/v1/boxes", Some(json!({"name":"bob"})))
        .await;

    // Two calls on a stopped box: it starts once and both succeed.
    let (a, b) = tokio::join!(
        exec(&server, "bob", &["true"]),
        exec(&server, "bob", &["true"])
    );
    assert_eq!(
        (a["exit_code"].as_i64(), b["exit_code"].as_i64()),
        (Some(0), Some(0))
    );

    let (status, _, _) = server
        .raw(
            Method::PUT,
            "/v1/boxes/bob/files?path=/home/user/b.txt",
            Some(&server.key),
            &[],
            Bytes::from_static(b"hello"),
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, headers, bytes) = server
        .raw(
            Method::GET,
            "/v1/boxes/bob/files?path=/home/user/b.txt",
            Some(&server.key),
            &[],
            Bytes::new(),
        )
        .await;
    assert_eq!((status, &bytes[..]), (StatusCode::OK, &b"hello"[..]));
    assert_eq!(headers["content-type"], "application/octet-stream");
    let (status, list) = server
        .call(
            Method::GET,
            "/v1/boxes/bob/files/list?path=/home/user",
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{list}");
    assert!(
        list["entries"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["name"] == "b.txt" && e["size"] == 5),
        "{list}"
    );
    let (status, stat) = server
        .call(
            Method::GET,
            "/v1/boxes/bob/files/stat?path=/home/user/b.txt",
            None,
        )
        .await;
    assert_eq!(
        (status, &stat["kind"]),
        (StatusCode::OK, &json!("file")),
        "{stat}"
    );
    let (status, body) = server
        .call(
            Method::GET,
            "/v1/boxes/bob/files?path=/home/user/none",
            None,
        )
        .await;
    assert_eq!(
        (status, error_code(&body)),
        (StatusCode::NOT_FOUND, "not_found")
    );
    let (status, _) = server
        .call(
            Method::POST,
            "/v1/boxes/bob/files/mkdir?path=/home/user/d/e&recursive=true",
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = server
        .call(
            Method::DELETE,
            "/v1/boxes/bob/files?path=/home/user/d&recursive=true",
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let out = exec(&server, "bob", &["cat", "/home/user/b.txt"]).await;
    assert_eq!(out["stdout"], "hello");

    let (status, _) = server.call(Method::DELETE, "/v1/boxes/bob", None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
}

#[tokio::test]
async fn a_client_that_stops_reading_an_exec_stream_lets_the_box_sleep() {
    use http_body_util::{BodyExt, Full};
    let Some(server) = crate::terminals::napping_box_with_short_stream_limits("x").await else {
        return;
    };
    let stream_exec = |cmd: Value| {
        let (addr, key) = (server.addr, server.key.clone());
        async move {
            let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
            let (mut sender, conn) =
                hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp))
                    .await
                    .unwrap();
            tokio::spawn(conn);
            let request = http::Request::post("/v1/boxes/x/exec")
                .header("host", "berth")
                .header("authorization", format!("Bearer {key}"))
                .header("accept", "application/x-ndjson")
                .body(Full::new(Bytes::from(json!({ "cmd": cmd }).to_string())))
                .unwrap();
            let response = sender.send_request(request).await.unwrap();
            assert_eq!(response.status(), StatusCode::OK);
            (sender, response.into_body())
        }
    };

    // The baseline: a stream read to its end, then the box asleep.
    let (_sender, body) = stream_exec(json!(["true"])).await;
    body.collect().await.unwrap();
    let baseline = crate::idle::wait_state(&server, "x", "stopped", Duration::from_secs(60)).await;

    // The attack: the program floods, the client reads a little and never again.
    let (_sender, mut body) = stream_exec(json!(["yes", "flood"])).await;
    let mut read = 0;
    while read < 64 * 1024 {
        let frame = body.frame().await.unwrap().unwrap();
        read += frame.data_ref().map_or(0, Bytes::len);
    }
    crate::terminals::sleeps_on_time(&server, "x", baseline).await;
    drop(body);
}
