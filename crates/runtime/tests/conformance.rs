//! The conformance suite: what every `Runtime` backend must do. Each check is written once
//! against a [`common::Fixture`] (`&dyn Runtime` plus the backend's host-side probes) and
//! instantiated per backend by [`conformance!`]: `sandbox::<check>` (runc on the host
//! rootfs), `sandbox_image::<check>` (runc on the `minimal` rootfs image the VMs boot),
//! `qemu::<check>` (real microVMs under KVM or TCG) and `firecracker::<check>` (microVMs
//! under KVM, the test kernel as a `vmlinux`). Checks that only mean something for
//! one backend (host uid ranges, capabilities, planted socket links) are listed for that
//! backend alone. Every test has its own data dir and a guard that kills everything it
//! started, even when it panics.
//!
//! The sandbox needs root, an OCI runtime and a built berth-init (`make init`); qemu needs
//! `qemu-system-x86_64`, berth-init (also the host's channel bridge) and the test images
//! (`common::images`); firecracker needs a `firecracker` binary (`$BERTH_FIRECRACKER` or
//! `PATH`), the test images and a KVM that runs guests. A test whose backend is missing
//! skips with the reason (`berth_testkit::skip`, the part named after the backend) and
//! returns; `BERTH_REQUIRE=<backend>` makes that a failure.

#[allow(dead_code)]
mod common;

#[path = "conformance/egress.rs"]
mod egress;
#[path = "conformance/exit.rs"]
mod exit;
#[path = "conformance/host.rs"]
mod host;
#[path = "conformance/image.rs"]
mod image;
#[path = "conformance/isolation.rs"]
mod isolation;
#[path = "conformance/lifecycle.rs"]
mod lifecycle;
#[path = "conformance/limits.rs"]
mod limits;
#[path = "conformance/phases.rs"]
mod phases;
#[path = "conformance/snapshot.rs"]
mod snapshot;
#[path = "conformance/storage.rs"]
mod storage;
#[path = "conformance/token.rs"]
mod token;

use std::time::Duration;

/// How long `stop` may wait for a box to end on its own.
pub const GRACE: Duration = Duration::from_secs(10);

/// One `#[tokio::test]` per listed check, in a module named after the backend: the test
/// builds that backend's fixture (or skips) and runs `<module>::<check>(&fixture)`.
macro_rules! conformance {
    ($backend:ident => $variant:ident $(.$adapt:ident)?: $($module:ident::$check:ident),* $(,)?) => {
        mod $backend {
            async fn fixture() -> Option<crate::common::Fixture> {
                let backend = crate::common::Backend::$variant;
                let fx = crate::common::Fixture::new(backend).await?;
                $(let fx = fx.$adapt().await?;)?
                Some(fx)
            }
            $(
                #[tokio::test(flavor = "multi_thread")]
                async fn $check() {
                    let Some(fx) = fixture().await else {
                        return;
                    };
                    crate::$module::$check(&fx).await;
                }
            )*
        }
    };
}

/// [`conformance!`] for a backend with every check that applies to all backends, plus
/// `$extra` checks of its own.
macro_rules! every_backend_checks {
    ($backend:ident => $variant:ident $(.$adapt:ident)? $(, $extra:ident::$extra_check:ident)* $(,)?) => {
        conformance!($backend => $variant $(.$adapt)?:
            lifecycle::boots_and_answers_as_user_1001_with_berth_init_as_pid_1,
            storage::files_persist_across_restart_and_old_token_is_refused,
            isolation::boxes_are_isolated_from_each_other_and_the_host,
            isolation::only_loopback_exists,
            isolation::box_user_kernel_surface_is_small,
            limits::fork_bomb_is_contained,
            limits::process_count_is_capped,
            limits::box_processes_cannot_lift_their_pids_limit,
            limits::memory_hog_is_killed_and_the_box_survives,
            limits::the_host_reaches_a_box_through_its_fork_bomb,
            limits::the_host_reaches_a_box_through_its_memory_hogs,
            limits::berth_init_is_outside_the_box_cgroup_and_the_oom_killers_reach,
            limits::a_full_volume_leaves_the_box_working,
            lifecycle::stop_leaves_nothing_behind,
            lifecycle::pause_freezes_until_resume,
            lifecycle::box_that_shut_itself_down_is_stopped_and_restarts,
            lifecycle::failed_start_leaves_nothing_running,
            storage::layers_are_read_only_for_box_root_and_readable_by_the_user,
            storage::agent_state_dir_is_root_only_and_persists_and_harness_config_is_private,
            storage::volume_is_disk_mib_and_grows_at_the_next_start,
            storage::files_keep_owners_and_modes_across_stop_and_start,
            egress::egress_leaves_only_through_the_channel,
            token::rotate_token_refuses_the_old_token_and_sets_the_clock,
            snapshot::memory_held_is_measured_while_running_and_none_once_stopped,
            $($extra::$extra_check,)*
        );
    };
}

// Only a container shares the host kernel and run dir (conformance/host.rs says why).
every_backend_checks!(sandbox => Sandbox,
    host::box_root_holds_no_power_over_the_host_kernel,
    host::host_does_not_follow_a_planted_socket_link,
    storage::volume_is_released_at_stop_and_after_a_daemon_crash,
    storage::volume_grows_online_while_the_box_runs,
    storage::a_directory_volume_is_migrated_at_the_next_start,
    exit::wait_exit_tells_a_stop_a_shutdown_and_a_kill_apart,
    snapshot::snapshot_is_refused_with_the_reason_where_unsupported,
    phases::a_sandbox_start_reports_its_steps_and_berth_inits,
);

// The sandbox on the `minimal` rootfs image the VMs boot (`/` read-only, idmapped): every
// check again, and what only an image rootfs has.
every_backend_checks!(sandbox_image => Sandbox.on_rootfs_image,
    image::root_is_read_only_even_for_box_root_and_owned_by_box_root,
    image::stop_releases_the_rootfs_mount_and_its_loop_device,
    image::a_mount_point_missing_in_the_image_fails_the_start_naming_it,
    exit::wait_exit_tells_a_stop_a_shutdown_and_a_kill_apart,
);

every_backend_checks!(qemu => Qemu,
    snapshot::a_snapshot_keeps_processes_and_memory_and_a_restore_hands_over_a_new_token,
);

// Skipped with the reason where this host has no `firecracker` binary or no KVM that runs
// a guest (crates/testkit's part `firecracker`).
every_backend_checks!(firecracker => Firecracker);
