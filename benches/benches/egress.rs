//! The egress gateway against a direct connection and against nginx, in one run, all on
//! loopback. A TLS upstream (rustls, test CA) on 127.0.0.1 is reached by the same client
//! (full TLS 1.3 handshakes, SNI `bench.example.test`) over:
//! - direct: TCP to the upstream;
//! - gateway: the box's Unix socket served by `Gateway::serve_box` (resolve override to the
//!   upstream, allowlisted, audit lines to a `JsonlDirSink` in a temp dir);
//! - gateway + box hop: a TCP listener handing each accepted socket to the gateway over that
//!   socket and closing it, as berth-init's 127.0.0.1:443 does in a sandbox;
//! - nginx: Debian nginx, stream module, `ssl_preread` + `map` on the SNI, on a Unix socket
//!   (skipped when nginx or its stream module is missing).
//!
//! Connection setup (connect + handshake + first byte of the answer) p50/p99 and the p50 added
//! over direct; bulk throughput (download and upload) as the median of rounds, as a ratio of
//! direct. Paths are interleaved in small batches so machine noise hits all alike. Each server
//! side (upstream, gateway, hop) runs on its own one-worker runtime; nginx on one worker
//! process; the client on this thread.
//!
//! `BERTH_BENCH_EGRESS_SETUPS` (default 2000 per path), `BERTH_BENCH_EGRESS_MIB` (128) and
//! `BERTH_BENCH_EGRESS_ROUNDS` (12) set the sizes: 1.5 GiB each way per path, cut into many
//! interleaved rounds because on a shared 2-core host a burst of other load can halve one
//! transfer, and a median of twelve shrugs that off where a median of three does not.

use std::time::Duration;

use berth_benches::daemon::{count, BenchResult};
use berth_benches::egress::client::{Client, Endpoint};
use berth_benches::egress::gateway::{BenchGateway, BoxHop};
use berth_benches::egress::nginx::NginxBinary;
use berth_benches::egress::tls::TestPki;
use berth_benches::egress::upstream::{Request, Upstream};
use berth_benches::egress::HOST;
use berth_benches::stats::{ms, Summary};
use rustls::pki_types::ServerName;

const ADDED_SETUP_TARGET: Duration = Duration::from_millis(1);
const THROUGHPUT_TARGET: f64 = 0.80;
const BATCH: usize = 50;
const WARMUP_SETUPS: usize = 100;
const WARMUP_MIB: u64 = 64;
const MIB: u64 = 1024 * 1024;

struct Path {
    name: &'static str,
    to: Endpoint,
    setups: Vec<Duration>,
    down: Vec<f64>,
    up: Vec<f64>,
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    if let Err(e) = run() {
        eprintln!("bench failed: {e}");
        let mut source = e.source();
        while let Some(s) = source {
            eprintln!("  caused by: {s}");
            source = s.source();
        }
        std::process::exit(1);
    }
}

fn run() -> BenchResult<()> {
    let setups = count("BERTH_BENCH_EGRESS_SETUPS", 2000);
    let mib = count("BERTH_BENCH_EGRESS_MIB", 128) as u64;
    let rounds = count("BERTH_BENCH_EGRESS_ROUNDS", 12);
    let dir = tempfile::tempdir()?;

    // Every server is started (and, by drop order, stopped) outside the client's runtime.
    let pki = TestPki::new(HOST)?;
    let upstream = Upstream::start(pki.server.clone())?;
    let gateway_dir = dir.path().join("gateway");
    std::fs::create_dir_all(&gateway_dir)?;
    let gateway = BenchGateway::start(&gateway_dir, HOST, upstream.addr)?;
    let hop = BoxHop::start(gateway.socket.clone())?;
    let nginx_dir = dir.path().join("nginx");
    std::fs::create_dir_all(&nginx_dir)?;
    let nginx = NginxBinary::find()
        .and_then(|bin| Ok((bin.start(&nginx_dir, HOST, upstream.addr)?, bin.version)));
    let nginx = match nginx {
        Ok(n) => Some(n),
        Err(e) => {
            println!("nginx: skipped ({e}; install with ./scripts/install-deps.sh --bench)");
            None
        }
    };

    let mut paths = vec![
        path("direct", Endpoint::Tcp(upstream.addr)),
        path("gateway", Endpoint::Unix(gateway.socket.clone())),
        path("gateway + box hop", Endpoint::Tcp(hop.addr)),
    ];
    if let Some((nginx, _)) = &nginx {
        paths.push(path("nginx", Endpoint::Unix(nginx.socket.clone())));
    }
    let client = Client::new(pki.client.clone(), ServerName::try_from(HOST)?);

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(measure(&client, &mut paths, setups, mib, rounds))?;
    drop(runtime);

    // Two paths go through the gateway; each path makes a download and an upload per round
    // and in the warm-up.
    let connections = 2 * (WARMUP_SETUPS + setups) + 2 * 2 * (1 + rounds);
    drop(hop);
    let audit_lines = gateway.finish()?; // waits for the last connections' audit lines

    report(
        &paths,
        setups,
        mib,
        rounds,
        nginx.as_ref().map(|n| n.1.as_str()),
    );
    println!(
        "gateway audit log (JsonlDirSink): {audit_lines} lines for {connections} connections through the gateway: {}",
        if audit_lines == connections { "ok" } else { "MISMATCH" }
    );
    drop(nginx);
    drop(upstream);
    Ok(())
}

