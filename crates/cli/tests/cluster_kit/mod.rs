//! A cluster on one machine: a Postgres the test starts, API replicas (`berth up --role
//! api`) on loopback, and nodes (`berth node`), each in a network namespace of its own on a
//! bridge the test makes. Everything is stopped and removed on drop, a failed test's too.
#![allow(dead_code)] // each test binary uses a part

pub mod net;

use std::fs;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::{berth, closed_port, health_ok, stderr, stdout, wait_or_kill};
use net::{Bridge, Forward};

/// One `berth` process of the cluster (a replica or a node), SIGTERMed on drop; what boxes it
/// left running are ended.
pub struct Member {
    pub name: String,
    pub child: Option<Child>,
    pub dir: tempfile::TempDir,
    /// The command that (re)starts it.
    command: Vec<String>,
    netns: Option<String>,
    env: Vec<(String, String)>,
}

impl Member {
    fn spawn(&mut self) {
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("process.log"))
            .unwrap();
        let mut cmd = match &self.netns {
            // Only the network namespace: `ip netns exec` would also remount /sys, hiding
            // the cgroup mounts the node's OCI runtime needs.
            Some(ns) => {
                let mut cmd = Command::new("nsenter");
                cmd.arg(format!("--net=/run/netns/{ns}"))
                    .args(["--", crate::common::BERTH]);
                cmd
            }
            None => Command::new(crate::common::BERTH),
        };
        cmd.args(&self.command)
            .env_remove("BERTH_URL")
            .env_remove("BERTH_API_KEY")
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        self.child = Some(cmd.spawn().unwrap());
    }

    pub fn logs(&self) -> String {
        fs::read_to_string(self.dir.path().join("process.log")).unwrap_or_default()
    }

    /// SIGKILL, as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }

    /// SIGTERM, and the wait for a graceful end (its boxes stopped).
    pub fn terminate(&mut self) {
        if let Some(mut child) = self.child.take() {
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            wait_or_kill(&mut child, Duration::from_secs(60));
        }
    }

    fn alive(&mut self) -> bool {
        let child = self.child.as_mut().expect("started");
        child.try_wait().unwrap().is_none()
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        self.terminate();
        // A node killed for good (a crash test) leaves its boxes running.
        crate::common::daemon::end_leftover_boxes(self.dir.path());
    }
}

/// The whole cluster. Dropped in field order: nodes first (their boxes stop while the
/// database still answers), then the replicas, the forwarder, the bridge, Postgres.
pub struct Cluster {
    pub nodes: Vec<Member>,
    pub apis: Vec<Member>,
    /// `http://127.0.0.1:PORT` of each replica.
    pub api_urls: Vec<String>,
    pub admin_key: String,
    pub store_url: String,
    pub postgres: berth_testkit::postgres::PgServer,
    _forward: Forward,
    _moto_forward: Option<Forward>,
    /// The S3 stand-in durable copies go to, when asked for.
    pub moto: Option<berth_testkit::moto::Moto>,
    pub bridge: Bridge,
    pub cluster_dir: tempfile::TempDir,
}

/// How long a member has to come up (a node probes its runtimes first).
const START_DEADLINE: Duration = Duration::from_secs(120);

impl Cluster {
    /// `apis` replicas and `nodes` nodes; `None` after a SKIPPED line when this machine
    /// cannot run one (no root, no network namespaces, no Postgres, no sandbox).
    pub fn start(apis: usize, nodes: usize) -> Option<Cluster> {
        Cluster::start_with(apis, nodes, None)
    }

