//! When a box's desktop can be used: once its services have settled (each `running`,
//! `exited` or `failed`; the X server `xvfb` not failed), and how long its boot took to
//! bring the desktop up. Pure: `crate::ops::desktop` polls the services and asks here.

use berth_protocol::service::{ServiceInfo, ServiceState};

use crate::desktop::names::{DESKTOP_SERVICES, XVFB_SERVICE};

/// Where the box's services are, for its desktop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Look {
    /// Every service has settled and `xvfb` runs.
    Settled,
    /// Some are still on their way: their names and states (`xfce: starting`).
    Settling { pending: String },
    /// `xvfb` failed: there is no display.
    XvfbFailed { reason: String },
    /// `xvfb` ended without failing (`exited`): there is no display either.
    XvfbExited,
    /// The box does not run (it was stopped or put to sleep meanwhile).
    NotRunning,
    /// The running box has no `xvfb` (its boot predates a template that has one).
    NoXvfb,
}

/// Looks at the services of a running box.
pub fn look(services: &[ServiceInfo]) -> Look {
    if services
        .iter()
        .any(|s| matches!(s.state, ServiceState::Stopped | ServiceState::Stopping))
    {
        return Look::NotRunning;
    }
    let Some(xvfb) = services.iter().find(|s| s.name == XVFB_SERVICE) else {
        return Look::NoXvfb;
    };
    match xvfb.state {
        ServiceState::Failed => {
            return Look::XvfbFailed {
                reason: xvfb
                    .reason
                    .clone()
                    .unwrap_or_else(|| "no reason given".to_owned()),
            }
        }
        ServiceState::Exited => return Look::XvfbExited,
        _ => {}
    }
    let pending: Vec<String> = services
        .iter()
        .filter(|s| !settled(s.state))
        .map(|s| format!("{}: {}", s.name, state_name(s.state)))
        .collect();
    if pending.is_empty() {
        Look::Settled
    } else {
        Look::Settling {
            pending: pending.join(", "),
        }
    }
}

/// Whether every desktop service the box has runs.
pub fn ready(services: &[ServiceInfo]) -> bool {
    desktop(services).all(|s| s.state == ServiceState::Running)
}

/// From `began_at_ms` (the boot's start) to the latest `ready_at_ms` of the desktop
/// services, when they are all ready and that was after the boot began (a boot restored
/// from a snapshot brings services that were ready before it).
pub fn ready_after_ms(services: &[ServiceInfo], began_at_ms: Option<u64>) -> Option<u64> {
    if !ready(services) {
        return None;
    }
    let last = desktop(services)
        .map(|s| s.ready_at_ms)
        .collect::<Option<Vec<u64>>>()?
        .into_iter()
        .max()?;
    last.checked_sub(began_at_ms?)
}

fn desktop(services: &[ServiceInfo]) -> impl Iterator<Item = &ServiceInfo> {
    services
        .iter()
        .filter(|s| DESKTOP_SERVICES.contains(&s.name.as_str()))
}

/// Settled: nothing more will happen to it unless asked. A state this daemon does not know
/// (a newer agent's) counts as settled: waiting on it could never end.
fn settled(state: ServiceState) -> bool {
    match state {
        ServiceState::Running
        | ServiceState::Exited
        | ServiceState::Failed
        | ServiceState::Unknown => true,
        ServiceState::Waiting
        | ServiceState::Starting
        | ServiceState::Restarting
        | ServiceState::Stopping
        | ServiceState::Stopped => false,
    }
}

fn state_name(state: ServiceState) -> &'static str {
    match state {
        ServiceState::Waiting => "waiting",
        ServiceState::Starting => "starting",
        ServiceState::Running => "running",
        ServiceState::Restarting => "restarting",
        ServiceState::Stopping => "stopping",
        ServiceState::Exited => "exited",
        ServiceState::Failed => "failed",
        ServiceState::Stopped => "stopped",
        ServiceState::Unknown => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(name: &str, state: ServiceState, ready_at_ms: Option<u64>) -> ServiceInfo {
        ServiceInfo {
            name: name.into(),
            state,
            pid: None,
            restarts: 0,
            started_at_ms: None,
            ready_at_ms,
            last_exit: None,
            reason: None,
            log_end: 0,
            log_tail: None,
            keep_awake: false,
            after: Vec::new(),
        }
    }

    fn desktop(xfce: ServiceState) -> Vec<ServiceInfo> {
        vec![
            service("xvfb", ServiceState::Running, Some(1_000)),
            service("xfce", xfce, Some(4_000)),
            service("vnc", ServiceState::Running, Some(2_500)),
            service("cron", ServiceState::Exited, None),
        ]
    }

    #[test]
    fn the_desktop_settles_once_every_service_has() {
        assert_eq!(look(&desktop(ServiceState::Running)), Look::Settled);
        assert_eq!(
            look(&desktop(ServiceState::Starting)),
            Look::Settling {
                pending: "xfce: starting".into()
            }
        );
        // A failed window manager settles: the display still takes actions.
        assert_eq!(look(&desktop(ServiceState::Failed)), Look::Settled);
        assert!(!ready(&desktop(ServiceState::Failed)));
        assert_eq!(look(&desktop(ServiceState::Stopped)), Look::NotRunning);
        assert_eq!(look(&desktop(ServiceState::Unknown)), Look::Settled);
    }

    #[test]
    fn a_failed_or_missing_x_server_is_no_desktop() {
        let mut services = desktop(ServiceState::Running);
        services[0].state = ServiceState::Failed;
        services[0].reason = Some("exited 6 times within 10 s of starting".into());
        assert_eq!(
            look(&services),
            Look::XvfbFailed {
                reason: "exited 6 times within 10 s of starting".into()
            }
        );
        services[0].state = ServiceState::Exited;
        assert_eq!(look(&services), Look::XvfbExited);
        assert_eq!(look(&services[1..]), Look::NoXvfb);
    }

    #[test]
    fn ready_after_counts_from_the_boot_to_the_last_desktop_service_ready() {
        let services = desktop(ServiceState::Running);
        assert!(ready(&services));
        assert_eq!(ready_after_ms(&services, Some(500)), Some(3_500));
        assert_eq!(ready_after_ms(&services, None), None, "boot start unknown");
        assert_eq!(
            ready_after_ms(&services, Some(10_000)),
            None,
            "ready before the boot: restored from a snapshot"
        );
        assert_eq!(
            ready_after_ms(&desktop(ServiceState::Starting), Some(500)),
            None
        );
        // A template with only an X server is ready with it.
        let bare = [service("xvfb", ServiceState::Running, Some(900))];
        assert_eq!(ready_after_ms(&bare, Some(100)), Some(800));
    }
}
