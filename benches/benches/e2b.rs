//! The E2B layer's cost: `commands.run("true")`, `files.write` and `files.read` of 1 MiB
//! through the unmodified E2B Python SDK (berth's envd under `/e2b`) against the same work on
//! the same box through berth's own API, in alternating rounds of one Python process
//! (`benches/e2b/layer.py`; daemon in this process, sandbox runtime). Printed as medians and
//! the ratio e2b/berth (goal: at most 1.2). Needs what `make bench` builds, and the SDK venv
//! of `scripts/install-deps.sh --tests`. `BERTH_BENCH_E2B_ROUNDS` (default 5) and
//! `BERTH_BENCH_E2B_SAMPLES` (default 20) set the rounds and the samples per round.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use berth_benches::daemon::{count, BenchResult, Daemon};

fn main() {
    berth_benches::daemon::main(run);
}

async fn run() -> BenchResult<()> {
    let python = match berth_testkit::e2b_sdk::find() {
        Ok(python) => python,
        Err(why) => {
            println!("SKIPPED: the E2B layer bench: {why}");
            return Ok(());
        }
    };
    let rounds = count("BERTH_BENCH_E2B_ROUNDS", 5);
    let samples = count("BERTH_BENCH_E2B_SAMPLES", 20);
    let dir = tempfile::tempdir()?;
    let daemon = Daemon::start(&dir.path().join("berth")).await?;
    let url = format!("http://{}", daemon.addr);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("e2b/layer.py");
    let (python, script, key, url2) = (python, script, daemon.key.clone(), url.clone());
    let output = tokio::task::spawn_blocking(move || {
        Command::new(python)
            .arg(script)
            .env("E2B_API_URL", format!("{url2}/e2b"))
            .env("E2B_SANDBOX_URL", format!("{url2}/e2b"))
            .env("E2B_API_KEY", &key)
            .env("BERTH_URL", &url2)
            .env("BERTH_KEY", &key)
            .env("ROUNDS", rounds.to_string())
            .env("SAMPLES", samples.to_string())
            .output()
    })
    .await??;
    daemon.stop().await?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        return Err(format!(
            "layer.py failed ({}):\n{stdout}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        )
        .into());
    }
    let mut figures: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    for line in stdout.lines() {
        let mut words = line.rsplitn(3, ' ');
        let (Some(seconds), Some(side), Some(name)) = (words.next(), words.next(), words.next())
        else {
            continue;
        };
        let seconds: f64 = seconds.parse()?;
        let entry = figures.entry(name.to_owned()).or_default();
        match side {
            "e2b" => entry.0 = seconds,
            _ => entry.1 = seconds,
        }
    }
    println!("E2B layer against berth's own API (same box, same Python process; medians of {rounds}×{samples}):");
    for (name, (e2b, own)) in &figures {
        println!(
            "  {name}: e2b {:.2} ms, berth {:.2} ms, ratio {:.2} (goal ≤ 1.2)",
            e2b * 1e3,
            own * 1e3,
            e2b / own
        );
    }
    Ok(())
}