    /// [`Cluster::start`] with durable copies in `moto`'s S3 (every member's `[storage]`,
    /// the nodes reaching it across the bridge), copies of running boxes every
    /// `sync_interval_s`.
    pub fn start_with(
        apis: usize,
        nodes: usize,
        storage: Option<(berth_testkit::moto::Moto, u64)>,
    ) -> Option<Cluster> {
        if let Some(reason) = crate::common::e2e_skip_reason() {
            berth_testkit::skip("sandbox", &reason);
            return None;
        }
        let postgres = berth_testkit::postgres::PgServer::start()?;
        let mut bridge = Bridge::new()?;
        let store_url = postgres.new_database();
        let pg_port: u16 = store_url
            .rsplit_once(':')
            .and_then(|(_, rest)| rest.split('/').next())
            .and_then(|p| p.parse().ok())
            .unwrap();
        let forward = Forward::start(bridge.host_ip(), pg_port);
        let cluster_dir = tempfile::tempdir().unwrap();
        let ca = cluster_dir.path().join("ca");
        run_ok(berth().args(["cluster", "init", "--dir"]).arg(&ca));
        let mut env = vec![(
            "BERTH_STORE_PASSWORD".to_owned(),
            postgres.password().to_owned(),
        )];
        let config = storage.as_ref().map(|(moto, sync_interval_s)| {
            env.extend(moto.env().into_iter().map(|(k, v)| (k.to_owned(), v)));
            format!(
                "[storage]\nurl = \"{}\"\nsync_interval_s = {sync_interval_s}\n",
                moto.url("cluster")
            )
        });
        // The nodes reach moto across the bridge, as they reach Postgres.
        let moto_forward = storage
            .as_ref()
            .map(|(moto, _)| Forward::start(bridge.host_ip(), moto.port()));
        let write_config = |dir: &std::path::Path| {
            if let Some(config) = &config {
                fs::write(dir.join("berth.toml"), config).unwrap();
            }
        };

        let mut api_members = Vec::new();
        let mut api_urls = Vec::new();
        for i in 0..apis {
            let port = closed_port();
            let dir = tempfile::tempdir().unwrap();
            write_config(dir.path());
            let command = vec![
                "up".into(),
                "--role".into(),
                "api".into(),
                "--store".into(),
                store_url.clone(),
                "--cluster-dir".into(),
                ca.display().to_string(),
                "--listen".into(),
                format!("0.0.0.0:{port}"),
                "--data-dir".into(),
                dir.path().display().to_string(),
            ];
            let mut member = Member {
                name: format!("api{i}"),
                child: None,
                dir,
                command,
                netns: None,
                env: env.clone(),
            };
            member.spawn();
            wait_until(&format!("replica {i} answers"), START_DEADLINE, || {
                assert!(member.alive(), "replica {i} exited:\n{}", member.logs());
                health_ok(&format!("127.0.0.1:{port}"))
            });
            api_urls.push(format!("http://127.0.0.1:{port}"));
            api_members.push(member);
        }
        // The first replica made the admin key (one per database) and wrote it to its dir.
        let admin_key = fs::read_to_string(api_members[0].dir.path().join("admin.key"))
            .unwrap()
            .trim()
            .to_owned();

        let token_file = cluster_dir.path().join("join-token");
        let token = run_ok(
            berth()
                .args([
                    "cluster",
                    "token",
                    "--uses",
                    &nodes.to_string(),
                    "--store",
                    &store_url,
                ])
                .env("BERTH_STORE_PASSWORD", postgres.password()),
        );
        fs::write(&token_file, token.trim()).unwrap();

        let join_port = api_urls[0].rsplit(':').next().unwrap().to_owned();
        let node_store = store_url
            .replace("127.0.0.1", &bridge.host_ip().to_string())
            .replace(&format!(":{pg_port}/"), &format!(":{}/", forward.port()));
        let mut node_members = Vec::new();
        for i in 0..nodes {
            let (ns, ip) = bridge.add_namespace(i);
            let dir = tempfile::tempdir().unwrap();
            write_config(dir.path());
            let mut node_env = env.clone();
            if let Some(forward) = &moto_forward {
                for (key, value) in node_env.iter_mut() {
                    if key == "AWS_ENDPOINT_URL" {
                        *value = format!("http://{}:{}", bridge.host_ip(), forward.port());
                    }
                }
            }
            let command = vec![
                "node".into(),
                "--store".into(),
                node_store.clone(),
                "--data-dir".into(),
                dir.path().display().to_string(),
                "--listen".into(),
                format!("{ip}:7443"),
                "--status-listen".into(),
                format!("{ip}:7071"),
                "--name".into(),
                format!("node{i}"),
                "--join".into(),
                format!("http://{}:{join_port}", bridge.host_ip()),
                "--join-token-file".into(),
                token_file.display().to_string(),
                "--cluster-ca".into(),
                ca.join("ca.crt").display().to_string(),
            ];
            let mut member = Member {
                name: format!("node{i}"),
                child: None,
                dir,
                command,
                netns: Some(ns),
                env: node_env,
            };
            member.spawn();
            node_members.push(member);
        }
        let mut cluster = Cluster {
            nodes: node_members,
            apis: api_members,
            api_urls,
            admin_key,
            store_url,
            postgres,
            _forward: forward,
            _moto_forward: moto_forward,
            moto: storage.map(|(moto, _)| moto),
            bridge,
            cluster_dir,
        };
        for i in 0..nodes {
            cluster.wait_node_healthy(i);
        }
        cluster.wait_live_nodes(nodes);
        Some(cluster)
    }

