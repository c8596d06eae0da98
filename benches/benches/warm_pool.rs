//! Create → first exec answered of a `sandbox` box from a template with a warm pool (the
//! create claims a booted box) against the same box from a template without one (the exec
//! boots it), printed as p50/p99 in one run; and the create call alone from the pool, whose
//! target is ≤ 10 ms p50.
//!
//! The two templates differ only in `warm`. A pool sample is taken once a create claims (a
//! create answered `stopped` found the pool empty: it is deleted and tried again, which is
//! how the bench waits for the refill). Needs root, runc and a static berth-init.
//! `BERTH_BENCH_STARTS` sets the sample count.

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
    Ok(())
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
