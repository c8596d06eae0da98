//! Wake on message and message ingress, through the daemon's API (in-process server):
//! - wake latency: a stopped box with the echo harness; `POST /v1/boxes/{name}/messages`
//!   → the first event the harness itself prints, read on an SSE stream opened before the
//!   post (and → the turn's `result`), p50/p99, as a ratio to the cold-start floor (the
//!   OCI runtime's `run` of a box's own bundle with `/usr/bin/true`);
//! - sustained ingress: `POST …/messages` answered `202` (committed and fsync'd) for a few
//!   seconds on one keep-alive connection, and on four at once, as messages/s.
//!
//! Needs root, runc, a static berth-init and the echo harness (`make bench` builds them).
//! `BERTH_BENCH_WAKES` (default 20) and `BERTH_BENCH_INGRESS_S` (default 5) set the sizes.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use berth_benches::daemon::{count, BenchResult, Daemon, OCI_RUNTIME};
use berth_benches::floor::TrivialBundle;
use berth_benches::http::{expect, Client};
use berth_benches::sse::EventStream;
use berth_benches::stats::{ms, ratio, Summary};
use http::{Method, StatusCode};
use serde_json::json;

const BOX: &str = "waker";
/// Events that are the host's or berth-init's, not the harness's own output.
const NOT_THE_HARNESS: [&str; 3] = ["state", "harness_start", "harness_exit"];
const WAKE_TARGET: Duration = Duration::from_millis(100);

fn main() {
    berth_benches::daemon::main(run);
}

async fn run() -> BenchResult<()> {
    let wakes = count("BERTH_BENCH_WAKES", 20);
    let ingress_for = Duration::from_secs(count("BERTH_BENCH_INGRESS_S", 5) as u64);
    let dir = tempfile::tempdir()?;

    let bundle = TrivialBundle::new(&dir.path().join("floor"), OCI_RUNTIME).await?;
    bundle.run_once(0)?; // warm the page cache
    let floor: Vec<Duration> = (1..=wakes)
        .map(|n| bundle.run_once(n))
        .collect::<Result<_, _>>()?;

    let daemon = Daemon::start(&dir.path().join("berth")).await?;
    let (addr, key) = (daemon.addr, daemon.key.clone());
    let mut client = Client::connect(addr, &key).await?;
    let (status, body) = client
        .call(
            Method::POST,
            "/v1/boxes",
            json!({"name": BOX, "template": "echo"}),
        )
        .await?;
    expect(status, StatusCode::CREATED, "create", &body)?;

    // Run 0 warms caches and creates the harness's session; it is not counted.
    let mut first_event = Vec::with_capacity(wakes);
    let mut answered = Vec::with_capacity(wakes);
    for n in 0..=wakes {
        let (status, body) = client
            .call(
                Method::POST,
                &format!("/v1/boxes/{BOX}/stop"),
                serde_json::Value::Null,
            )
            .await?;
        expect(status, StatusCode::OK, "stop", &body)?;
        let (to_first, to_result) = wake_once(&mut client, addr, &key, n).await?;
        if n > 0 {
            first_event.push(to_first);
            answered.push(to_result);
        }
    }

    let one = ingress(addr, &key, 1, ingress_for).await?;
    let four = ingress(addr, &key, 4, ingress_for).await?;

    daemon.stop().await?;

    let f = Summary::of(&floor);
    let w = Summary::of(&first_event);
    let r = Summary::of(&answered);
    println!(
        "wake (stopped box: message posted → first harness event on SSE): n={} p50 {} p99 {}",
        w.n,
        ms(w.p50),
        ms(w.p99)
    );
    println!(
        "  floor (runc run of the box's bundle running /usr/bin/true): p50 {} p99 {}",
        ms(f.p50),
        ms(f.p99)
    );
    println!(
        "  ratio p50 {:.2}×  p99 {:.2}×",
        ratio(w.p50, f.p50),
        ratio(w.p99, f.p99)
    );
    println!(
        "  wake p50 {}  target ≤ {} ms: {}",
        ms(w.p50),
        WAKE_TARGET.as_millis(),
        if w.p50 <= WAKE_TARGET {
            "met"
        } else {
            "MISSED"
        }
    );
    println!(
        "wake → the turn's result event: n={} p50 {} p99 {}  (ratio p50 {:.2}× the floor)",
        r.n,
        ms(r.p50),
        ms(r.p99),
        ratio(r.p50, f.p50)
    );
    println!(
        "ingress (POST …/messages answered 202, fsync'd), {:.0} s each:",
        ingress_for.as_secs_f64()
    );
    println!("  1 connection:  {one:.0} messages/s");
    println!("  4 connections: {four:.0} messages/s");
    Ok(())
}

