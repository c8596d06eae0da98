//! A box survives its node: three nodes with durable copies in S3 (moto), one API replica.
//! A sleeping box whose node is SIGKILLed answers its next message from another node, its
//! files byte-identical; a node cut off from the database fences itself (stops its boxes),
//! its box starts elsewhere only after the lease and the grace have run out, never while a
//! copy of it still runs, and the node drops its stale copy when it comes back.
//!
//! Real parts: Postgres, moto's S3, `berth up --role api`, `berth node` in network
//! namespaces, runc boxes with berth-init and the echo harness.

mod cluster_kit;
mod common;

use std::time::{Duration, Instant};

use cluster_kit::{wait_until, Cluster};

/// The lease a node renews (`cluster::role::LEASE_TTL`) and the failover's grace after it
/// (`cluster::failover::FAILOVER_GRACE`).
const LEASE_TTL: Duration = Duration::from_secs(10);
const GRACE: Duration = Duration::from_secs(10);

fn start(nodes: usize) -> Option<Cluster> {
    let moto = berth_testkit::moto::Moto::start()?;
    Cluster::start_with(1, nodes, Some((moto, 0)))
}

/// The index of the node named `node_id` (a box's `node`) in `cluster.nodes`.
fn node_index(cluster: &Cluster, node_id: &str) -> usize {
    let nodes = cluster.json(0, &["node", "ls", "--json"]);
    let name = nodes["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["id"] == node_id)
        .and_then(|n| n["name"].as_str())
        .unwrap_or_else(|| panic!("no node {node_id} in {nodes}"))
        .to_owned();
    name.trim_start_matches("node").parse().unwrap()
}

fn show(cluster: &Cluster, name: &str) -> serde_json::Value {
    cluster.json(0, &["box", "show", name])
}

fn sha(cluster: &Cluster, name: &str, path: &str) -> String {
    let out = cluster.berth_ok(0, &["exec", name, "--", "sha256sum", path]);
    out.split_whitespace().next().unwrap().to_owned()
}

/// The box's files on node `i`'s disk.
fn box_dir(cluster: &Cluster, i: usize, id: &str) -> std::path::PathBuf {
    cluster.nodes[i].dir.path().join("boxes").join(id)
}

/// Whether node `i`'s OCI runtime holds a running container of box `id`.
fn runs_on(cluster: &Cluster, i: usize, id: &str) -> bool {
    let root = cluster.nodes[i].dir.path().join("oci");
    let out = std::process::Command::new("runc")
        .arg("--root")
        .arg(&root)
        .args(["list", "--quiet"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .any(|l| l.trim() == id)
}

fn restored_events(cluster: &Cluster, name: &str) -> Vec<serde_json::Value> {
    cluster
        .berth_ok(0, &["logs", name, "--json"])
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["type"] == "volume_restored")
        .collect()
}

#[test]
fn a_sleeping_box_whose_node_dies_answers_from_another_with_its_files() {
    let Some(mut cluster) = start(3) else {
        return;
    };
    let created = cluster.json(
        0,
        &["box", "create", "keep", "--template", "echo", "--json"],
    );
    let id = created["id"].as_str().unwrap().to_owned();
    cluster.berth_ok(
        0,
        &[
            "exec",
            "keep",
            "--",
            "sh",
            "-c",
            "head -c 3000000 /dev/urandom > /home/user/data.bin && echo kept > /memory/kept.md",
        ],
    );
    let want = sha(&cluster, "keep", "/home/user/data.bin");
    cluster.berth_ok(0, &["box", "stop", "keep"]);
    wait_until("the stopped box's copy", Duration::from_secs(120), || {
        show(&cluster, "keep")["durable"]["generation"]
            .as_u64()
            .unwrap_or(0)
            >= 1
    });
    let first = node_index(&cluster, created["node"].as_str().unwrap());

    cluster.nodes[first].kill();
    let killed = Instant::now();
    // Its host is said to be unreachable once the node's lease runs out.
    wait_until("the box's host unreachable", LEASE_TTL * 3, || {
        show(&cluster, "keep")["host_status"] == "unreachable"
    });
    // Moved to another node once the lease and the grace ran out, still asleep: its memory
    // reads there (through the replica) from its volume, restored from its copy first.
    wait_until("the box moved", LEASE_TTL + GRACE * 3, || {
        show(&cluster, "keep")["node"] != created["node"]
    });
    assert_eq!(
        cluster.berth_ok(0, &["memory", "keep", "cat", "kept.md"]),
        "kept\n"
    );
    assert_eq!(show(&cluster, "keep")["state"], "stopped");
    // The next message is answered there.
    let answer = cluster.berth_ok(0, &["send", "keep", "hello again"]);
    let took = killed.elapsed();
    eprintln!("answered from another node {took:?} after the kill");
    assert_eq!(answer, "echo: hello again\n");
    assert!(
        took < LEASE_TTL + GRACE + Duration::from_secs(10),
        "took {took:?}\n{}",
        cluster.logs()
    );
    let moved = show(&cluster, "keep");
    assert_eq!(moved["host_status"], "ok", "{moved}");
    let second = node_index(&cluster, moved["node"].as_str().unwrap());
    assert_ne!(second, first, "{moved}");
    assert_eq!(sha(&cluster, "keep", "/home/user/data.bin"), want);
    let restored = restored_events(&cluster, "keep");
    assert_eq!(restored.len(), 1, "{restored:?}");
    assert_eq!(restored[0]["data"]["reason"], "failover");

    // The dead node comes back: it drops what it held of the box.
    assert!(box_dir(&cluster, first, &id).exists());
    cluster.restart_node(first);
    wait_until("the stale copy dropped", Duration::from_secs(60), || {
        !box_dir(&cluster, first, &id).exists()
    });
    assert_eq!(sha(&cluster, "keep", "/home/user/data.bin"), want);
}

#[test]
fn a_cut_off_node_fences_itself_and_its_box_runs_elsewhere_only_after_the_deadline() {
    let Some(cluster) = start(2) else {
        return;
    };
    let created = cluster.json(0, &["box", "create", "web", "--json"]);
    let id = created["id"].as_str().unwrap().to_owned();
    cluster.berth_ok(
        0,
        &[
            "exec",
            "web",
            "--",
            "sh",
            "-c",
            "echo kept > /home/user/kept.txt",
        ],
    );
    // A copy with the file (taken at the stop), then the box running again.
    cluster.berth_ok(0, &["box", "stop", "web"]);
    wait_until("the box's copy", Duration::from_secs(120), || {
        show(&cluster, "web")["durable"]["generation"]
            .as_u64()
            .unwrap_or(0)
            >= 1
    });
    cluster.berth_ok(0, &["box", "start", "web"]);
    let home = node_index(&cluster, created["node"].as_str().unwrap());
    let other = 1 - home;
    assert!(runs_on(&cluster, home, &id));

    cluster.bridge.set_link(home, false);
    let cut = Instant::now();
    // It fences itself within the lease: its box stops there.
    wait_until("the cut-off node stopping its box", LEASE_TTL * 3, || {
        !runs_on(&cluster, home, &id)
    });
    let fenced = cut.elapsed();
    eprintln!("fenced {fenced:?} after the cut");
    // The box moves only after the deadline, and never runs in two places.
    let mut moved_after = None;
    wait_until(
        "the box moved",
        LEASE_TTL + GRACE + Duration::from_secs(60),
        || {
            assert!(
                !(runs_on(&cluster, home, &id) && runs_on(&cluster, other, &id)),
                "the box runs on both nodes"
            );
            let node = show(&cluster, "web")["node"]
                .as_str()
                .unwrap_or("")
                .to_owned();
            let moved = node_index_or_none(&cluster, &node) == Some(other);
            if moved {
                moved_after = Some(cut.elapsed());
            }
            moved
        },
    );
    let moved_after = moved_after.unwrap();
    eprintln!("moved {moved_after:?} after the cut");
    assert!(
        moved_after >= LEASE_TTL,
        "moved before the lease could run out: {moved_after:?}"
    );
    assert_eq!(
        cluster.berth_ok(0, &["exec", "web", "--", "cat", "/home/user/kept.txt"]),
        "kept\n"
    );
    assert!(runs_on(&cluster, other, &id));
    assert!(!runs_on(&cluster, home, &id));
    let open_runs = psql(
        &cluster,
        "SELECT box_id FROM box_runs WHERE ended_at IS NULL GROUP BY box_id HAVING COUNT(*) > 1",
    );
    assert!(open_runs.trim().is_empty(), "two open runs: {open_runs}");

    // Back on the network: it renews, and drops its stale copy.
    cluster.bridge.set_link(home, true);
    wait_until("the stale copy dropped", Duration::from_secs(60), || {
        !box_dir(&cluster, home, &id).exists()
    });
    assert_eq!(
        cluster.berth_ok(0, &["exec", "web", "--", "cat", "/home/user/kept.txt"]),
        "kept\n"
    );
}

/// `sql`'s rows from the cluster's database, as psql prints them unaligned.
fn psql(cluster: &Cluster, sql: &str) -> String {
    let out = std::process::Command::new("psql")
        .arg(&cluster.store_url)
        .args(["-At", "-c", sql])
        .env("PGPASSWORD", cluster.postgres.password())
        .output()
        .expect("psql");
    assert!(
        out.status.success(),
        "psql: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn node_index_or_none(cluster: &Cluster, node_id: &str) -> Option<usize> {
    let nodes = cluster.json(0, &["node", "ls", "--json"]);
    nodes["nodes"]
        .as_array()?
        .iter()
        .find(|n| n["id"] == node_id)
        .and_then(|n| n["name"].as_str())
        .and_then(|name| name.trim_start_matches("node").parse().ok())
}

#[test]
fn drain_empties_a_node_with_every_boxs_files_intact() {
    let Some(cluster) = start(2) else {
        return;
    };
    let names: Vec<String> = (0..4).map(|i| format!("d{i}")).collect();
    for name in &names {
        cluster.berth_ok(0, &["box", "create", name]);
        let script = format!("echo {name} > /home/user/name.txt");
        cluster.berth_ok(0, &["exec", name, "--", "sh", "-c", &script]);
    }
    // Half asleep, half running.
    for name in &names[..2] {
        cluster.berth_ok(0, &["box", "stop", name]);
    }
    let drained = show(&cluster, &names[0])["node"]
        .as_str()
        .unwrap()
        .to_owned();
    let drained_name = format!("node{}", node_index(&cluster, &drained));
    let answer = cluster.json(0, &["node", "drain", &drained_name, "--now", "--json"]);
    assert_eq!(answer["state"], "draining", "{answer}");
    wait_until("the drained node empty", Duration::from_secs(120), || {
        let nodes = cluster.json(0, &["node", "ls", "--json"]);
        nodes["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n["id"] == drained.as_str() && n["boxes"] == 0)
    });
    for name in &names {
        let shown = show(&cluster, name);
        assert_ne!(shown["node"], drained.as_str(), "{shown}");
        assert_eq!(
            cluster.berth_ok(0, &["exec", name, "--", "cat", "/home/user/name.txt"]),
            format!("{name}\n")
        );
    }
    // A drained node takes no new boxes.
    for i in 0..4 {
        let created = cluster.json(0, &["box", "create", &format!("n{i}"), "--json"]);
        assert_ne!(created["node"], drained.as_str(), "{created}");
    }
    // A live node is not expunged.
    let refused = cluster.berth(0, &["node", "expunge", &drained_name]);
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("alive") && said.contains("drain"), "{said}");
}

#[test]
fn an_expunged_dead_node_gives_up_its_boxes_without_the_grace() {
    let Some(mut cluster) = start(2) else {
        return;
    };
    cluster.berth_ok(0, &["box", "create", "x"]);
    cluster.berth_ok(
        0,
        &["exec", "x", "--", "sh", "-c", "echo x > /home/user/x.txt"],
    );
    cluster.berth_ok(0, &["box", "stop", "x"]);
    wait_until("the box's copy", Duration::from_secs(120), || {
        show(&cluster, "x")["durable"]["generation"]
            .as_u64()
            .unwrap_or(0)
            >= 1
    });
    let node = show(&cluster, "x")["node"].as_str().unwrap().to_owned();
    // A box on the same node that ran but was never copied (it never slept).
    let uncopied = (0..20)
        .map(|n| format!("u{n}"))
        .find(|name| {
            let created = cluster.json(0, &["box", "create", name, "--json"]);
            created["node"] == node.as_str()
        })
        .expect("no box landed on the node in 20 tries");
    cluster.berth_ok(
        0,
        &[
            "exec",
            &uncopied,
            "--",
            "sh",
            "-c",
            "echo u > /home/user/u.txt",
        ],
    );
    let i = node_index(&cluster, &node);
    cluster.nodes[i].kill();
    wait_until("the node's lease out", LEASE_TTL * 3, || {
        show(&cluster, "x")["host_status"] == "unreachable"
    });
    let expunged = Instant::now();
    cluster.berth_ok(0, &["node", "expunge", &format!("node{i}")]);
    // Moved by the expunge itself, not by the failover a grace later.
    let moved = show(&cluster, "x");
    assert_ne!(moved["node"], node.as_str(), "{moved}");
    assert!(expunged.elapsed() < GRACE, "{:?}", expunged.elapsed());
    assert_eq!(
        cluster.berth_ok(0, &["exec", "x", "--", "cat", "/home/user/x.txt"]),
        "x\n"
    );
    // The box with no copy moved too, on the operator's word: onto an empty volume, and its
    // log says so.
    assert_ne!(show(&cluster, &uncopied)["node"], node.as_str());
    let gone = cluster.berth(
        0,
        &["exec", &uncopied, "--", "test", "-e", "/home/user/u.txt"],
    );
    assert!(!gone.status.success(), "a box with no copy kept its files?");
    let restored = restored_events(&cluster, &uncopied);
    assert!(
        restored.iter().any(|e| e["data"]["generation"] == 0),
        "{restored:?}"
    );
}

#[test]
fn a_lost_nodes_box_with_no_copy_waits_for_its_node() {
    let Some(mut cluster) = start(2) else {
        return;
    };
    let created = cluster.json(0, &["box", "create", "fresh", "--json"]);
    let node = created["node"].as_str().unwrap().to_owned();
    // It ran, and was never copied (copies are taken at sleep here).
    cluster.berth_ok(
        0,
        &[
            "exec",
            "fresh",
            "--",
            "sh",
            "-c",
            "echo f > /home/user/f.txt",
        ],
    );
    let i = node_index(&cluster, &node);
    cluster.nodes[i].kill();
    wait_until("the node's lease out", LEASE_TTL * 3, || {
        show(&cluster, "fresh")["host_status"] == "unreachable"
    });
    // Well past the failover's grace, it is still its node's: its files are only there.
    let waited = Instant::now();
    while waited.elapsed() < GRACE + Duration::from_secs(5) {
        assert_eq!(show(&cluster, "fresh")["node"], node.as_str());
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(
        cluster.apis[0].logs().contains("no durable copy yet"),
        "{}",
        cluster.logs()
    );
    // Its node comes back: the box is there with its files.
    cluster.restart_node(i);
    wait_until("the box's host back", Duration::from_secs(60), || {
        show(&cluster, "fresh")["host_status"] == "ok"
    });
    assert_eq!(
        cluster.berth_ok(0, &["exec", "fresh", "--", "cat", "/home/user/f.txt"]),
        "f\n"
    );
}
