//! What going past one host costs, in one run:
//! - create → first exec, and the exec round trip on a running box, through an API replica
//!   (`berth up --role api`) whose box lives on a node (`berth node`) over mutual TLS,
//!   against the same on a single-host daemon (the floor);
//! - how long a node takes to claim an op (queued → claimed, the database's clock) while
//!   200 creates arrive at once, p50/p99;
//! - the time from a node's death to its sleeping box answering an exec on another node
//!   (durable copies in a chunk store directory), against its floor: the lease and the
//!   failover's grace, plus the same box's cold start with a restore from its copy.
//!
//! Everything runs in this process on loopback: a Postgres the bench starts from Debian's
//! binaries, one replica, one node, one single host. Needs root, runc, berth-init and
//! PostgreSQL's server binaries (`make bench`). `BERTH_BENCH_STARTS`, `BERTH_BENCH_EXECS`
//! and `BERTH_BENCH_CREATES` set the sizes.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_benches::daemon::{count, BenchResult, Daemon};
use berth_benches::http::{expect, Client};
use berth_benches::stats::{ms, ratio, Summary};
use berth_server::cluster::ca::{ClusterCa, Csr, Identity, Role};
use berth_server::cluster::failover::FAILOVER_GRACE;
use berth_server::cluster::join::make_csr;
use berth_server::cluster::mtls::{node_server_config, ApiTls};
use berth_server::cluster::role::RoleConfig;
use berth_server::cluster::role::{NodeConfig, LEASE_TTL};
use berth_server::Server;
use berth_testkit::postgres::PgServer;
use http::{Method, StatusCode};
use serde_json::json;

fn main() {
    berth_benches::daemon::main(run);
}

async fn run() -> BenchResult<()> {
    let starts = count("BERTH_BENCH_STARTS", 10);
    let execs = count("BERTH_BENCH_EXECS", 200);
    let creates = count("BERTH_BENCH_CREATES", 200);
    let Some(postgres) = PgServer::start() else {
        return Err("PostgreSQL's server binaries are needed (apt-get install postgresql)".into());
    };
    let dir = tempfile::tempdir()?;

    let single = Daemon::start(&dir.path().join("single")).await?;
    let floor = measure(&single, "single", starts, execs).await?;
    single.stop().await?;

    let store = postgres.new_database();
    let (api, node, _) = cluster(dir.path(), &postgres, &store, None).await?;
    let through = measure(&api, "cluster", starts, execs).await?;
    let claims = claim_latency(&api, &postgres, &store, creates).await?;
    api.stop().await?;
    node.stop().await?;

    let failover = failover(dir.path(), &postgres).await?;

    report("create → first exec", &through.0, &floor.0);
    report("exec round trip (running box)", &through.1, &floor.1);
    let claims = Summary::of(&claims);
    println!(
        "op claim latency under {creates} concurrent creates (queued → claimed): p50 {}  p99 {}  (n={})",
        ms(claims.p50),
        ms(claims.p99),
        claims.n
    );
    println!(
        "node death → its sleeping box answering on another node: {}; floor (lease {} s + grace {} s + a cold start with the restore, {}) {}; ratio {:.2}×",
        ms(failover.took),
        LEASE_TTL.as_secs(),
        FAILOVER_GRACE.as_secs(),
        ms(failover.restore_start),
        ms(failover.floor()),
        ratio(failover.took, failover.floor())
    );
    Ok(())
}

/// What a replica and its nodes share: the database, the CA, and the chunk store if any.
struct Shared<'a> {
    dir: &'a Path,
    postgres: &'a PgServer,
    store: &'a str,
    ca: Arc<ClusterCa>,
    copies: Option<std::path::PathBuf>,
}

impl Shared<'_> {
    fn config(
        &self,
        name: &str,
        listen: std::net::SocketAddr,
    ) -> BenchResult<berth_server::ServerConfig> {
        let mut config = Daemon::config(&self.dir.join(name), listen)?;
        config.host.store.url = Some(self.store.to_owned());
        config.host.store.password_file = Some(self.postgres.password_file().to_owned());
        config.host.storage.url = self.copies.as_ref().map(|p| p.display().to_string());
        Ok(config)
    }

    /// A node named `name`, its certificate from the CA.
    async fn node(&self, name: &str) -> BenchResult<Daemon> {
        let (key_pem, csr_pem) = make_csr(name)?;
        let cert_pem = self.ca.issue(
            &Role::Node {
                node_name: name.into(),
            },
            &Csr::from_pem(&csr_pem)?,
            &[],
        )?;
        let identity = Identity {
            key_pem,
            cert_pem,
            ca_pem: self.ca.cert_pem().to_owned(),
        };
        let node_listen = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
        let mut config = self.config(name, node_listen)?;
        config.role = RoleConfig::Node {
            node: NodeConfig {
                name: name.into(),
                advertise: node_listen.to_string(),
                labels: Default::default(),
            },
            tls: Arc::new(node_server_config(&identity)?),
            status_listen: None,
        };
        let server = Server::bind(config).await?;
        let key = server.admin_key_created.clone().unwrap_or_default();
        Ok(Daemon::serve(server, key))
    }
}

