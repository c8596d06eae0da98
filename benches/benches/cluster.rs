//! What going past one host costs, in one run:
//! - create → first exec, and the exec round trip on a running box, through an API replica
//!   (`berth up --role api`) whose box lives on a node (`berth node`) over mutual TLS,
//!   against the same on a single-host daemon (the floor);
//! - how long a node takes to claim an op (queued → claimed, the database's clock) while
//!   200 creates arrive at once, p50/p99.
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
use berth_server::cluster::join::make_csr;
use berth_server::cluster::mtls::{node_server_config, ApiTls};
use berth_server::cluster::role::NodeConfig;
use berth_server::cluster::role::RoleConfig;
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
    let (api, node) = cluster(dir.path(), &postgres, &store).await?;
    let through = measure(&api, "cluster", starts, execs).await?;
    let claims = claim_latency(&api, &postgres, &store, creates).await?;
    api.stop().await?;
    node.stop().await?;

    report("create → first exec", &through.0, &floor.0);
    report("exec round trip (running box)", &through.1, &floor.1);
    let claims = Summary::of(&claims);
    println!(
        "op claim latency under {creates} concurrent creates (queued → claimed): p50 {}  p99 {}  (n={})",
        ms(claims.p50),
        ms(claims.p99),
        claims.n
    );
    Ok(())
}

/// A replica and a node on the same database, their TLS from a CA made here.
async fn cluster(dir: &Path, postgres: &PgServer, store: &str) -> BenchResult<(Daemon, Daemon)> {
    let ca = Arc::new(ClusterCa::init(&dir.join("ca"))?);
    let with_store = |mut config: berth_server::ServerConfig| {
        config.host.store.url = Some(store.to_owned());
        config.host.store.password_file = Some(postgres.password_file().to_owned());
        config
    };

    let (key_pem, csr_pem) = make_csr("bench-node")?;
    let cert_pem = ca.issue(
        &Role::Node {
            node_name: "bench-node".into(),
        },
        &Csr::from_pem(&csr_pem)?,
        &[],
    )?;
    let identity = Identity {
        key_pem,
        cert_pem,
        ca_pem: ca.cert_pem().to_owned(),
    };
    let node_listen = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let mut config = with_store(Daemon::config(&dir.join("node"), node_listen)?);
    config.role = RoleConfig::Node {
        node: NodeConfig {
            name: "bench-node".into(),
            advertise: node_listen.to_string(),
            labels: Default::default(),
        },
        tls: Arc::new(node_server_config(&identity)?),
        status_listen: None,
    };
    let node_server = Server::bind(config).await?;
    let node = Daemon::serve(node_server, String::new());

    let mut config = with_store(Daemon::config(&dir.join("api"), "127.0.0.1:0".parse()?)?);
    // The burst's 200 connections come from one address before their first request.
    config.host.server.max_anonymous_connections_per_address = config.host.server.max_connections;
    config.role = RoleConfig::Api {
        tls: Arc::new(ApiTls::new(ca, "bench-api")?),
    };
    let api_server = Server::bind(config).await?;
    // The node started first and made the database's admin key.
    let key = std::fs::read_to_string(dir.join("node").join(berth_server::ADMIN_KEY_FILE))?;
    Ok((Daemon::serve(api_server, key.trim().to_owned()), node))
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
        let (status, body) = client
            .call(Method::POST, "/v1/boxes", json!({"name": name}))
            .await?;
        expect(status, StatusCode::CREATED, "create", &body)?;
        let (status, body) = client
            .call(
                Method::POST,
                &format!("/v1/boxes/{name}/exec"),
                exec_true.clone(),
            )
            .await?;
        expect(status, StatusCode::OK, "first exec", &body)?;
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
