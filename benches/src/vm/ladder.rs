//! The sleep ladder of one `qemu` box, on the runtime itself (the images a daemon would
//! boot, from the test image store): pause → resume, snapshot → restore, and a cold start →
//! ready of the same box, p50/p99; the host memory it holds running, paused and
//! snapshotted, and what its snapshot takes on disk. Each restore is followed by an exec,
//! so the figure is "answering again", not "QEMU started".

use std::time::{Duration, Instant};

use berth_protocol::BoxId;
use berth_runtime::qemu::{QemuConfig, QemuRuntime};
use berth_runtime::{BootToken, BoxSpec, IdMap, Limits, Rootfs, Runtime};

use crate::daemon::BenchResult;
use crate::phases::exec_true;
use crate::stats::{ms, ratio, Summary};
use crate::vm::images::vm_images;

const MEMORY_MIB: u64 = 256;
const GRACE: Duration = Duration::from_secs(10);

/// Runs `samples` rounds (plus one unmeasured) and prints the figures.
pub async fn qemu_ladder(samples: usize) -> BenchResult<()> {
    let dir = tempfile::Builder::new().prefix("berth-vms-").tempdir()?;
    let images = tokio::task::block_in_place(vm_images)?;
    let config = QemuConfig::new(&dir.path().join("data"), &images.kernel, &images.initramfs);
    let runtime = QemuRuntime::new(config).await?;
    let mut spec = BoxSpec {
        id: BoxId::from_random([9; 20]),
        hostname: "ladder".into(),
        rootfs: Rootfs::Image(images.rootfs.clone()),
        limits: Limits {
            memory_mib: MEMORY_MIB,
            ..Limits::default()
        },
        boot_token: BootToken::from_random([1; 32]),
        id_map: IdMap::for_slot(3).ok_or("no id slot 3")?,
        layers: Vec::new(),
        harness: None,
        egress: Default::default(),
        env: Default::default(),
        memory: None,
        services: Vec::new(),
        disk_mib: 64,
    };
    let result = rounds(&runtime, &mut spec, samples).await;
    // Whatever happened, nothing of the box outlives the bench.
    let _ = runtime.remove(&spec.id).await;
    result
}

async fn rounds(runtime: &QemuRuntime, spec: &mut BoxSpec, samples: usize) -> BenchResult<()> {
    let (mut resumes, mut restores, mut colds) = (Vec::new(), Vec::new(), Vec::new());
    let mut held = Held::default();
    let mut token_seed = 2u8;
    let mut next_token = |spec: &mut BoxSpec| -> BootToken {
        token_seed = token_seed.wrapping_add(1);
        let old = spec.boot_token.clone();
        spec.boot_token = BootToken::from_random([token_seed; 32]);
        old
    };
    let mut client = runtime.start(spec).await?.client;
    for n in 0..=samples {
        exec_true(&client).await?;
        held.running
            .get_or_insert(runtime.memory_held(&spec.id).await?);

        runtime.pause(&spec.id).await?;
        held.paused
            .get_or_insert(runtime.memory_held(&spec.id).await?);
        let began = Instant::now();
        runtime.resume(&spec.id).await?;
        exec_true(&client).await?;
        let resume = began.elapsed();

        runtime.snapshot(&spec.id).await?;
        held.snapshotted
            .get_or_insert(runtime.memory_held(&spec.id).await?);
        held.on_disk
            .get_or_insert(runtime.snapshot_size(&spec.id).await?);
        let old = next_token(spec);
        let began = Instant::now();
        client = runtime.restore(spec, &old).await?.client;
        exec_true(&client).await?;
        let restore = began.elapsed();

        runtime.stop(&spec.id, GRACE).await?;
        next_token(spec);
        let began = Instant::now();
        client = runtime.start(spec).await?.client;
        exec_true(&client).await?;
        let cold = began.elapsed();
        if n > 0 {
            resumes.push(resume);
            restores.push(restore);
            colds.push(cold);
        }
    }
    runtime.stop(&spec.id, GRACE).await?;

    let (p, s, c) = (
        Summary::of(&resumes),
        Summary::of(&restores),
        Summary::of(&colds),
    );
    println!(
        "qemu ({} MiB guest, accelerator {}), each to an answered exec:",
        MEMORY_MIB,
        runtime.accel().as_str()
    );
    println!(
        "  pause → resume: n={} p50 {} p99 {}",
        p.n,
        ms(p.p50),
        ms(p.p99)
    );
    println!(
        "  snapshot → restore: n={} p50 {} p99 {}",
        s.n,
        ms(s.p50),
        ms(s.p99)
    );
    println!(
        "  cold start → ready: n={} p50 {} p99 {}",
        c.n,
        ms(c.p50),
        ms(c.p99)
    );
    println!(
        "  restore from a snapshot against a cold start: p50 {:.3}×  p99 {:.3}×  goal < 1: {}",
        ratio(s.p50, c.p50),
        ratio(s.p99, c.p99),
        if s.p50 < c.p50 { "met" } else { "MISSED" }
    );
    println!(
        "  host memory the box holds: running {}, paused {}, snapshotted {} (its snapshot: {} on disk)",
        mib(held.running.flatten()),
        mib(held.paused.flatten()),
        mib(held.snapshotted.flatten()),
        mib(held.on_disk.flatten()),
    );
    Ok(())
}

/// The first reading of each (`None` inside: the runtime measured nothing).
#[derive(Default)]
struct Held {
    running: Option<Option<u64>>,
    paused: Option<Option<u64>>,
    snapshotted: Option<Option<u64>>,
    on_disk: Option<Option<u64>>,
}

fn mib(bytes: Option<u64>) -> String {
    match bytes {
        Some(bytes) => format!("{:.1} MiB", bytes as f64 / 1_048_576.0),
        None => "none".to_owned(),
    }
}
