//! The cold start step by step: `SandboxRuntime::start` of a new box driven directly (no
//! daemon), its `Booted::phases` (the host's steps, then berth-init's as `init_*`), and the
//! first exec after it, collected over many starts and printed as a table of medians.

use std::path::Path;
use std::time::{Duration, Instant};

use berth_protocol::guest::{BoxUser, ExecFrame, ExecRequest};
use berth_protocol::BoxId;
use berth_runtime::sandbox::{SandboxConfig, SandboxRuntime};
use berth_runtime::{BootToken, BoxSpec, GuestClient, IdMap, Limits, Rootfs, Runtime};

use crate::daemon::BenchResult;
use crate::stats::{ms, Summary};

/// A `host`-rootfs box like the daemon's default template, with id number `n` and the
/// host id range `slot` (the bench's own boxes keep off the ranges the daemon hands out).
pub fn box_spec(n: u8, slot: u32) -> BenchResult<BoxSpec> {
    Ok(BoxSpec {
        id: BoxId::from_random([n; 20]),
        hostname: format!("bench-{n}"),
        rootfs: Rootfs::Host,
        limits: Limits::default(),
        boot_token: BootToken::from_random([n; 32]),
        id_map: IdMap::for_slot(slot).ok_or("no id range")?,
        layers: Vec::new(),
        harness: None,
        egress: Default::default(),
        env: Default::default(),
        memory: None,
        services: Vec::new(),
        disk_mib: berth_runtime::DEFAULT_DISK_MIB,
    })
}

/// Each start's steps, in the order they ran, plus its whole time, the first exec and a
/// second one.
#[derive(Debug, Default)]
pub struct PhaseTable {
    runs: Vec<Vec<(String, Duration)>>,
}

impl PhaseTable {
    /// `starts` cold starts of a new box each (its volume made on the way, as a create's
    /// first exec does), after one that warms the caches, each followed by an exec of
    /// `true` and the box's removal.
    pub async fn sample(data_dir: &Path, starts: usize) -> BenchResult<PhaseTable> {
        let sandbox = SandboxRuntime::new(SandboxConfig {
            data_dir: data_dir.to_path_buf(),
            oci_runtime: crate::daemon::OCI_RUNTIME.into(),
            init_bin: berth_runtime::init_binary()?,
        })?;
        let mut table = PhaseTable::default();
        for n in 0..=starts {
            let spec = box_spec(u8::try_from(n % 200)?, IdMap::SLOTS - 2)?;
            let started = Instant::now();
            let booted = sandbox.start(&spec).await?;
            let start = started.elapsed();
            let exec_started = Instant::now();
            exec_true(&booted.client).await?;
            let exec = exec_started.elapsed();
            // The same again on the running box: what of the first was its being first.
            let again_started = Instant::now();
            exec_true(&booted.client).await?;
            let again = again_started.elapsed();
            sandbox.remove(&spec.id).await?;
            if n == 0 {
                continue;
            }
            let mut run: Vec<(String, Duration)> = booted
                .phases
                .0
                .into_iter()
                .map(|p| (p.name, Duration::from_micros(p.micros)))
                .collect();
            run.push(("(start, whole)".into(), start));
            run.push(("first_exec".into(), exec));
            run.push(("(start + first exec)".into(), start + exec));
            run.push(("second_exec".into(), again));
            table.runs.push(run);
        }
        Ok(table)
    }

    /// One line per step: p50 and p99 over the starts, in the order of the first start.
    pub fn print(&self) {
        let Some(first) = self.runs.first() else {
            return;
        };
        println!(
            "cold start by step (SandboxRuntime::start of a new box, no daemon; n={}; init_* run inside guest_ready):",
            self.runs.len()
        );
        for (name, _) in first {
            let samples: Vec<Duration> = self
                .runs
                .iter()
                .filter_map(|run| run.iter().find(|(n, _)| n == name).map(|(_, d)| *d))
                .collect();
            let s = Summary::of(&samples);
            println!("  {name:<22} p50 {:>10}  p99 {:>10}", ms(s.p50), ms(s.p99));
        }
    }
}

/// An exec of `true` as the box user, until its exit.
pub async fn exec_true(client: &GuestClient) -> BenchResult<()> {
    let request = ExecRequest {
        argv: vec!["true".into()],
        user: BoxUser::User,
        ..Default::default()
    };
    let mut stream = client.exec(&request).await?;
    while let Some(frame) = stream.next_frame().await? {
        match frame {
            ExecFrame::Exit { code: Some(0), .. } => return Ok(()),
            ExecFrame::Exit { .. } | ExecFrame::Error { .. } => {
                return Err(format!("exec true in the box: {frame:?}").into())
            }
            _ => {}
        }
    }
    Err("exec true in the box: no exit".into())
}
