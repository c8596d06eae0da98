//! A box's services (`/v1/boxes/{ref}/services…`): the daemons its template declares,
//! started and supervised by the box's `berth-init` (`berth_protocol::service`).
//!
//! Only the restart wakes a box. The list of a box that is not running is its template's
//! services, each `stopped`; a log lives in `berth-init`'s memory for one boot, so a box
//! that is not running has none to read. A paused box counts as not running: it keeps its
//! boot's client, but its agent is frozen and would not answer.
//!
//! A running box whose agent predates services (started by an older berth, protocol < 7)
//! answers [`OpError::AgentPredatesServices`], a conflict its next start resolves, rather
//! than an empty list that would hide the template's services.

use std::time::Duration;

use berth_protocol::service::{ServiceConfig, ServiceInfo, ServiceList, ServiceState};
use berth_protocol::BoxId;
use berth_runtime::{GuestClient, GuestError, ProcessOutput};
use berth_store::{BoxRecord, BoxState};
use tokio::time::Instant;

use crate::ctx::Ctx;
use crate::error::OpError;
use crate::ops::box_find;

/// The box's services: its agent's answer when it runs, else its template's, `stopped`.
pub async fn list(ctx: &Ctx, record: &BoxRecord) -> Result<ServiceList, OpError> {
    match running(ctx, &record.id).await? {
        Some(client) => client
            .services()
            .await
            .map_err(|e| agent_error(&record.name, e.into())),
        None => Ok(ServiceList {
            services: declared(ctx, record).iter().map(stopped).collect(),
        }),
    }
}

/// How often a wait for the services asks the agent.
const POLL: Duration = Duration::from_millis(250);

