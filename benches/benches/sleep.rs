//! The sleep ladder, printed as p50/p99 in one run:
//! - a `sandbox` box through the daemon: pause → resume answered, and resume → first exec
//!   (goal: resume ≤ 10 ms); snapshot (the sandbox cannot: the line says why); a cold
//!   start → ready of the same box;
//! - a `qemu` box on the runtime (`berth_benches::vm::ladder`): pause → resume, snapshot →
//!   restore and a cold start → ready, each to an answered exec (goal: a restore beats a
//!   cold boot), and the memory it holds running, paused and snapshotted; skipped with the
//!   reason where this host cannot run qemu boxes;
//! - the host memory the box holds running, paused and stopped;
//! - create → first exec answered from a template with a warm pool (the create claims a
//!   booted box) against the same box from a template without one (the exec boots it), and
//!   the create call alone from the pool (goal ≤ 10 ms p50).
//!
//! The two templates differ only in `warm`. A pool sample is taken once a create claims (a
//! create answered `stopped` found the pool empty: it is deleted and tried again, which is
//! how the bench waits for the refill). Needs root, runc and a static berth-init (and for
//! the qemu part QEMU and the test images). `BERTH_BENCH_STARTS` sets the sample count of
//! each, `BERTH_BENCH_VM_ROUNDS` the qemu part's (default 5).

use std::time::{Duration, Instant};

use berth_benches::daemon::{count, BenchResult, Daemon};
use berth_benches::http::{expect, Client};
use berth_benches::stats::{ms, ratio, Summary};
use http::{Method, StatusCode};
use serde_json::{json, Value};

/// How long a sample waits for the pool to refill before the run fails.
const REFILL_DEADLINE: Duration = Duration::from_secs(60);
const REFILL_POLL: Duration = Duration::from_millis(20);

fn main() {
    berth_benches::daemon::main(run);
}

async fn run() -> BenchResult<()> {
    let starts = count("BERTH_BENCH_STARTS", 20);
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("berth");
    let templates = data.join("templates");
    std::fs::create_dir_all(&templates)?;
    std::fs::write(
        templates.join("pooled.toml"),
        "name = \"pooled\"\nwarm = 2\n",
    )?;
    std::fs::write(templates.join("plain.toml"), "name = \"plain\"\n")?;
    let daemon = Daemon::start(&data).await?;
    let mut client = Client::connect(daemon.addr, &daemon.key).await?;
    ladder(&mut client, starts).await?;

    let mut cold = Vec::with_capacity(starts);
    let mut warm = Vec::with_capacity(starts);
    let mut creates = Vec::with_capacity(starts);
    // Sample 0 of each warms caches; they alternate, so load drifts hit both alike.
    for n in 0..=starts {
        let name = format!("cold-{n}");
        let began = Instant::now();
        let created = create(&mut client, &name, "plain").await?;
        if created["state"] != "stopped" {
            return Err(format!("a box without a pool: {created}").into());
        }
        first_exec(&mut client, &name).await?;
        let took = began.elapsed();
        delete(&mut client, &name).await?;

        let name = format!("warm-{n}");
        let deadline = Instant::now() + REFILL_DEADLINE;
        let (create_took, total) = loop {
            let began = Instant::now();
            let created = create(&mut client, &name, "pooled").await?;
            let create_took = began.elapsed();
            if created["state"] == "running" {
                first_exec(&mut client, &name).await?;
                break (create_took, began.elapsed());
            }
            delete(&mut client, &name).await?;
            if Instant::now() > deadline {
                return Err("the warm pool never refilled".into());
            }
            tokio::time::sleep(REFILL_POLL).await;
        };
        delete(&mut client, &name).await?;
        if n > 0 {
            cold.push(took);
            warm.push(total);
            creates.push(create_took);
        }
    }
    daemon.stop().await?;

    let (c, w, k) = (
        Summary::of(&cold),
        Summary::of(&warm),
        Summary::of(&creates),
    );
    println!(
        "create → first exec, no pool (the exec boots): n={} p50 {} p99 {}",
        c.n,
        ms(c.p50),
        ms(c.p99)
    );
    println!(
        "create → first exec, warm pool (the create claims): n={} p50 {} p99 {}",
        w.n,
        ms(w.p50),
        ms(w.p99)
    );
    println!(
        "  ratio to no pool p50 {:.2}×  p99 {:.2}×",
        ratio(w.p50, c.p50),
        ratio(w.p99, c.p99)
    );
    println!(
        "create from the warm pool: p50 {} p99 {}  target ≤ 10 ms p50: {}",
        ms(k.p50),
        ms(k.p99),
        if k.p50 <= Duration::from_millis(10) {
            "met"
        } else {
            "MISSED"
        }
    );
    // Last, so the client's connection to the daemon is never left idle while VMs boot.
    if let Err(e) = berth_benches::vm::ladder::qemu_ladder(count("BERTH_BENCH_VM_ROUNDS", 5)).await
    {
        println!("qemu: not measured ({e})");
    }
    Ok(())
}