/// One wake: the stream opened on the stopped box, then the post; returns the time to the
/// first event the harness printed and to the turn's `result`.
async fn wake_once(
    client: &mut Client,
    addr: SocketAddr,
    key: &str,
    n: usize,
) -> BenchResult<(Duration, Duration)> {
    let after = last_seq(client).await?;
    let mut events =
        EventStream::open(addr, key, &format!("/v1/boxes/{BOX}/events?after={after}")).await?;
    let content = format!("wake {n}");
    let started = Instant::now();
    let (status, body) = client
        .call(
            Method::POST,
            &format!("/v1/boxes/{BOX}/messages"),
            json!({"content": content}),
        )
        .await?;
    expect(status, StatusCode::ACCEPTED, "post", &body)?;
    let mut first = None;
    let mut ours = false;
    let deadline = Duration::from_secs(30);
    loop {
        let event = tokio::time::timeout(deadline, events.next())
            .await
            .map_err(|_| format!("wake {n}: no result within {deadline:?}"))??;
        if first.is_none() && !NOT_THE_HARNESS.contains(&event.kind.as_str()) {
            first = Some(started.elapsed());
        }
        match event.kind.as_str() {
            "user" if event.data["data"]["message"]["content"] == content.as_str() => ours = true,
            "result" if ours => {
                let done = started.elapsed();
                return Ok((first.unwrap_or(done), done));
            }
            "harness_failed" => {
                return Err(format!("wake {n}: harness failed: {}", event.data).into())
            }
            _ => {}
        }
    }
}

/// The newest stored event seq, from the `wait=false` pages.
async fn last_seq(client: &mut Client) -> BenchResult<u64> {
    let mut after = 0;
    loop {
        let (status, page) = client
            .call(
                Method::GET,
                &format!("/v1/boxes/{BOX}/events?after={after}&wait=false"),
                serde_json::Value::Null,
            )
            .await?;
        expect(status, StatusCode::OK, "event page", &page)?;
        let next = page["next_after"].as_u64().unwrap_or(after);
        let empty = page["events"].as_array().is_none_or(|e| e.is_empty());
        if empty || next <= after {
            return Ok(after);
        }
        after = next;
    }
}

/// Messages accepted per second over `connections` keep-alive connections for `span`.
async fn ingress(
    addr: SocketAddr,
    key: &str,
    connections: usize,
    span: Duration,
) -> BenchResult<f64> {
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..connections {
        let key = key.to_string();
        tasks.push(tokio::spawn(async move {
            let mut client = Client::connect(addr, &key).await?;
            let mut accepted = 0u64;
            while started.elapsed() < span {
                let (status, body) = client
                    .call(
                        Method::POST,
                        &format!("/v1/boxes/{BOX}/messages"),
                        json!({"content": format!("ingress {c} {accepted}")}),
                    )
                    .await?;
                if status != StatusCode::ACCEPTED {
                    return Err(std::io::Error::other(format!("post: {status} {body}")));
                }
                accepted += 1;
            }
            Ok::<u64, std::io::Error>(accepted)
        }));
    }
    let mut total = 0;
    for task in tasks {
        total += task.await??;
    }
    Ok(total as f64 / started.elapsed().as_secs_f64())
}
