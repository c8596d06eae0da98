//! VM boot and VM memory, the qemu backend against the bare machine:
//! - boot: `QemuRuntime::start` of a stopped box (its volume already made) until berth-init
//!   answers `info`, with berth-init's own phases from that answer, p50/p99, as a ratio to
//!   the floor: the same kernel, command line and QEMU machine booting a static `/init`
//!   that powers off at once, timed from QEMU's spawn to its exit (`berth_benches::vm::bare`).
//!   Floor and box boots alternate, so a busy host slows both alike.
//! - memory: what one running, idle VM costs the host beyond its guest RAM, with
//!   `BERTH_BENCH_VMS` (default 3) VMs up: PSS of QEMU + its channel bridge minus the guest
//!   RAM memfd's share (`berth_benches::vm::memory`), per VM, with TCG's translation cache
//!   apart; and the effect of TCG's `tb-size` on a bare guest (QEMU's default against the
//!   backend's 16 MiB).
//!
//! Needs qemu-system-x86_64, gcc with a static libc, a static
//! berth-init (`make init`) and the images (built on first use, from the Debian mirror).
//! `BERTH_BENCH_BOOTS` (default 10) sets the number of boots of each kind.

use std::time::{Duration, Instant};

use berth_benches::daemon::{count, BenchResult};
use berth_benches::stats::{ms, ratio, Summary};
use berth_benches::vm::bare::{BareGuest, MEMORY_MIB};
use berth_benches::vm::images::vm_images;
use berth_benches::vm::memory::ProcessMemory;
use berth_protocol::guest::BootPhase;
use berth_protocol::BoxId;
use berth_runtime::qemu::{QemuConfig, QemuRuntime};
use berth_runtime::{BootToken, BoxSpec, IdMap, Limits, Rootfs, Runtime};

const RATIO_TARGET: f64 = 1.3;
const OVERHEAD_TARGET_MIB: f64 = 20.0;
/// How long the VM sits idle before its memory is read a second time.
const IDLE: Duration = Duration::from_secs(5);

fn main() {
    berth_benches::daemon::main(run);
}

async fn run() -> BenchResult<()> {
    let boots = count("BERTH_BENCH_BOOTS", 10);
    let dir = tempfile::Builder::new().prefix("berth-vmb-").tempdir()?;
    let images = tokio::task::block_in_place(vm_images)?;
    let config = QemuConfig::new(&dir.path().join("data"), &images.kernel, &images.initramfs);
    let qemu_bin = config.qemu_bin.clone();
    let runtime = QemuRuntime::new(config).await?;
    let accel = runtime.accel();
    let bare = BareGuest::build(&dir.path().join("bare"), &qemu_bin, &images.kernel, accel)?;

    let mut spec = BoxSpec {
        id: BoxId::from_random([7; 20]),
        hostname: "vmboot".into(),
        rootfs: Rootfs::Image(images.rootfs.clone()),
        limits: Limits {
            memory_mib: MEMORY_MIB,
            ..Limits::default()
        },
        boot_token: BootToken::from_random([1; 32]),
        id_map: IdMap::for_slot(1).ok_or("no id slot 1")?,
        layers: Vec::new(),
        harness: None,
        egress: Default::default(),
        env: Default::default(),
        memory: None,
        services: Vec::new(),
        disk_mib: 64,
    };

    // Round 0 makes the box's volume and warms the page cache; it is not counted.
    let (mut floor, mut ready) = (Vec::new(), Vec::new());
    let mut phases: Vec<Vec<BootPhase>> = Vec::new();
    for n in 0..=boots {
        let bare_took = tokio::task::block_in_place(|| bare.boot_once())?;
        spec.boot_token = BootToken::from_random([n as u8 + 1; 32]);
        let t0 = Instant::now();
        let client = runtime.start(&spec).await?.client;
        let took = t0.elapsed();
        let info = client.info().await?;
        runtime.stop(&spec.id, Duration::from_secs(10)).await?;
        if n > 0 {
            floor.push(bare_took);
            ready.push(took);
            phases.push(info.phases);
        }
    }

    // Memory: `vms` running, idle VMs (this box and copies), so the pages of QEMU's binary
    // and libraries are shared as they are on a host with many boxes.
    let vms = count("BERTH_BENCH_VMS", 3);
    let mut specs = Vec::new();
    for n in 0..vms {
        let mut vm = spec.clone();
        vm.id = BoxId::from_random([100 + n as u8; 20]);
        vm.boot_token = BootToken::from_random([200 + n as u8; 32]);
        vm.id_map = IdMap::for_slot(2 + n as u32).ok_or("no id slot")?;
        runtime.start(&vm).await?;
        specs.push(vm);
    }
    let read = |runtime: &QemuRuntime| -> BenchResult<Vec<(ProcessMemory, ProcessMemory)>> {
        let mut all = Vec::new();
        for vm in &specs {
            let qemu = runtime.qemu_pid(&vm.id).ok_or("a VM's QEMU is gone")?;
            let bridge = runtime
                .bridge_pid(&vm.id)
                .ok_or("a VM's channel bridge is gone")?;
            all.push((ProcessMemory::of(qemu)?, ProcessMemory::of(bridge)?));
        }
        Ok(all)
    };
    let at_ready = read(&runtime)?;
    tokio::time::sleep(IDLE).await;
    let idle = read(&runtime)?;
    for vm in &specs {
        runtime.stop(&vm.id, Duration::from_secs(10)).await?;
        runtime.remove(&vm.id).await?;
    }
    runtime.remove(&spec.id).await?;

    // The bare guest idle, with QEMU's default TCG translation cache and with the backend's.
    let mut tb = Vec::new();
    for tb_size in [None, Some(16)] {
        let guest = bare.spawn_idle(tb_size)?;
        let pid = guest.child.id() as i32;
        // Up when the kernel has handed over to init (its console goes quiet): wait for
        // QEMU's translation cache to stop growing instead of a fixed sleep.
        let mut last = ProcessMemory::of(pid)?;
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let now = ProcessMemory::of(pid)?;
            if now.overhead_kib() <= last.overhead_kib() + 256 {
                last = now;
                break;
            }
            last = now;
        }
        tb.push((tb_size, last));
        drop(guest);
    }

    report(accel, &floor, &ready, &phases, at_ready, idle, &tb);
    Ok(())
}