/// The rungs of one box: pause → resume, snapshot → resume (or why not), cold start, memory.
async fn ladder(client: &mut Client, starts: usize) -> BenchResult<()> {
    let (status, body) = client
        .call(
            Method::POST,
            "/v1/boxes",
            json!({"name": "ladder", "template": "plain", "stop_after_s": 0}),
        )
        .await?;
    expect(status, StatusCode::CREATED, "create", &body)?;
    verb(client, "ladder", "start").await?;
    let running = memory(client, "ladder").await?;
    let (mut resumes, mut resumed_execs, mut colds) = (Vec::new(), Vec::new(), Vec::new());
    let mut paused = None;
    for n in 0..=starts {
        verb(client, "ladder", "pause").await?;
        if paused.is_none() {
            paused = Some(memory(client, "ladder").await?);
        }
        let began = Instant::now();
        verb(client, "ladder", "resume").await?;
        let resume = began.elapsed();
        verb(client, "ladder", "pause").await?;
        let began = Instant::now();
        first_exec(client, "ladder").await?;
        let resumed_exec = began.elapsed();

        verb(client, "ladder", "stop").await?;
        let began = Instant::now();
        verb(client, "ladder", "start").await?;
        let cold = began.elapsed();
        if n > 0 {
            resumes.push(resume);
            resumed_execs.push(resumed_exec);
            colds.push(cold);
        }
    }
    let (status, refused) = client
        .call(Method::POST, "/v1/boxes/ladder/snapshot", Value::Null)
        .await?;
    verb(client, "ladder", "stop").await?;
    let stopped = memory(client, "ladder").await?;
    delete(client, "ladder").await?;

    let (r, e, c) = (
        Summary::of(&resumes),
        Summary::of(&resumed_execs),
        Summary::of(&colds),
    );
    println!(
        "pause → resume answered: n={} p50 {} p99 {}  goal ≤ 10 ms: {}",
        r.n,
        ms(r.p50),
        ms(r.p99),
        if r.p50 <= Duration::from_millis(10) {
            "met"
        } else {
            "MISSED"
        }
    );
    println!(
        "paused → first exec answered (auto_resume): p50 {} p99 {}",
        ms(e.p50),
        ms(e.p99)
    );
    println!(
        "cold start → ready (stopped → start answered): n={} p50 {} p99 {}",
        c.n,
        ms(c.p50),
        ms(c.p99)
    );
    println!(
        "  resume from pause against a cold start: p50 {:.3}×  p99 {:.3}×",
        ratio(r.p50, c.p50),
        ratio(r.p99, c.p99)
    );
    if status == StatusCode::OK {
        return Err("the sandbox snapshotted a box: this bench does not time that yet".into());
    }
    println!(
        "snapshot → resume: not measured on the sandbox ({status}: {})",
        refused["error"]["message"].as_str().unwrap_or("?")
    );
    let shown = |held: Option<u64>| match held {
        Some(bytes) => format!("{:.1} MiB", bytes as f64 / 1_048_576.0),
        None => "none".to_owned(),
    };
    println!(
        "host memory the box holds: running {}, paused {}, stopped {}",
        shown(running),
        shown(paused.flatten()),
        shown(stopped)
    );
    Ok(())
}

/// `POST /v1/boxes/{name}/{verb}`, expecting 200.
async fn verb(client: &mut Client, name: &str, verb: &str) -> BenchResult<()> {
    let (status, body) = client
        .call(
            Method::POST,
            &format!("/v1/boxes/{name}/{verb}"),
            Value::Null,
        )
        .await?;
    Ok(expect(status, StatusCode::OK, verb, &body)?)
}

/// The box view's `memory_bytes`.
async fn memory(client: &mut Client, name: &str) -> BenchResult<Option<u64>> {
    let (status, body) = client
        .call(Method::GET, &format!("/v1/boxes/{name}"), Value::Null)
        .await?;
    expect(status, StatusCode::OK, "get", &body)?;
    Ok(body["memory_bytes"].as_u64())
}

async fn create(client: &mut Client, name: &str, template: &str) -> BenchResult<Value> {
    let (status, body) = client
        .call(
            Method::POST,
            "/v1/boxes",
            json!({"name": name, "template": template}),
        )
        .await?;
    expect(status, StatusCode::CREATED, "create", &body)?;
    Ok(body)
}

async fn first_exec(client: &mut Client, name: &str) -> BenchResult<()> {
    let (status, body) = client
        .call(
            Method::POST,
            &format!("/v1/boxes/{name}/exec"),
            json!({"cmd": ["true"]}),
        )
        .await?;
    expect(status, StatusCode::OK, "first exec", &body)?;
    if body["exit_code"] != 0 {
        return Err(format!("first exec: {body}").into());
    }
    Ok(())
}

async fn delete(client: &mut Client, name: &str) -> BenchResult<()> {
    let (status, body) = client
        .call(Method::DELETE, &format!("/v1/boxes/{name}"), Value::Null)
        .await?;
    Ok(expect(status, StatusCode::NO_CONTENT, "delete", &body)?)
}
