//! Cold start and exec round-trip of a `sandbox` box through the daemon's API, each printed
//! as p50/p99 and as a ratio to its floor measured in the same run:
//! - cold start (create → first exec answered) vs the OCI runtime's own `run` of a box's
//!   own bundle with `/usr/bin/true` in place of berth-init;
//! - exec round-trip on a running box (`true`) vs a local fork + exec of `/usr/bin/true`;
//! - berth-init's resident memory while serving;
//! - the cold start step by step (`berth_benches::phases`): the same number of starts on
//!   the sandbox runtime directly, the median of each step it reports.
//!
//! Needs root, runc and a static berth-init (`make bench` builds it).
//! `BERTH_BENCH_STARTS` and `BERTH_BENCH_EXECS` set the sample counts.

use std::time::{Duration, Instant};

use berth_benches::daemon::{count, BenchResult, Daemon, OCI_RUNTIME};
use berth_benches::floor::{fork_exec_once, TrivialBundle};
use berth_benches::http::Client;
use berth_benches::phases::PhaseTable;
use berth_benches::stats::{ms, ratio, Summary};
use http::{Method, StatusCode};
use serde_json::json;

fn main() {
    berth_benches::daemon::main(run);
}

async fn run() -> BenchResult<()> {
    let starts = count("BERTH_BENCH_STARTS", 20);
    let execs = count("BERTH_BENCH_EXECS", 300);
    let dir = tempfile::tempdir()?;

    // Floors first, so nothing of berth is warm when they run.
    let bundle = TrivialBundle::new(&dir.path().join("floor"), OCI_RUNTIME).await?;
    bundle.run_once(0)?; // warm the page cache
    let start_floor: Vec<Duration> = (1..=starts)
        .map(|n| bundle.run_once(n))
        .collect::<Result<_, _>>()?;
    let exec_floor: Vec<Duration> = (0..execs)
        .map(|_| fork_exec_once())
        .collect::<Result<_, _>>()?;

    let daemon = Daemon::start(&dir.path().join("berth")).await?;
    let (addr, key) = (daemon.addr, daemon.key.clone());
    let mut client = Client::connect(addr, &key).await?;

    let exec_true = json!({"cmd": ["true"]});
    let mut cold = Vec::with_capacity(starts);
    let mut created = Vec::with_capacity(starts);
    let mut runtime_starts = Vec::with_capacity(starts);
    let mut daemon_steps: Vec<(String, Vec<Duration>)> = Vec::new();
    for n in 0..=starts {
        let name = format!("bench-{n}");
        let started = Instant::now();
        let (status, _) = client
            .call(Method::POST, "/v1/boxes", json!({"name": name}))
            .await?;
        expect(status, StatusCode::CREATED, "create")?;
        let create_answered = started.elapsed();
        let (status, body) = client
            .call(
                Method::POST,
                &format!("/v1/boxes/{name}/exec"),
                exec_true.clone(),
            )
            .await?;
        expect(status, StatusCode::OK, "first exec")?;
        if body["exit_code"] != 0 {
            return Err(format!("first exec: {body}").into());
        }
        if n > 0 {
            cold.push(started.elapsed()); // bench-0 warms caches
            created.push(create_answered);
            let (total, steps) = last_boot(&mut client, &name).await?;
            runtime_starts.push(total);
            for (step, took) in steps {
                match daemon_steps.iter_mut().find(|(s, _)| *s == step) {
                    Some((_, all)) => all.push(took),
                    None => daemon_steps.push((step, vec![took])),
                }
            }
        }
        if n < starts {
            let (status, _) = client
                .call(
                    Method::DELETE,
                    &format!("/v1/boxes/{name}"),
                    serde_json::Value::Null,
                )
                .await?;
            expect(status, StatusCode::NO_CONTENT, "delete")?;
        }
    }

    let last = format!("/v1/boxes/bench-{starts}/exec");
    let mut round_trips = Vec::with_capacity(execs);
    for _ in 0..execs {
        let started = Instant::now();
        let (status, _) = client.call(Method::POST, &last, exec_true.clone()).await?;
        round_trips.push(started.elapsed());
        expect(status, StatusCode::OK, "exec")?;
    }
    let (_, body) = client
        .call(
            Method::POST,
            &last,
            json!({"cmd": ["sh", "-c", "grep VmRSS /proc/1/status"]}),
        )
        .await?;
    let rss_kib: u64 = body["stdout"]
        .as_str()
        .and_then(|s| s.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| format!("cannot read berth-init's VmRSS: {body}"))?;

    daemon.stop().await?;
    let steps = PhaseTable::sample(&dir.path().join("phases"), starts).await?;

    report(
        "cold start (create → first exec)",
        &cold,
        &start_floor,
        "runc run of the box's bundle running /usr/bin/true",
        1.5,
    );
    let (create, start, whole) = (
        Summary::of(&created).p50,
        Summary::of(&runtime_starts).p50,
        Summary::of(&cold).p50,
    );
    println!(
        "  of it (p50): create answered {}, the daemon's boot (the box's last_boot) {}, the rest of the exec call (routing, lock, store, the exec itself) {}",
        ms(create),
        ms(start),
        ms(whole.saturating_sub(create + start))
    );
    let daemon_table: Vec<String> = daemon_steps
        .iter()
        .map(|(step, all)| format!("{step} {}", ms(Summary::of(all).p50)))
        .collect();
    println!(
        "  the daemon's boot steps (p50): {}",
        daemon_table.join(", ")
    );
    report(
        "exec round-trip (running box)",
        &round_trips,
        &exec_floor,
        "local fork+exec",
        f64::NAN,
    );
    let exec = Summary::of(&round_trips);
    println!(
        "exec p50 {}  target ≤ 2 ms: {}",
        ms(exec.p50),
        if exec.p50 <= Duration::from_millis(2) {
            "met"
        } else {
            "MISSED"
        }
    );
    println!(
        "berth-init RSS {:.2} MiB  target ≤ 5 MiB: {}",
        rss_kib as f64 / 1024.0,
        if rss_kib <= 5 * 1024 { "met" } else { "MISSED" }
    );
    steps.print();
    Ok(())
}