/// A replica and a node on the same database, their TLS from a CA made here; with
/// `copies`, durable copies in that directory. The admin key is the replica's.
async fn cluster<'a>(
    dir: &'a Path,
    postgres: &'a PgServer,
    store: &'a str,
    copies: Option<std::path::PathBuf>,
) -> BenchResult<(Daemon, Daemon, Shared<'a>)> {
    let shared = Shared {
        dir,
        postgres,
        store,
        ca: Arc::new(ClusterCa::init(&dir.join("ca"))?),
        copies,
    };
    let node = shared.node("bench-node").await?;
    let mut config = shared.config("api", "127.0.0.1:0".parse()?)?;
    // The burst's 200 connections come from one address before their first request.
    config.host.server.max_anonymous_connections_per_address = config.host.server.max_connections;
    config.role = RoleConfig::Api {
        tls: Arc::new(ApiTls::new(shared.ca.clone(), "bench-api")?),
    };
    let api_server = Server::bind(config).await?;
    // The node started first and made the database's admin key.
    let key = std::fs::read_to_string(dir.join("bench-node").join(berth_server::ADMIN_KEY_FILE))?;
    Ok((
        Daemon::serve(api_server, key.trim().to_owned()),
        node,
        shared,
    ))
}

/// How long a failover took, and what its floor is made of.
struct Failover {
    took: Duration,
    restore_start: Duration,
}

impl Failover {
    fn floor(&self) -> Duration {
        LEASE_TTL + FAILOVER_GRACE + self.restore_start
    }
}