fn path(name: &'static str, to: Endpoint) -> Path {
    Path {
        name,
        to,
        setups: Vec::new(),
        down: Vec::new(),
        up: Vec::new(),
    }
}

async fn measure(
    client: &Client,
    paths: &mut [Path],
    setups: usize,
    mib: u64,
    rounds: usize,
) -> BenchResult<()> {
    for p in paths.iter() {
        for _ in 0..WARMUP_SETUPS {
            client.setup(&p.to).await?;
        }
        client
            .bulk(&p.to, Request::Download(WARMUP_MIB * MIB))
            .await?;
        client
            .bulk(&p.to, Request::Upload(WARMUP_MIB * MIB))
            .await?;
    }
    // Round-robin batches, each round starting at the next path, so neither order nor a
    // burst of load elsewhere on the machine favours one path.
    let n = paths.len();
    for batch in 0..setups.div_ceil(BATCH) {
        let size = BATCH.min(setups - batch * BATCH);
        for k in 0..n {
            let p = &mut paths[(batch + k) % n];
            for _ in 0..size {
                let took = client.setup(&p.to).await?;
                p.setups.push(took);
            }
        }
    }
    for round in 0..rounds {
        for k in 0..n {
            let p = &mut paths[(round + k) % n];
            let down = client.bulk(&p.to, Request::Download(mib * MIB)).await?;
            p.down.push(down);
            let up = client.bulk(&p.to, Request::Upload(mib * MIB)).await?;
            p.up.push(up);
        }
    }
    Ok(())
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s[s.len() / 2]
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "PASS"
    } else {
        "MISS"
    }
}

fn report(paths: &[Path], setups: usize, mib: u64, rounds: usize, nginx: Option<&str>) {
    let setup: Vec<Summary> = paths.iter().map(|p| Summary::of(&p.setups)).collect();
    let down: Vec<f64> = paths.iter().map(|p| median(&p.down)).collect();
    let up: Vec<f64> = paths.iter().map(|p| median(&p.up)).collect();
    let direct = 0;
    let find = |name: &str| paths.iter().position(|p| p.name == name);

    println!(
        "egress: TLS 1.3 (rustls/ring, full handshakes) to an upstream on 127.0.0.1; upstream, \
         gateway and box hop on one worker thread each, nginx worker_processes 1{}",
        nginx.map(|v| format!(" ({v})")).unwrap_or_default()
    );
    println!(
        "connection setup (connect + TLS handshake + first byte), n={setups} per path, interleaved:"
    );
    println!(
        "  {:<20} {:>10} {:>10} {:>16}",
        "path", "p50", "p99", "added p50"
    );
    for (i, p) in paths.iter().enumerate() {
        let s = setup[i];
        let added = s.p50.as_secs_f64() - setup[direct].p50.as_secs_f64();
        let mut line = format!(
            "  {:<20} {:>10} {:>10} {:>13.3} ms",
            p.name,
            ms(s.p50),
            ms(s.p99),
            added * 1000.0
        );
        if p.name.starts_with("gateway") {
            line += &format!(
                "  target ≤ {} ms: {}",
                ADDED_SETUP_TARGET.as_millis(),
                verdict(added <= ADDED_SETUP_TARGET.as_secs_f64())
            );
        }
        println!("{line}");
    }
    println!(
        "bulk throughput, one connection, median of {rounds} × {mib} MiB each way, interleaved:"
    );
    println!(
        "  {:<20} {:>11} {:>9} {:>11} {:>9}",
        "path", "down MB/s", "× direct", "up MB/s", "× direct"
    );
    for (i, p) in paths.iter().enumerate() {
        let (rd, ru) = (down[i] / down[direct], up[i] / up[direct]);
        let mut line = format!(
            "  {:<20} {:>11.0} {:>9.2} {:>11.0} {:>9.2}",
            p.name,
            down[i] / 1e6,
            rd,
            up[i] / 1e6,
            ru
        );
        if p.name.starts_with("gateway") {
            line += &format!(
                "  target ≥ {THROUGHPUT_TARGET:.2}: {}",
                verdict(rd >= THROUGHPUT_TARGET && ru >= THROUGHPUT_TARGET)
            );
        }
        println!("{line}");
    }
    let (Some(g), Some(n)) = (find("gateway"), find("nginx")) else {
        println!("gateway vs nginx: nginx skipped");
        return;
    };
    let (gd, gu) = (down[g] / down[n], up[g] / up[n]);
    println!(
        "gateway vs nginx: throughput down {gd:.2}×, up {gu:.2}×  target > 1 (faster): {}",
        verdict(gd > 1.0 && gu > 1.0)
    );
    let (ga, na) = (
        setup[g].p50.as_secs_f64() - setup[direct].p50.as_secs_f64(),
        setup[n].p50.as_secs_f64() - setup[direct].p50.as_secs_f64(),
    );
    println!(
        "gateway vs nginx: added setup p50 {:.3} ms vs {:.3} ms  target lower (faster): {}",
        ga * 1000.0,
        na * 1000.0,
        verdict(ga < na)
    );
}