fn report(
    accel: berth_runtime::qemu::Accel,
    floor: &[Duration],
    ready: &[Duration],
    phases: &[Vec<BootPhase>],
    at_ready: Vec<(ProcessMemory, ProcessMemory)>,
    idle: Vec<(ProcessMemory, ProcessMemory)>,
    tb: &[(Option<u32>, ProcessMemory)],
) {
    let (f, r) = (Summary::of(floor), Summary::of(ready));
    println!(
        "VM boot ({}, {} MiB guest RAM, {} boots each, interleaved)",
        accel.as_str(),
        MEMORY_MIB,
        r.n
    );
    println!(
        "  floor: bare kernel to a powering-off /init, QEMU spawn to exit: p50 {}  p99 {}",
        ms(f.p50),
        ms(f.p99)
    );
    println!(
        "  qemu backend: start until berth-init answers info:             p50 {}  p99 {}",
        ms(r.p50),
        ms(r.p99)
    );
    let p50_ratio = ratio(r.p50, f.p50);
    println!(
        "  ratio: p50 {:.2}x  p99 {:.2}x  (target <= {RATIO_TARGET}x: {})",
        p50_ratio,
        ratio(r.p99, f.p99),
        if p50_ratio <= RATIO_TARGET {
            "met"
        } else {
            "NOT met"
        }
    );
    println!("  berth-init's phases (p50 over the boots):");
    let names: Vec<String> = phases
        .first()
        .map(|p| p.iter().map(|ph| ph.name.clone()).collect())
        .unwrap_or_default();
    for name in names {
        let samples: Vec<Duration> = phases
            .iter()
            .filter_map(|p| p.iter().find(|ph| ph.name == name))
            .map(|ph| Duration::from_micros(ph.duration_us))
            .collect();
        if !samples.is_empty() {
            let s = Summary::of(&samples);
            println!("    {name:<10} p50 {}  p99 {}", ms(s.p50), ms(s.p99));
        }
    }

    println!(
        "Host memory per running VM ({} VMs up, {MEMORY_MIB} MiB guest RAM each; PSS, so shared \
         pages count once across them)",
        idle.len()
    );
    for (when, vms) in [("at ready", at_ready), ("idle 5 s", idle)] {
        let n = vms.len().max(1) as u64;
        let (q, v) = vms.into_iter().fold(
            (ProcessMemory::default(), ProcessMemory::default()),
            |(q, v), (a, b)| (q + a, v + b),
        );
        let total = q + v;
        let per_vm = |kib: u64| kib / n;
        let overhead_mib = per_vm(total.overhead_kib()) as f64 / 1024.0;
        let without_tcg_mib =
            per_vm(total.overhead_kib().saturating_sub(total.tcg_cache_kib)) as f64 / 1024.0;
        println!(
            "  {when}: beyond guest RAM {overhead_mib:.1} MiB per VM (QEMU {}, channel bridge \
             {}; of it TCG's translation cache {}, which KVM has not: {without_tcg_mib:.1} MiB \
             without it); guest RAM touched {} (target <= {OVERHEAD_TARGET_MIB} MiB: {})",
            mib(per_vm(q.overhead_kib())),
            mib(per_vm(v.overhead_kib())),
            mib(per_vm(total.tcg_cache_kib)),
            mib(per_vm(total.guest_pss_kib)),
            if overhead_mib <= OVERHEAD_TARGET_MIB {
                "met"
            } else {
                "NOT met"
            }
        );
    }
    for (tb_size, m) in tb {
        println!(
            "  bare guest, QEMU alone, tb-size {}: PSS {}, beyond guest RAM {}",
            tb_size.map_or("default".into(), |s| format!("{s} MiB")),
            mib(m.pss_kib),
            mib(m.overhead_kib())
        );
    }
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}
