//! Warm pools on real boxes (the sandbox runtime, berth-init, the echo harness): a
//! template with `warm = 2` keeps two booted boxes no tenant sees; a create claims one
//! without a boot, with a token of its own; the pool refills; a request that needs a
//! different boot boots as before. Skips (part `sandbox`) where boxes cannot run.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use berth_protocol::BoxId;
use berth_runtime::BootToken;
use berth_store::{warm_pool_tenant, BoxState, WARM_POOL_TENANT};
use http::{Method, StatusCode};
use serde_json::json;

use crate::end_to_end::sandbox_or_skip;
use crate::harness::TestServer;
use crate::talk::{kill, start_killable, Containers};
use crate::tenants::call_as;

/// A template like the built-in echo (its layer and harness) with a pool of `warm`.
fn write_pooled(server: &TestServer, warm: u32) {
    let layer = server.data.path().join("layers/echo");
    let dir = server.data.path().join("templates");
    std::fs::create_dir_all(&dir).unwrap();
    let text = format!(
        "name = \"pooled\"\nwarm = {warm}\n\n[[layers]]\nsource = \"{}\"\ntarget = \"/opt/harness\"\n\n\
         [harness]\ncommand = [\"/opt/harness/bin/echo-harness\"]\n",
        layer.display()
    );
    std::fs::write(dir.join("pooled.toml"), text).unwrap();
}

async fn reload(server: &TestServer) {
    let (status, body) = server
        .call(Method::POST, "/v1/templates/reload", None)
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["errors"], json!([]), "{body}");
}

/// Waits until the pool holds exactly `n` running boxes and nothing else (2 min at most:
/// boots on a loaded 2-core host); their ids and tokens.
async fn wait_pool(server: &TestServer, n: usize) -> HashMap<BoxId, String> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let pool = server.store.list_boxes(&warm_pool_tenant()).unwrap();
        let running: HashMap<BoxId, String> = pool
            .iter()
            .filter(|r| r.state == BoxState::Running)
            .filter_map(|r| Some((r.id.clone(), server.store.boot_token(&r.id).ok()??)))
            .collect();
        if pool.len() == n && running.len() == n {
            return running;
        }
        let states: Vec<String> = pool.iter().map(|r| r.state.to_string()).collect();
        assert!(
            Instant::now() < deadline,
            "the pool never held {n} running boxes: {states:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn token(hex: &str) -> BootToken {
    let mut bytes = [0u8; 32];
    for (i, b) in bytes.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap();
    }
    let token = BootToken::from_random(bytes);
    assert_eq!(token.as_str(), hex);
    token
}

