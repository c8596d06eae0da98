//! The `desktop` template on the sandbox runtime (daemon in this process):
//!
//! - wake → desktop ready: `GET /v1/boxes/{name}/desktop` on a new, stopped box: the box
//!   started, Xvfb, XFCE and x11vnc up and XFCE drawn (the call answers once the services
//!   have settled). Also the box's own `ready_after_ms` (from its boot's start to the last
//!   desktop service ready). Floor: the same call on a box of a template with the same
//!   image and only the `xvfb` service (the bare X server start).
//! - wake from sleep → desktop ready: the same call on a paused desktop box.
//! - screenshot: `GET /v1/boxes/{name}/desktop/screenshot` of the running desktop (a PNG
//!   of 1024×768), back to back. Floor: `scrot` of the same screen timed inside the box.
//!
//! Needs root, runc, the Debian mirror once (the `desktop` image is built into the tests'
//! image cache, `$BERTH_TEST_IMAGE_DIR`, minutes the first time) and a static berth-init
//! (`make bench` builds it). `BERTH_BENCH_DESKTOP_STARTS` (default 5) and
//! `BERTH_BENCH_SCREENSHOTS` (default 30) set the sample counts.

use std::path::Path;
use std::time::{Duration, Instant};

use berth_benches::daemon::{count, BenchResult, Daemon};
use berth_benches::http::{expect, Client};
use berth_benches::stats::{ms, ratio, Summary};
use berth_server::images::BuiltImages;
use http::{Method, StatusCode};
use serde_json::{json, Value};

/// A template of the desktop's image with only its X server, as the builtin runs it.
const BARE_XVFB: &str = r#"name = "bare-xvfb"
base = "desktop"

[[services]]
name = "xvfb"
command = ["/bin/sh", "-c", "exec /usr/bin/Xvfb :0 -screen 0 1024x768x24 -dpi 96 -nolisten tcp"]
env = { DISPLAY = ":0" }
restart = "always"
ready = { command = ["xdpyinfo", "-display", ":0"] }
"#;

/// `scrot` in the box, timed there: nanoseconds on stdout.
const TIMED_SCROT: &str = "s=$(date +%s%N); scrot -o /tmp/floor.png; e=$(date +%s%N); \
    rm -f /tmp/floor.png; echo $((e - s))";

fn main() {
    berth_benches::daemon::main(run);
}

async fn run() -> BenchResult<()> {
    let starts = count("BERTH_BENCH_DESKTOP_STARTS", 5).max(1);
    let shots = count("BERTH_BENCH_SCREENSHOTS", 30).max(1);
    let dir = tempfile::tempdir()?;
    let data_dir = dir.path().join("berth");
    desktop_image(&data_dir)?;
    std::fs::create_dir_all(data_dir.join("templates"))?;
    std::fs::write(data_dir.join("templates/bare-xvfb.toml"), BARE_XVFB)?;

    let daemon = Daemon::start(&data_dir).await?;
    let mut client = Client::connect(daemon.addr, &daemon.key).await?;

    let mut desktop = Vec::new();
    let mut inside = Vec::new();
    let mut bare = Vec::new();
    for i in 0..starts {
        // Alternating, so a load that comes and goes weighs on both alike.
        let (took, ready_after) = cold_desktop(&mut client, &format!("d{i}"), "desktop").await?;
        desktop.push(took);
        inside.extend(ready_after);
        bare.push(
            cold_desktop(&mut client, &format!("x{i}"), "bare-xvfb")
                .await?
                .0,
        );
    }

    // The last desktop box, running: screenshots, then the same from sleep.
    let name = format!("d{}", starts - 1);
    let mut screenshot = Vec::new();
    let mut scrot = Vec::new();
    for _ in 0..shots {
        let started = Instant::now();
        let (status, png) = client
            .get_bytes(&format!("/v1/boxes/{name}/desktop/screenshot"))
            .await?;
        screenshot.push(started.elapsed());
        if status != StatusCode::OK || !png.starts_with(b"\x89PNG") {
            return Err(format!("screenshot: {status}, {} bytes", png.len()).into());
        }
        scrot.push(in_box_scrot(&mut client, &name).await?);
    }
    let mut from_sleep = Vec::new();
    for _ in 0..starts {
        let (status, body) = client
            .call(
                Method::POST,
                &format!("/v1/boxes/{name}/pause"),
                Value::Null,
            )
            .await?;
        expect(status, StatusCode::OK, "pause", &body)?;
        let started = Instant::now();
        desktop_ready(&mut client, &name).await?;
        from_sleep.push(started.elapsed());
    }

    let (desktop, bare) = (Summary::of(&desktop), Summary::of(&bare));
    println!(
        "wake → desktop ready (a new box, XFCE drawn): n={} p50 {} p99 {}",
        desktop.n,
        ms(desktop.p50),
        ms(desktop.p99)
    );
    println!(
        "  floor (the same image, only its Xvfb): p50 {} p99 {}",
        ms(bare.p50),
        ms(bare.p99)
    );
    println!(
        "  ratio p50 {:.2}×  p99 {:.2}×",
        ratio(desktop.p50, bare.p50),
        ratio(desktop.p99, bare.p99)
    );
    if !inside.is_empty() {
        let inside = Summary::of(&inside);
        println!(
            "  the box's own ready_after_ms (boot start → last desktop service ready): p50 {} p99 {}",
            ms(inside.p50),
            ms(inside.p99)
        );
    }
    let from_sleep = Summary::of(&from_sleep);
    println!(
        "wake from sleep (paused) → desktop ready: n={} p50 {} p99 {}",
        from_sleep.n,
        ms(from_sleep.p50),
        ms(from_sleep.p99)
    );
    let (screenshot, scrot) = (Summary::of(&screenshot), Summary::of(&scrot));
    println!(
        "screenshot (1024×768 PNG through the API): n={} p50 {} p99 {}",
        screenshot.n,
        ms(screenshot.p50),
        ms(screenshot.p99)
    );
    println!(
        "  floor (scrot timed inside the box): p50 {} p99 {}",
        ms(scrot.p50),
        ms(scrot.p99)
    );
    println!(
        "  ratio p50 {:.2}×  p99 {:.2}×",
        ratio(screenshot.p50, scrot.p50),
        ratio(screenshot.p99, scrot.p99)
    );
    daemon.stop().await?;
    Ok(())
}

