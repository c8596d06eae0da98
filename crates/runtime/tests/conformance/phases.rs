//! What a start reports of its own steps (`Booted::phases`).

use std::time::Instant;

use berth_runtime::Limits;

use crate::common::Fixture;
use crate::GRACE;

/// A sandbox start names each of its host steps, in order, then berth-init's phases
/// (prefixed `init_`); the host steps tile the start, so they add up to no more than it took.
pub async fn a_sandbox_start_reports_its_steps_and_berth_inits(fx: &Fixture) {
    let spec = fx.spec(Limits::default());
    let started = Instant::now();
    let booted = fx.runtime.start(&spec).await.expect("start");
    let took = started.elapsed();
    let phases = booted.phases.0;
    eprintln!("start took {took:?}: {phases:?}");
    let (host, init): (Vec<_>, Vec<_>) = phases.iter().partition(|p| !p.name.starts_with("init_"));
    let host_names: Vec<_> = host.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        host_names,
        [
            "prepare",
            "rootfs",
            "volume_check",
            "loop_attach",
            "idmap_mount",
            "box_files",
            "bundle",
            "cgroup",
            "runc_run",
            "guest_ready",
        ]
    );
    let host_micros: u64 = host.iter().map(|p| p.micros).sum();
    assert!(
        host_micros <= took.as_micros() as u64,
        "{phases:?} in {took:?}"
    );
    let init_names: Vec<_> = init.iter().map(|p| p.name.as_str()).collect();
    for name in ["init_seal", "init_volume", "init_serve"] {
        assert!(init_names.contains(&name), "{init_names:?}");
    }
    let first_init = phases.iter().position(|p| p.name.starts_with("init_"));
    assert_eq!(
        first_init,
        Some(host.len()),
        "init phases come last: {phases:?}"
    );
    fx.runtime.stop(&spec.id, GRACE).await.expect("stop");
}