/// How long PID 1 of the box (berth-init) has run, from inside the box: the host's uptime
/// minus its start time (both since the host booted; the sandbox shares the host clock).
async fn pid1_age(server: &TestServer, key: &str, name: &str) -> Duration {
    let (status, out) = call_as(
        server,
        key,
        Method::POST,
        &format!("/v1/boxes/{name}/exec"),
        Some(json!({"cmd": ["sh", "-c", "cut -d' ' -f22 /proc/1/stat; cut -d' ' -f1 /proc/uptime; getconf CLK_TCK"]})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{out}");
    let text = out["stdout"].as_str().unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let (start_ticks, uptime, tck): (f64, f64, f64) = (
        lines[0].parse().unwrap(),
        lines[1].parse().unwrap(),
        lines[2].parse().unwrap(),
    );
    Duration::from_secs_f64((uptime - start_ticks / tck).max(0.0))
}

#[tokio::test]
async fn a_create_claims_a_booted_pool_box_and_the_pool_refills() {
    let data = tempfile::tempdir().unwrap();
    let Some(runtime) = sandbox_or_skip(data.path()) else {
        return;
    };
    let mut server = TestServer::start(runtime.clone(), Some("runc".into()), data).await;
    write_pooled(&server, 2);
    reload(&server).await;
    let pool = wait_pool(&server, 2).await;

    // Invisible: not listed, not found by id or name, no tenant of its own, no usage.
    let key = {
        let (status, created) = server
            .call(
                Method::POST,
                "/v1/tenants",
                Some(json!({"name": "acme", "max_boxes": 1, "max_running": 1})),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{created}");
        created["api_key"].as_str().unwrap().to_owned()
    };
    for who in [&server.key, &key] {
        let (status, list) = call_as(&server, who, Method::GET, "/v1/boxes", None).await;
        assert_eq!((status, &list["boxes"]), (StatusCode::OK, &json!([])));
        for id in pool.keys() {
            let record = server.store.get_box(id).unwrap().unwrap();
            for reference in [id.as_str(), record.name.as_str()] {
                let (status, body) = call_as(
                    &server,
                    who,
                    Method::GET,
                    &format!("/v1/boxes/{reference}"),
                    None,
                )
                .await;
                assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
            }
        }
    }
    let (_, tenants) = server.call(Method::GET, "/v1/tenants", None).await;
    let mut names: Vec<&str> = tenants["tenants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["acme", "default"], "{tenants}");
    for tenant in tenants["tenants"].as_array().unwrap() {
        assert_eq!(tenant["usage"]["boxes"], 0, "{tenants}");
    }
    let (status, body) = server
        .call(
            Method::GET,
            &format!("/v1/tenants/{WARM_POOL_TENANT}"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let (status, body) = server
        .call(
            Method::POST,
            &format!("/v1/tenants/{WARM_POOL_TENANT}/keys"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "no key for the pool: {body}");

    // A claim: running at once, one of the pool's boxes, booted before the request.
    let began = Instant::now();
    let (status, fast) = call_as(
        &server,
        &key,
        Method::POST,
        "/v1/boxes",
        Some(json!({"name": "fast", "template": "pooled", "labels": {"team": "a"}})),
    )
    .await;
    let created_in = began.elapsed();
    assert_eq!(status, StatusCode::CREATED, "{fast}");
    assert_eq!(
        (&fast["state"], &fast["labels"]),
        (&json!("running"), &json!({"team": "a"}))
    );
    let age = pid1_age(&server, &key, "fast").await;
    let claimed_in = began.elapsed();
    let id: BoxId = fast["id"].as_str().unwrap().parse().unwrap();
    assert!(pool.contains_key(&id), "{fast} is not a pool box");
    assert!(
        age > claimed_in,
        "berth-init has run {age:?}, the request began {claimed_in:?} ago: it booted on the request path"
    );
    println!(
        "warm pool: create {} ms, create → first exec {} ms",
        created_in.as_millis(),
        claimed_in.as_millis()
    );

    // A fresh token: the pool's is refused, the stored one answers.
    let old = token(&pool[&id]);
    let new = token(&server.store.boot_token(&id).unwrap().unwrap());
    assert_ne!(old.as_str(), new.as_str());
    assert!(runtime.channel(&id, &old).info().await.is_err());
    runtime.channel(&id, &new).info().await.unwrap();

    // It works as a box of the tenant's: exec, its harness, its quota.
    let (status, out) = call_as(
        &server,
        &key,
        Method::POST,
        "/v1/boxes/fast/exec",
        Some(json!({"cmd": ["sh", "-c", "echo hi > ~/a.txt; cat ~/a.txt"]})),
    )
    .await;
    assert_eq!((status, &out["stdout"]), (StatusCode::OK, &json!("hi\n")));
    let (status, posted) = call_as(
        &server,
        &key,
        Method::POST,
        "/v1/boxes/fast/messages",
        Some(json!({"content": "remember 42"})),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{posted}");
    let deadline = Instant::now() + Duration::from_secs(30);
    let events = loop {
        let (status, page) = call_as(
            &server,
            &key,
            Method::GET,
            "/v1/boxes/fast/events?wait=false",
            None,
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{page}");
        let events = page["events"].as_array().unwrap().clone();
        if events.iter().any(|e| e["type"] == "result") {
            break events;
        }
        assert!(Instant::now() < deadline, "no answer: {events:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        events[0]["data"],
        json!({"state": "running", "reason": "claimed from the warm pool"}),
        "the log starts at the claim: {events:?}"
    );
    let (_, own) = call_as(&server, &key, Method::GET, "/v1/tenants/acme", None).await;
    assert_eq!(
        (&own["usage"]["boxes"], &own["usage"]["running"]),
        (&json!(1), &json!(1)),
        "{own}"
    );

    // The pool refills; a request the pool boxes do not fit (its own env) boots as before.
    let refilled = wait_pool(&server, 2).await;
    assert!(!refilled.contains_key(&id));
    let began = Instant::now();
    let (status, slow) = server
        .call(
            Method::POST,
            "/v1/boxes",
            Some(json!({"name": "slow", "template": "pooled", "env": {"A": "1"}})),
        )
        .await;
    assert_eq!(
        (status, &slow["state"]),
        (StatusCode::CREATED, &json!("stopped")),
        "{slow}"
    );
    let age = pid1_age(&server, &server.key, "slow").await;
    let cold_in = began.elapsed();
    assert!(age < cold_in, "a cold boot: berth-init ran {age:?}");
    println!(
        "no pool (a request that does not fit): create → first exec {} ms",
        cold_in.as_millis()
    );
    let slow_id: BoxId = slow["id"].as_str().unwrap().parse().unwrap();
    assert!(!refilled.contains_key(&slow_id));
    assert_eq!(wait_pool(&server, 2).await.len(), 2);

    // A smaller pool: the extra box goes.
    write_pooled(&server, 1);
    reload(&server).await;
    wait_pool(&server, 1).await;
    server.shut_down().await;
}

/// A pool box outlives its daemon: a crashed daemon's successor reattaches it (same boot,
/// same token), and after a clean shutdown (which stops it) the next daemon boots the same
/// box again instead of making a new one; the idle reclaimer leaves it booted; one that
/// dies is booted again.
#[tokio::test]
async fn a_restarted_daemon_reuses_its_pool_boxes() {
    let data = tempfile::tempdir().unwrap();
    let Some(runtime) = sandbox_or_skip(data.path()) else {
        return;
    };
    let _cleanup = Containers(data.path().to_owned());
    let dir = data.path().join("templates");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("plain.toml"),
        "name = \"plain\"\nwarm = 1\nstop_after_s = 10\n",
    )
    .unwrap();
    let (daemon_runtime, first) = start_killable(runtime, data);
    let before = wait_pool(&first, 1).await;
    let data = kill(daemon_runtime, first).await;

    let runtime = sandbox_or_skip(data.path()).unwrap();
    let mut second = TestServer::start(runtime, Some("runc".into()), data).await;
    assert_eq!(
        wait_pool(&second, 1).await,
        before,
        "reattached, not booted"
    );
    second.shut_down().await;
    let id = before.keys().next().unwrap();
    assert_eq!(
        second.store.get_box(id).unwrap().unwrap().state,
        BoxState::Stopped
    );
    assert_eq!(second.runtime_containers_running(), Vec::<String>::new());

    let data = std::mem::replace(&mut second.data, tempfile::tempdir().unwrap());
    drop(second);
    let runtime = sandbox_or_skip(data.path()).unwrap();
    let mut third = TestServer::start(runtime, Some("runc".into()), data).await;
    let after = wait_pool(&third, 1).await;
    assert_eq!(after.keys().collect::<Vec<_>>(), [id], "the same box");
    assert_ne!(after[id], before[id], "booted again, with a new token");

    // Idle past its timeout, it is kept booted: the same boot all along.
    let idle_past = Instant::now() + Duration::from_secs(12);
    while Instant::now() < idle_past {
        assert_eq!(
            wait_pool(&third, 1).await,
            after,
            "the pool box was stopped"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // A pool box that dies is booted again.
    let killed = std::process::Command::new("runc")
        .arg("--root")
        .arg(third.data.path().join("oci"))
        .args(["kill", id.as_str(), "KILL"])
        .status()
        .unwrap();
    assert!(killed.success());
    let deadline = Instant::now() + Duration::from_secs(60);
    while wait_pool(&third, 1).await == after {
        assert!(
            Instant::now() < deadline,
            "the dead pool box was never replaced"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    third.shut_down().await;
}

/// A template with a credential rule: its pool boxes boot with stand-in secrets, hold a
/// placeholder like any box of it, and only a tenant that has the secret gets one.
#[tokio::test]
async fn a_pool_of_a_template_with_credentials_serves_tenants_that_have_the_secret() {
    let data = tempfile::tempdir().unwrap();
    let Some(runtime) = sandbox_or_skip(data.path()) else {
        return;
    };
    let mut server = TestServer::start(runtime, Some("runc".into()), data).await;
    let dir = server.data.path().join("templates");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("keyed.toml"),
        "name = \"keyed\"\nwarm = 1\n\n[egress]\nallow = [\"api.example.test\"]\n\n\
         [[egress.credentials]]\nname = \"example\"\nhosts = [\"api.example.test\"]\n\
         header = \"authorization\"\nplaceholder_env = \"EXAMPLE_TOKEN\"\n",
    )
    .unwrap();
    reload(&server).await;
    let pool = wait_pool(&server, 1).await;

    // The admin's tenant has no secret `example`: a stopped box, as without a pool.
    let (status, body) = server
        .call(
            Method::POST,
            "/v1/boxes",
            Some(json!({"name": "nokey", "template": "keyed"})),
        )
        .await;
    assert_eq!(
        (status, &body["state"]),
        (StatusCode::CREATED, &json!("stopped")),
        "{body}"
    );

    let (status, body) = server
        .call(
            Method::POST,
            "/v1/secrets",
            Some(json!({"name": "example", "value": "sk-real"})),
        )
        .await;
    assert!(status.is_success(), "{body}");
    let (status, body) = server
        .call(
            Method::POST,
            "/v1/boxes",
            Some(json!({"name": "keyed", "template": "keyed"})),
        )
        .await;
    assert_eq!(
        (status, &body["state"]),
        (StatusCode::CREATED, &json!("running")),
        "{body}"
    );
    let id: BoxId = body["id"].as_str().unwrap().parse().unwrap();
    assert!(pool.contains_key(&id), "{body}");
    let (status, out) = server
        .call(
            Method::POST,
            "/v1/boxes/keyed/exec",
            Some(json!({"cmd": ["sh", "-c", "echo $EXAMPLE_TOKEN; test -s \"$SSL_CERT_FILE\" && echo ca"]})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{out}");
    let stdout = out["stdout"].as_str().unwrap();
    assert!(
        stdout.starts_with("berth-ph-") && stdout.ends_with("\nca\n"),
        "{out}"
    );
    server.shut_down().await;
}