/// The `desktop` image, built into (or found in) the tests' image cache, and recorded in
/// the data dir as `berth image build --template desktop` records it.
fn desktop_image(data_dir: &Path) -> BenchResult<()> {
    use berth_image::{rootfs_desktop, ImageStore, TerminalProgress};
    let cache = berth_testkit::image_cache::dir();
    let image = rootfs_desktop(&ImageStore::new(&cache), &TerminalProgress::new())?;
    let mut built = BuiltImages::default();
    built.rootfs.insert("desktop".into(), image.path);
    built.save(data_dir)?;
    Ok(())
}

/// Creates a box of `template` and times its first desktop call (which starts it); answers
/// that time and the box's own `ready_after_ms`.
async fn cold_desktop(
    client: &mut Client,
    name: &str,
    template: &str,
) -> BenchResult<(Duration, Option<Duration>)> {
    let (status, body) = client
        .call(
            Method::POST,
            "/v1/boxes",
            json!({"name": name, "template": template}),
        )
        .await?;
    expect(status, StatusCode::CREATED, "create", &body)?;
    let started = Instant::now();
    let status = desktop_ready(client, name).await?;
    let took = started.elapsed();
    let ready_after = status["ready_after_ms"].as_u64().map(Duration::from_millis);
    Ok((took, ready_after))
}

/// `GET …/desktop`, which wakes the box and answers once its services have settled.
async fn desktop_ready(client: &mut Client, name: &str) -> BenchResult<Value> {
    let (status, body) = client
        .call(
            Method::GET,
            &format!("/v1/boxes/{name}/desktop"),
            Value::Null,
        )
        .await?;
    expect(status, StatusCode::OK, "desktop", &body)?;
    if body["ready"] != true {
        return Err(format!("box {name}'s desktop is not ready: {body}").into());
    }
    Ok(body)
}

async fn in_box_scrot(client: &mut Client, name: &str) -> BenchResult<Duration> {
    let (status, body) = client
        .call(
            Method::POST,
            &format!("/v1/boxes/{name}/exec"),
            json!({"cmd": ["sh", "-c", TIMED_SCROT], "env": {"DISPLAY": ":0"}}),
        )
        .await?;
    expect(status, StatusCode::OK, "exec scrot", &body)?;
    let nanos: u64 = body["stdout"]
        .as_str()
        .and_then(|s| s.trim().parse().ok())
        .ok_or_else(|| format!("scrot in the box: {body}"))?;
    Ok(Duration::from_nanos(nanos))
}