/// Lists the running box's services until `until` holds of them or `within` has passed;
/// answers the last list, and whether `until` held.
pub async fn wait_for(
    ctx: &Ctx,
    record: &BoxRecord,
    within: Duration,
    until: impl Fn(&[ServiceInfo]) -> bool,
) -> Result<(Vec<ServiceInfo>, bool), OpError> {
    let deadline = Instant::now() + within;
    loop {
        let services = list(ctx, record).await?.services;
        if until(&services) {
            return Ok((services, true));
        }
        if Instant::now() >= deadline {
            return Ok((services, false));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Every service has started: none is waiting for another or for its ready check. One
/// that failed or restarts counts: waiting on it could take its whole backoff.
pub fn started(services: &[ServiceInfo]) -> bool {
    !services.iter().any(starting)
}

/// The service is waiting for another or for its ready check.
fn starting(service: &ServiceInfo) -> bool {
    matches!(
        service.state,
        ServiceState::Waiting | ServiceState::Starting
    )
}

/// How long an explicit start or resume waits for the box's services to have started.
pub const START_WAIT: Duration = Duration::from_secs(60);

/// Waits, at most `within`, for the services of a box just started to have started
/// (ready or failed), so that what the caller does next finds them up; a box whose template
/// declares none answers at once. Past `within` the box is answered anyway, running:
/// `GET /v1/boxes/{ref}/services` tells more.
pub async fn wait_started(ctx: &Ctx, record: &BoxRecord, within: Duration) {
    if declared(ctx, record).is_empty() {
        return;
    }
    match wait_for(ctx, record, within, started).await {
        Ok((_, true)) => {}
        Ok((services, false)) => {
            let pending: Vec<&str> = services
                .iter()
                .filter(|s| starting(s))
                .map(|s| s.name.as_str())
                .collect();
            tracing::warn!(box_id = %record.id, ?pending, "box answered before its services started");
        }
        Err(e) => {
            tracing::warn!(box_id = %record.id, error = %berth_runtime::error_chain(&e), "box answered without its services' state");
        }
    }
}

/// The service's log from `offset`, `output` frames only; with `follow` the stream stays
/// open for what comes next (until the box stops).
pub async fn logs(
    ctx: &Ctx,
    record: &BoxRecord,
    service: &str,
    offset: u64,
    follow: bool,
) -> Result<ProcessOutput, OpError> {
    let Some(client) = running(ctx, &record.id).await? else {
        // An unknown name is a 404 whatever the box's state.
        known(ctx, record, service)?;
        return Err(OpError::ServicesNotRunning {
            name: record.name.clone(),
            state: record.state,
        });
    };
    client
        .service_logs(service, offset, follow)
        .await
        .map_err(|e| agent_error(&record.name, e.into()))
}

/// Restarts the service, waking the box first; answers it as it is just after.
pub async fn restart(ctx: &Ctx, record: &BoxRecord, service: &str) -> Result<ServiceInfo, OpError> {
    if running(ctx, &record.id).await?.is_none() {
        // Nothing is woken for a name its template does not declare. (A running box is
        // asked instead: it runs the services of the template as it was at its start.)
        known(ctx, record, service)?;
    }
    let _busy = ctx.activity.begin(&record.id);
    ctx.lifecycle()
        .with_guest(&record.id, |client| {
            let service = service.to_owned();
            async move { client.service_restart(&service).await }
        })
        .await
        .map_err(|e| agent_error(&record.name, e))
}

/// The services the box's template declares (none when its template is gone: its next
/// start fails and says so).
fn declared(ctx: &Ctx, record: &BoxRecord) -> Vec<ServiceConfig> {
    ctx.templates
        .get(&record.template)
        .map(|template| template.services.clone())
        .unwrap_or_default()
}

/// `NoSuchService` unless the box's template declares `service`; a template that is gone
/// cannot tell, and lets the call go on.
fn known(ctx: &Ctx, record: &BoxRecord, service: &str) -> Result<(), OpError> {
    let Some(template) = ctx.templates.get(&record.template) else {
        return Ok(());
    };
    if template.services.iter().any(|s| s.name == service) {
        return Ok(());
    }
    Err(OpError::NoSuchService {
        name: record.name.clone(),
        service: service.to_owned(),
    })
}

/// A declared service of a box that is not running.
fn stopped(config: &ServiceConfig) -> ServiceInfo {
    ServiceInfo {
        name: config.name.clone(),
        state: ServiceState::Stopped,
        pid: None,
        restarts: 0,
        started_at_ms: None,
        ready_at_ms: None,
        last_exit: None,
        reason: None,
        log_end: 0,
        log_tail: None,
        keep_awake: config.keep_awake,
        after: config.after.clone(),
    }
}

/// The running boot's client, when the box runs (not when it is paused: see the module).
async fn running(ctx: &Ctx, id: &BoxId) -> Result<Option<GuestClient>, OpError> {
    let slot = ctx.boxes.slot(id);
    let live = slot.lifecycle.lock().await;
    let Some(client) = live.client.clone() else {
        return Ok(None);
    };
    // Under the lifecycle lock the stored state is settled (a pause holds the lock).
    let state = box_find::reload(ctx, id)?.state;
    drop(live);
    Ok((state == BoxState::Running).then_some(client))
}

/// An agent too old for the service calls is the box's conflict, not a missing feature of
/// the daemon's: its next start brings a `berth-init` that has them.
fn agent_error(name: &str, error: OpError) -> OpError {
    match error {
        OpError::Guest(e) if matches!(*e, GuestError::Unsupported { .. }) => {
            OpError::AgentPredatesServices {
                name: name.to_owned(),
            }
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use berth_protocol::guest::{BoxUser, Call};
    use berth_protocol::service::RestartPolicy;

    use super::*;

    #[test]
    fn a_declared_service_of_a_sleeping_box_is_stopped_with_its_settings() {
        let config = ServiceConfig {
            name: "web".into(),
            command: vec!["httpd".into()],
            user: BoxUser::User,
            env: BTreeMap::new(),
            cwd: None,
            restart: RestartPolicy::Always,
            ready: None,
            after: vec!["db".into()],
            keep_awake: true,
            max_restarts: 5,
            ready_timeout_s: 60,
            stop_timeout_s: 5,
        };
        let info = stopped(&config);
        assert_eq!(info.state, ServiceState::Stopped);
        assert_eq!((info.pid, info.restarts, info.log_end), (None, 0, 0));
        assert!(info.keep_awake);
        assert_eq!(info.after, vec!["db".to_owned()]);
    }

    #[test]
    fn only_an_agent_too_old_becomes_a_conflict() {
        let old = OpError::from(GuestError::Unsupported {
            call: Call::ServiceList,
            needs: 7,
            agent: 6,
        });
        assert!(matches!(
            agent_error("alice", old),
            OpError::AgentPredatesServices { name } if name == "alice"
        ));
        let other = OpError::from(GuestError::Cut { what: "answer" });
        assert!(matches!(agent_error("alice", other), OpError::Guest(_)));
    }
}