/// A box asleep (copied) on one node; that node crashes; how long until the box answers an
/// exec on the other. The floor's cold start is a second box's, restored from its copy
/// (`POST …/restore`) and started while its node lives: the work a failover's start does.
async fn failover(dir: &Path, postgres: &PgServer) -> BenchResult<Failover> {
    let store = postgres.new_database();
    let dir = dir.join("failover");
    std::fs::create_dir_all(&dir)?;
    let copies = dir.join("copies");
    let (api, first, shared) = cluster(&dir, postgres, &store, Some(copies)).await?;
    let mut client = Client::connect(api.addr, &api.key).await?;
    let exec_true = json!({"cmd": ["true"]});
    for name in ["moves", "floor"] {
        create_and_run(&mut client, name).await?;
        let (status, body) = client
            .call(Method::POST, &format!("/v1/boxes/{name}/stop"), json!({}))
            .await?;
        expect(status, StatusCode::OK, "stop", &body)?;
    }
    for name in ["moves", "floor"] {
        copied(&mut client, name).await?;
    }
    let second = shared.node("bench-node-2").await?;

    // The floor: a restore from the copy and a cold start, on a live node.
    let started = Instant::now();
    let (status, body) = client
        .call(
            Method::POST,
            "/v1/boxes/floor/restore",
            json!({"from": "copy"}),
        )
        .await?;
    expect(status, StatusCode::OK, "restore", &body)?;
    let (status, body) = client
        .call(Method::POST, "/v1/boxes/floor/exec", exec_true.clone())
        .await?;
    expect(status, StatusCode::OK, "exec after the restore", &body)?;
    let restore_start = started.elapsed();

    first.crash().await;
    let died = Instant::now();
    let deadline = died + LEASE_TTL + FAILOVER_GRACE + Duration::from_secs(120);
    loop {
        let (status, body) = client
            .call(Method::POST, "/v1/boxes/moves/exec", exec_true.clone())
            .await?;
        if status == StatusCode::OK {
            break;
        }
        if Instant::now() > deadline {
            return Err(
                format!("the box never answered after its node died: {status} {body}").into(),
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let took = died.elapsed();
    api.stop().await?;
    second.stop().await?;
    Ok(Failover {
        took,
        restore_start,
    })
}

/// Creates box `name` and runs `true` in it: its cold start.
async fn create_and_run(client: &mut Client, name: &str) -> BenchResult<()> {
    let (status, body) = client
        .call(Method::POST, "/v1/boxes", json!({"name": name}))
        .await?;
    expect(status, StatusCode::CREATED, "create", &body)?;
    let (status, body) = client
        .call(
            Method::POST,
            &format!("/v1/boxes/{name}/exec"),
            json!({"cmd": ["true"]}),
        )
        .await?;
    expect(status, StatusCode::OK, "first exec", &body)?;
    Ok(())
}

/// Waits until the stopped box `name` has a durable copy.
async fn copied(client: &mut Client, name: &str) -> BenchResult<()> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (status, body) = client
            .call(
                Method::GET,
                &format!("/v1/boxes/{name}"),
                serde_json::Value::Null,
            )
            .await?;
        expect(status, StatusCode::OK, "show", &body)?;
        if body["durable"]["generation"].as_u64().unwrap_or(0) >= 1 {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("{name} was never copied: {body}").into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `starts` cold starts (create → first exec) and `execs` exec round trips on the last box.
async fn measure(
    daemon: &Daemon,
    tag: &str,
    starts: usize,
    execs: usize,
) -> BenchResult<(Vec<Duration>, Vec<Duration>)> {
    let mut client = Client::connect(daemon.addr, &daemon.key).await?;
    let exec_true = json!({"cmd": ["true"]});
    let mut cold = Vec::with_capacity(starts);
    for n in 0..=starts {
        let name = format!("{tag}-{n}");
        let started = Instant::now();
        create_and_run(&mut client, &name).await?;
        if n > 0 {
            cold.push(started.elapsed()); // the first warms caches
        }
    }
    let last = format!("/v1/boxes/{tag}-{starts}/exec");
    let mut round_trips = Vec::with_capacity(execs);
    for _ in 0..execs {
        let started = Instant::now();
        let (status, body) = client.call(Method::POST, &last, exec_true.clone()).await?;
        round_trips.push(started.elapsed());
        expect(status, StatusCode::OK, "exec", &body)?;
    }
    for n in 0..=starts {
        let (status, body) = client
            .call(
                Method::DELETE,
                &format!("/v1/boxes/{tag}-{n}"),
                serde_json::Value::Null,
            )
            .await?;
        expect(status, StatusCode::NO_CONTENT, "delete", &body)?;
    }
    Ok((cold, round_trips))
}

/// `creates` creates at once through the replica; how long each one's op waited to be
/// claimed, read from the database (its own clock at both ends).
async fn claim_latency(
    api: &Daemon,
    postgres: &PgServer,
    store: &str,
    creates: usize,
) -> BenchResult<Vec<Duration>> {
    let tasks: Vec<_> = (0..creates)
        .map(|n| {
            let (addr, key) = (api.addr, api.key.clone());
            tokio::spawn(async move {
                let mut client = Client::connect(addr, &key)
                    .await
                    .map_err(|e| e.to_string())?;
                let (status, body) = client
                    .call(
                        Method::POST,
                        "/v1/boxes",
                        json!({"name": format!("burst-{n}")}),
                    )
                    .await
                    .map_err(|e| e.to_string())?;
                expect(status, StatusCode::CREATED, "create", &body)
            })
        })
        .collect();
    for task in tasks {
        task.await??;
    }
    let out = std::process::Command::new(postgres.bin("psql"))
        .args([store, "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c"])
        .arg("SELECT claimed_ms - created_ms FROM ops WHERE kind = 'create' AND claimed_ms IS NOT NULL")
        .env("PGPASSWORD", postgres.password())
        .output()?;
    if !out.status.success() {
        return Err(format!("psql: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    let waits: Vec<Duration> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.trim().parse::<u64>().ok())
        .map(Duration::from_millis)
        .collect();
    let mut client = Client::connect(api.addr, &api.key).await?;
    for n in 0..creates {
        let (status, body) = client
            .call(
                Method::DELETE,
                &format!("/v1/boxes/burst-{n}"),
                serde_json::Value::Null,
            )
            .await?;
        expect(status, StatusCode::NO_CONTENT, "delete", &body)?;
    }
    Ok(waits)
}

fn report(what: &str, through_api: &[Duration], single: &[Duration]) {
    let (a, s) = (Summary::of(through_api), Summary::of(single));
    println!(
        "{what}: through a replica p50 {} p99 {}; single host p50 {} p99 {}; ratio (p50) {:.2}×",
        ms(a.p50),
        ms(a.p99),
        ms(s.p50),
        ms(s.p99),
        ratio(a.p50, s.p50)
    );
}
