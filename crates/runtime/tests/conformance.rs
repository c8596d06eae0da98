//! The conformance suite: what every `Runtime` backend must do. Each check is written once
//! against a [`common::Fixture`] (`&dyn Runtime` plus the backend's host-side probes) and
//! instantiated per backend by [`conformance!`]: `sandbox::<check>` (runc) and
//! `qemu::<check>` (real microVMs under KVM or TCG). Checks that only mean something for
//! one backend (host uid ranges, capabilities, planted socket links) are listed for that
//! backend alone. Every test has its own data dir and a guard that kills everything it
//! started, even when it panics.
//!
//! The sandbox needs root, an OCI runtime and a built berth-init (`make init`); qemu needs
//! `qemu-system-x86_64`, `vhost-device-vsock`, berth-init and the test images
//! (`common::images`). A test whose backend is missing prints `SKIPPED: <reason>` and
//! returns.

#[allow(dead_code)]
mod common;

#[path = "conformance/egress.rs"]
mod egress;
#[path = "conformance/host.rs"]
mod host;
#[path = "conformance/isolation.rs"]
mod isolation;
#[path = "conformance/lifecycle.rs"]
mod lifecycle;
#[path = "conformance/limits.rs"]
mod limits;
#[path = "conformance/storage.rs"]
mod storage;

use std::time::Duration;

/// How long `stop` may wait for a box to end on its own.
pub const GRACE: Duration = Duration::from_secs(10);

/// One `#[tokio::test]` per listed check, in a module named after the backend: the test
/// builds that backend's fixture (or skips) and runs `<module>::<check>(&fixture)`.
macro_rules! conformance {
    ($backend:ident => $variant:ident: $($module:ident::$check:ident),* $(,)?) => {
        mod $backend {
            $(
                #[tokio::test(flavor = "multi_thread")]
                async fn $check() {
                    let backend = crate::common::Backend::$variant;
                    let Some(fx) = crate::common::Fixture::new(backend, stringify!($check)).await
                    else {
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
    ($backend:ident => $variant:ident $(, $extra:ident::$extra_check:ident)* $(,)?) => {
        conformance!($backend => $variant:
            lifecycle::boots_and_answers_as_user_1001_with_berth_init_as_pid_1,
            storage::files_persist_across_restart_and_old_token_is_refused,
            isolation::boxes_are_isolated_from_each_other_and_the_host,
            isolation::only_loopback_exists,
            limits::fork_bomb_is_contained,
            limits::memory_hog_is_killed_and_the_box_survives,
            lifecycle::stop_leaves_nothing_behind,
            lifecycle::pause_freezes_until_resume,
            lifecycle::box_that_shut_itself_down_is_stopped_and_restarts,
            lifecycle::failed_start_leaves_nothing_running,
            storage::layers_are_read_only_for_box_root_and_readable_by_the_user,
            storage::agent_state_dir_is_root_only_and_persists_and_harness_config_is_private,
            egress::egress_leaves_only_through_the_channel,
            $($extra::$extra_check,)*
        );
    };
}

// Only a container shares the host kernel and run dir (conformance/host.rs says why).
every_backend_checks!(sandbox => Sandbox,
    host::box_root_holds_no_power_over_the_host_kernel,
    host::host_does_not_follow_a_planted_socket_link,
);

every_backend_checks!(qemu => Qemu);