/// The box's last boot as the API reports it: its whole (`last_boot.total_ms`) and the
/// daemon's own steps (the runtime's are in the step table, sampled without the daemon).
async fn last_boot(
    client: &mut Client,
    name: &str,
) -> BenchResult<(Duration, Vec<(String, Duration)>)> {
    let (status, body) = client
        .call(
            Method::GET,
            &format!("/v1/boxes/{name}"),
            serde_json::Value::Null,
        )
        .await?;
    expect(status, StatusCode::OK, "show")?;
    let total_ms = body["last_boot"]["total_ms"]
        .as_f64()
        .ok_or_else(|| format!("no last_boot.total_ms in {body}"))?;
    let steps = body["last_boot"]["phases"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["source"] == "daemon")
        .filter_map(|p| {
            let micros = p["micros"].as_u64()?;
            Some((
                p["name"].as_str()?.to_owned(),
                Duration::from_micros(micros),
            ))
        })
        .collect();
    Ok((Duration::from_secs_f64(total_ms / 1000.0), steps))
}

fn expect(got: StatusCode, want: StatusCode, what: &str) -> Result<(), String> {
    if got == want {
        Ok(())
    } else {
        Err(format!("{what}: expected {want}, got {got}"))
    }
}

fn report(what: &str, samples: &[Duration], floor: &[Duration], floor_name: &str, target: f64) {
    let s = Summary::of(samples);
    let f = Summary::of(floor);
    println!("{what}: n={} p50 {} p99 {}", s.n, ms(s.p50), ms(s.p99));
    println!(
        "  floor ({floor_name}): p50 {} p99 {}",
        ms(f.p50),
        ms(f.p99)
    );
    let r50 = ratio(s.p50, f.p50);
    let verdict = if target.is_nan() {
        String::new()
    } else if r50 <= target {
        format!("  target ≤ {target}×: met")
    } else {
        format!("  target ≤ {target}×: MISSED")
    };
    println!(
        "  ratio p50 {:.2}×  p99 {:.2}×{verdict}",
        r50,
        ratio(s.p99, f.p99)
    );
}
