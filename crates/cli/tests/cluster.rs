//! Many hosts on one machine: one Postgres, two API replicas (`berth up --role api`) and
//! three nodes (`berth node`), each node in a network namespace of its own on a bridge,
//! running sandbox boxes. Clients talk only to the replicas and never name a node.

mod cluster_kit;
mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use cluster_kit::{wait_until, Cluster};
use common::raw_request;

const BOXES: usize = 30;

/// 30 boxes over 3 nodes: none takes more than 14, and every box answers exec, files, a
/// terminal, a port and its event stream through either replica.
#[test]
fn boxes_spread_over_the_nodes_and_every_call_reaches_them_through_either_replica() {
    let Some(cluster) = Cluster::start(2, 3) else {
        return;
    };
    let mut per_node: BTreeMap<String, usize> = BTreeMap::new();
    for i in 0..BOXES {
        let created = cluster.json(i % 2, &["box", "create", &format!("b{i}"), "--json"]);
        let node = created["node"]
            .as_str()
            .unwrap_or_else(|| panic!("no node: {created}"));
        *per_node.entry(node.to_owned()).or_default() += 1;
    }
    assert_eq!(per_node.len(), 3, "{per_node:?}");
    assert!(per_node.values().all(|&n| n <= 14), "{per_node:?}");
    // The record says where each box lives, and `node ls` counts them.
    let nodes = cluster.json(1, &["node", "ls", "--json"]);
    for node in nodes["nodes"].as_array().unwrap() {
        let id = node["id"].as_str().unwrap();
        assert_eq!(
            node["boxes"].as_u64().unwrap() as usize,
            per_node[id],
            "{node}"
        );
    }

    for i in 0..BOXES {
        let (name, api) = (format!("b{i}"), (i + 1) % 2);
        let said = cluster.berth_ok(api, &["exec", &name, "--", "echo", &format!("hi {i}")]);
        assert_eq!(said, format!("hi {i}\n"));
        let local = cluster.cluster_dir.path().join(format!("f{i}"));
        std::fs::write(&local, format!("file {i}")).unwrap();
        cluster.berth_ok(
            i % 2,
            &[
                "cp",
                local.to_str().unwrap(),
                &format!("{name}:/home/user/f"),
            ],
        );
        assert_eq!(
            cluster.berth_ok(api, &["exec", &name, "--", "cat", "/home/user/f"]),
            format!("file {i}")
        );
        terminal_answers(&cluster, &name, i % 2);
        port_answers(&cluster, &name, api, 8000 + i as u16);
        events_stream(&cluster, &name, i % 2);
    }
    for i in 0..BOXES {
        cluster.berth_ok(i % 2, &["box", "rm", &format!("b{i}")]);
    }
    let nodes = cluster.json(0, &["node", "ls", "--json"]);
    assert!(
        nodes["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|n| n["boxes"] == 0),
        "{nodes}"
    );
}

/// A terminal (the PTY WebSocket) through replica `api`: a shell's output arrives.
fn terminal_answers(cluster: &Cluster, name: &str, api: usize) {
    use futures_util::StreamExt as _;
    use tokio_tungstenite::tungstenite::{client::IntoClientRequest as _, Message};
    let authority = cluster.authority(api);
    let url = format!(
        "ws://{authority}/v1/boxes/{name}/pty?cols=80&rows=24&cmd=sh&cmd=-c&cmd=echo%20term-%24((40%2B2))"
    );
    let mut request = url.into_client_request().unwrap();
    request.headers_mut().insert(
        "Authorization",
        format!("Bearer {}", cluster.admin_key).parse().unwrap(),
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let screen = runtime.block_on(async {
        let tcp = tokio::net::TcpStream::connect(&authority).await.unwrap();
        let (mut socket, _) = tokio_tungstenite::client_async(request, tcp)
            .await
            .unwrap_or_else(|e| panic!("terminal of {name}: {e}"));
        let mut screen = String::new();
        let read = async {
            while let Some(Ok(message)) = socket.next().await {
                if let Message::Binary(bytes) = message {
                    screen.push_str(&String::from_utf8_lossy(&bytes));
                    if screen.contains("term-42") {
                        return;
                    }
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(60), read)
            .await
            .ok();
        screen
    });
    assert!(screen.contains("term-42"), "terminal of {name}: {screen:?}");
}

/// A web server in the box, reached through the replica's port proxy by path.
fn port_answers(cluster: &Cluster, name: &str, api: usize, port: u16) {
    let dir = format!("/home/user/www{port}");
    cluster.berth_ok(
        api,
        &[
            "exec",
            name,
            "--",
            "sh",
            "-c",
            &format!("mkdir -p {dir} && echo served-{port} > {dir}/index.html"),
        ],
    );
    cluster.berth_ok(
        api,
        &[
            "exec",
            "--background",
            name,
            "--",
            "python3",
            "-m",
            "http.server",
            &port.to_string(),
            "--directory",
            &dir,
        ],
    );
    let auth = format!("Bearer {}", cluster.admin_key);
    let path = format!("/v1/boxes/{name}/ports/{port}/");
    wait_until(
        &format!("port {port} of {name}"),
        Duration::from_secs(60),
        || {
            let answer = raw_request(
                &cluster.authority(1 - api),
                "GET",
                &path,
                &[("Authorization", &auth)],
                "",
            );
            answer.status == 200 && answer.body.contains(&format!("served-{port}"))
        },
    );
}

/// The box's event stream (SSE) through a replica: its first event arrives.
fn events_stream(cluster: &Cluster, name: &str, api: usize) {
    use std::io::{BufRead as _, BufReader, Write as _};
    let mut stream = std::net::TcpStream::connect(cluster.authority(api)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    write!(
        stream,
        "GET /v1/boxes/{name}/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n\
         Accept: text/event-stream\r\nConnection: close\r\n\r\n",
        cluster.admin_key
    )
    .unwrap();
    let mut reader = BufReader::new(stream);
    let mut status = String::new();
    reader.read_line(&mut status).unwrap();
    assert!(status.contains(" 200 "), "events of {name}: {status}");
    let mut line = String::new();
    loop {
        line.clear();
        assert!(
            reader.read_line(&mut line).unwrap() > 0,
            "the event stream of {name} ended"
        );
        if line.starts_with("data:") {
            return;
        }
    }
}

/// 100 messages to 10 boxes while one node is SIGKILLed mid-delivery and restarted: each
/// box's harness answers each message once, in the order sent.
#[test]
fn messages_are_delivered_once_and_in_order_across_a_node_crash() {
    let Some(mut cluster) = Cluster::start(2, 3) else {
        return;
    };
    const PER_BOX: usize = 10;
    let names: Vec<String> = (0..10).map(|i| format!("m{i}")).collect();
    let mut placed = BTreeMap::new();
    for (i, name) in names.iter().enumerate() {
        let created = cluster.json(
            i % 2,
            &["box", "create", name, "--template", "echo", "--json"],
        );
        placed.insert(name.clone(), created["node"].as_str().unwrap().to_owned());
    }
    let nodes = cluster.json(0, &["node", "ls", "--json"]);
    let victim_id = placed[&names[0]].clone();
    let victim = nodes["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .position(|n| n["id"] == victim_id.as_str())
        .unwrap();
    let victim_index: usize = nodes["nodes"][victim]["name"]
        .as_str()
        .unwrap()
        .trim_start_matches("node")
        .parse()
        .unwrap();
    let auth = format!("Bearer {}", cluster.admin_key);
    for round in 0..PER_BOX {
        for (i, name) in names.iter().enumerate() {
            let body = serde_json::json!({"id": format!("{name}-{round}"), "content": format!("msg {round}")});
            let answer = raw_request(
                &cluster.authority((i + round) % 2),
                "POST",
                &format!("/v1/boxes/{name}/messages"),
                &[("Authorization", &auth)],
                &body.to_string(),
            );
            assert_eq!(answer.status, 202, "{name} {round}: {}", answer.body);
        }
        if round == 3 {
            // Mid-delivery: the node dies with boxes booting and messages in flight.
            cluster.nodes[victim_index].kill();
        }
        if round == 6 {
            cluster.restart_node(victim_index);
        }
    }
    for name in &names {
        let name = name.as_str();
        wait_until(
            &format!("{PER_BOX} answers from {name}"),
            Duration::from_secs(180),
            || results(&cluster, name).len() >= PER_BOX,
        );
        // Each message once, in order: a redelivery would answer it twice.
        let seen = results(&cluster, name);
        let expected: Vec<String> = (0..PER_BOX).map(|r| format!("msg {r}")).collect();
        assert_eq!(seen, expected, "{name}\n{}", cluster.logs());
    }
}

/// What the echo harness answered, in order: the message each result echoes.
fn results(cluster: &Cluster, name: &str) -> Vec<String> {
    let logs = cluster.berth_ok(0, &["logs", name, "--json"]);
    logs.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["type"] == "result")
        .filter_map(|e| {
            let text = e["data"]["result"].as_str()?.to_owned();
            text.find("msg ").map(|at| text[at..].trim().to_owned())
        })
        .collect()
}

/// The replica holding the jobs lease is SIGKILLed: the other takes the lease within two
/// TTLs at the next term, a write under the old term is refused, and a wakeup the dead
/// one scheduled fires once.
#[test]
fn the_jobs_lease_passes_on_when_its_holder_dies_and_a_wakeup_still_fires_once() {
    let Some(mut cluster) = Cluster::start(2, 1) else {
        return;
    };
    let store = open_store(&cluster);
    let holder = wait_for_lease(&store, None);
    // A replica's holder name ends with its pid.
    let holder_index = cluster
        .apis
        .iter()
        .position(|api| {
            holder
                .holder
                .ends_with(&format!("-{}", api.child.as_ref().unwrap().id()))
        })
        .unwrap_or_else(|| panic!("no replica holds {holder:?}"));
    cluster.berth_ok(0, &["box", "create", "w", "--template", "echo"]);
    cluster.berth_ok(0, &["box", "wakeup", "add", "w", "wake up", "--in", "20s"]);

    cluster.apis[holder_index].kill();
    let killed_at = std::time::Instant::now();
    let next = wait_for_lease(&store, Some(&holder));
    assert!(
        killed_at.elapsed() < 2 * Duration::from_secs(10),
        "took {:?}",
        killed_at.elapsed()
    );
    assert_eq!(next.term, holder.term + 1);
    assert!(matches!(
        store.check_fence(&holder.fence()),
        Err(berth_store::StoreError::LeaseLost { .. })
    ));

    let other = 1 - holder_index;
    wait_until("the wakeup's answer", Duration::from_secs(120), || {
        results_via(&cluster, other, "w")
            .iter()
            .any(|r| r.contains("wake up"))
    });
    // Once: a second firing would post a second message, and the harness answer it.
    let answers = results_via(&cluster, other, "w");
    assert_eq!(
        answers.iter().filter(|r| r.contains("wake up")).count(),
        1,
        "{answers:?}"
    );
}

fn results_via(cluster: &Cluster, api: usize, name: &str) -> Vec<String> {
    let logs = cluster.berth_ok(api, &["logs", name, "--json"]);
    logs.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["type"] == "result")
        .filter_map(|e| e["data"]["result"].as_str().map(str::to_owned))
        .collect()
}

fn open_store(cluster: &Cluster) -> berth_store::Store {
    berth_store::Store::connect(
        &cluster.store_url,
        Some(cluster.postgres.password()),
        &berth_store::PostgresOptions::default(),
    )
    .unwrap()
}

/// Waits for the jobs lease to be held by someone other than `not` (any holder if `None`).
fn wait_for_lease(
    store: &berth_store::Store,
    not: Option<&berth_store::Lease>,
) -> berth_store::Lease {
    let mut found = None;
    wait_until("the jobs lease", Duration::from_secs(60), || {
        let (lease, now_ms) = store.lease("jobs").unwrap();
        found = lease.filter(|l| l.expires_ms > now_ms && not.is_none_or(|n| n.term != l.term));
        found.is_some()
    });
    found.unwrap()
}

/// A node cut off from the database fences itself (it takes no ops, and says so), an op
/// for its box fails with the reason instead of hanging, and once the network is back the
/// node renews its lease and takes ops again.
#[test]
fn a_node_that_loses_the_database_takes_no_ops_says_so_and_comes_back() {
    let Some(cluster) = Cluster::start(1, 1) else {
        return;
    };
    cluster.berth_ok(0, &["box", "create", "f"]);
    // Prometheus reaches a node on its status port, with an admin key.
    let status = format!("{}:7071", cluster.bridge.namespace_ip(0));
    let auth = format!("Bearer {}", cluster.admin_key);
    assert_eq!(raw_request(&status, "GET", "/metrics", &[], "").status, 401);
    let renewals = || {
        let metrics = raw_request(&status, "GET", "/metrics", &[("Authorization", &auth)], "");
        assert_eq!(metrics.status, 200, "{}", metrics.body);
        metrics
            .body
            .lines()
            .find_map(|l| l.strip_prefix(r#"berth_lease_renewals_total{outcome="ok"} "#))
            .and_then(|n| n.trim().parse::<u64>().ok())
            .unwrap_or_else(|| panic!("no renewals counted:\n{}", metrics.body))
    };
    wait_until("a renewal counted", Duration::from_secs(30), || {
        renewals() >= 1
    });
    // A request's id reaches the node with the call: one id across both processes' logs.
    let exec = raw_request(
        &cluster.authority(0),
        "POST",
        "/v1/boxes/f/exec",
        &[("Authorization", &auth), ("X-Request-Id", "trace-me-42")],
        r#"{"cmd":["true"]}"#,
    );
    assert_eq!(exec.status, 200, "{}", exec.body);
    assert!(
        cluster.nodes[0].logs().contains("trace-me-42"),
        "{}",
        cluster.logs()
    );

    cluster.bridge.set_link(0, false);
    wait_until(
        "the node saying it lost the database",
        Duration::from_secs(60),
        || cluster.nodes[0].logs().contains("lost the database"),
    );
    // Its lease has run out: a start fails at once with the reason.
    let refused = cluster.berth(0, &["box", "start", "f"]);
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("lease"), "{said}");

    cluster.bridge.set_link(0, true);
    wait_until("the node taking ops again", Duration::from_secs(60), || {
        cluster.nodes[0].logs().contains("lease renewed again")
    });
    cluster.wait_live_nodes(1);
    cluster.berth_ok(0, &["box", "start", "f"]);
    assert_eq!(
        cluster.berth_ok(0, &["exec", "f", "--", "echo", "back"]),
        "back\n"
    );

    // A row naming another boot than the one answering (a second process registered the
    // name): the replica refuses the node's answers, and the node stops taking work.
    let psql = std::process::Command::new(cluster.postgres.bin("psql"))
        .args([
            cluster.store_url.as_str(),
            "-X",
            "-q",
            "-v",
            "ON_ERROR_STOP=1",
            "-c",
        ])
        .arg("UPDATE nodes SET boot_id = 'someone-else'")
        .env("PGPASSWORD", cluster.postgres.password())
        .output()
        .unwrap();
    assert!(
        psql.status.success(),
        "{}",
        String::from_utf8_lossy(&psql.stderr)
    );
    let refused = cluster.berth(0, &["exec", "f", "--", "true"]);
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success() && said.contains("boot"), "{said}");
    wait_until("the node stepping down", Duration::from_secs(30), || {
        cluster.nodes[0]
            .logs()
            .contains("another process registered this node's name")
    });
}