    /// Waits for node `i`'s health answer (its status port, across the bridge).
    pub fn wait_node_healthy(&mut self, i: usize) {
        let status = format!("{}:7071", self.bridge.namespace_ip(i));
        let node = &mut self.nodes[i];
        wait_until(&format!("node {i} answers"), START_DEADLINE, || {
            assert!(node.alive(), "node {i} exited:\n{}", node.logs());
            health_ok(&status)
        });
    }

    /// Waits until `n` nodes are live in `berth node ls`.
    pub fn wait_live_nodes(&self, n: usize) {
        wait_until(&format!("{n} live nodes"), START_DEADLINE, || {
            let list = self.json(0, &["node", "ls", "--json"]);
            list["nodes"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|n| n["live"] == true)
                .count()
                == n
        });
    }

    /// Restarts node `i` (after a kill) and waits for its health answer.
    pub fn restart_node(&mut self, i: usize) {
        self.nodes[i].spawn();
        self.wait_node_healthy(i);
    }

    /// `berth ARGS` against replica `api` with the admin key.
    pub fn berth(&self, api: usize, args: &[&str]) -> Output {
        berth()
            .args(args)
            .env("BERTH_URL", &self.api_urls[api])
            .env("BERTH_API_KEY", &self.admin_key)
            .output()
            .unwrap()
    }

    /// [`Cluster::berth`] that must succeed; its stdout.
    pub fn berth_ok(&self, api: usize, args: &[&str]) -> String {
        let out = self.berth(api, args);
        assert!(
            out.status.success(),
            "berth {args:?} via replica {api}: {}\n--- replica log:\n{}",
            stderr(&out),
            tail(&self.apis[api].logs())
        );
        stdout(&out)
    }

    pub fn json(&self, api: usize, args: &[&str]) -> serde_json::Value {
        let text = self.berth_ok(api, args);
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
    }

    /// `host:port` of replica `api`.
    pub fn authority(&self, api: usize) -> String {
        self.api_urls[api].trim_start_matches("http://").to_owned()
    }

    /// Every member's log, for a failure's message.
    pub fn logs(&self) -> String {
        self.apis
            .iter()
            .chain(&self.nodes)
            .map(|m| format!("--- {}\n{}", m.name, tail(&m.logs())))
            .collect()
    }
}

fn run_ok(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{cmd:?}: {}", stderr(&out));
    stdout(&out)
}

fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(60)..].join("\n")
}

/// Polls `done` until it holds; panics with `what` after `within`.
pub fn wait_until(what: &str, within: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    let mut pause = Duration::from_millis(20);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(500));
    }
}
