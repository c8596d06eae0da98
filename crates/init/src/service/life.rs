//! One supervisor task per service: wait for the services it comes after, run a life (its
//! output into the log, its readiness checked), then decide about the next by its restart
//! policy, with backoff, until it has failed too often in a row, it ends for good, or the
//! box stops.

use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_protocol::guest::ExecRequest;
use berth_protocol::process::ProcessExit;
use berth_protocol::service::{exit_is_clean, ServiceState, SERVICE_FAILED_EVENT, STABLE_AFTER_S};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

use super::{ready, Service, Services};
use crate::exec::pump::{pump, Pipe, Sink};
use crate::harness::event_log::now_ms;
use crate::reaper::kill_group;

const BACKOFF_FIRST: Duration = Duration::from_millis(100);
const BACKOFF_CAP: Duration = Duration::from_secs(10);
const STABLE_AFTER: Duration = Duration::from_secs(STABLE_AFTER_S);

/// Starts `service`'s supervisor unless one runs already.
pub(super) fn supervise(services: &Arc<Services>, service: &Arc<Service>) {
    {
        let mut life = service.life();
        if life.supervised {
            return;
        }
        life.supervised = true;
    }
    let (services, service) = (services.clone(), service.clone());
    tokio::spawn(async move {
        lives(&services, &service).await;
        {
            let mut life = service.life();
            life.supervised = false;
            life.pid = None;
            life.settled = true;
        }
        services.bump();
    });
}

/// How one life ended.
enum LifeEnd {
    /// It could not be started (no such program, a bad cwd): a failed life.
    NotStarted(String),
    Ended {
        exit: ProcessExit,
        lived: Duration,
        /// Stopped because it was not ready in time.
        not_ready: bool,
    },
}

/// Lives until the service ends for good or the box stops.
async fn lives(services: &Arc<Services>, service: &Arc<Service>) {
    loop {
        if !wait_for_after(services, service).await {
            return;
        }
        let end = one_life(services, service).await;
        services.bump();
        if services.is_stopping() {
            set_state(services, service, ServiceState::Stopped, None);
            service.note("stopped with the box");
            return;
        }
        let (failed, short, why) = match &end {
            LifeEnd::NotStarted(reason) => (true, true, reason.clone()),
            LifeEnd::Ended {
                exit,
                lived,
                not_ready,
            } => (
                *not_ready || !exit_is_clean(exit),
                *lived < STABLE_AFTER,
                describe(exit),
            ),
        };
        let config = &service.config;
        let backoff = {
            let mut life = service.life();
            if let LifeEnd::Ended { exit, .. } = &end {
                life.last_exit = Some(*exit);
            }
            life.settled = true;
            if std::mem::take(&mut life.restart_asked) {
                life.short_lives = 0;
                life.restarts += 1;
                None
            } else {
                life.short_lives = if short { life.short_lives + 1 } else { 0 };
                Some(life.short_lives)
            }
        };
        let Some(short_lives) = backoff else {
            service.note(&format!("{why}; restarting, as asked"));
            continue;
        };
        if !config.restart.restarts(failed) {
            if failed {
                let reason = format!("{why} (restart = {})", policy_name(service));
                fail(services, service, reason);
            } else {
                service.note(&format!("{why}; not restarted"));
                set_state(services, service, ServiceState::Exited, None);
            }
            return;
        }
        if short_lives > config.max_restarts {
            let reason = format!(
                "{why}: it ended {short_lives} times in a row within {STABLE_AFTER_S} s of starting"
            );
            fail(services, service, reason);
            return;
        }
        let wait = BACKOFF_FIRST
            .saturating_mul(1 << short_lives.saturating_sub(1).min(16))
            .min(BACKOFF_CAP);
        service.note(&format!("{why}; restarting in {:.1} s", wait.as_secs_f64()));
        set_state(services, service, ServiceState::Restarting, None);
        if !back_off(services, service, wait).await {
            set_state(services, service, ServiceState::Stopped, None);
            return;
        }
        service.life().restarts += 1;
    }
}

/// Waits until every service `service` comes after is ready (or ended cleanly, as a
/// one-shot set-up does). `false`: one of them failed (so this one fails too) or the box
/// is stopping.
async fn wait_for_after(services: &Arc<Services>, service: &Arc<Service>) -> bool {
    let mut changed = services.changed.subscribe();
    loop {
        changed.borrow_and_update();
        if services.is_stopping() {
            set_state(services, service, ServiceState::Stopped, None);
            return false;
        }
        let mut waiting = Vec::new();
        for name in &service.config.after {
            let Some(dep) = services.find(name) else {
                continue;
            };
            match dep.life().state {
                ServiceState::Running | ServiceState::Exited => {}
                ServiceState::Failed => {
                    fail(
                        services,
                        service,
                        format!("{name}, which it comes after, failed"),
                    );
                    return false;
                }
                _ => waiting.push(name.as_str()),
            }
        }
        if waiting.is_empty() {
            return true;
        }
        let reason = format!("waiting for {}", waiting.join(", "));
        if service.life().reason.as_deref() != Some(&reason) {
            set_state(services, service, ServiceState::Waiting, Some(reason));
        }
        if changed.changed().await.is_err() {
            return false;
        }
    }
}

/// Runs one life: spawned, its output logged, its readiness checked (one not ready in
/// time is stopped: SIGTERM, then SIGKILL after its stop timeout), until it exits.
async fn one_life(services: &Arc<Services>, service: &Arc<Service>) -> LifeEnd {
    let config = &service.config;
    let request = ExecRequest {
        argv: config.command.clone(),
        env: config.env.clone(),
        cwd: config.cwd.clone(),
        user: config.user,
        stdin: None,
        timeout_ms: None,
    };
    let spawned = services
        .exec
        .prepare_request(request)
        .map_err(|e| e.to_string())
        .and_then(|prepared| services.exec.spawn(&prepared).map_err(|(_, reason)| reason));
    let mut running = match spawned {
        Ok(running) => running,
        Err(reason) => {
            service.note(&format!("cannot start: {reason}"));
            return LifeEnd::NotStarted(format!("cannot start: {reason}"));
        }
    };
    let pid = running.pid;
    let started = Instant::now();
    {
        let mut life = service.life();
        life.pid = Some(pid);
        life.started_at_ms = Some(now_ms());
        life.reason = None;
        life.state = ServiceState::Starting;
    }
    service.note(&format!("started (pid {pid})"));
    if config.ready.is_none() {
        became_ready(services, service);
    } else {
        services.bump();
    }
    let ready_limit = Duration::from_secs(config.ready_timeout_s);
    let stop_grace = Duration::from_secs(config.stop_timeout_s);
    let mut sink = LogSink(service);
    let exit = {
        let pumped = pump(&mut running, None, &mut sink);
        tokio::pin!(pumped);
        let check = ready::wait(&services.exec, config, ready_limit);
        tokio::pin!(check);
        let mut checking = config.ready.is_some();
        let mut not_ready = false;
        let mut kill_at: Option<tokio::time::Instant> = None;
        let far = || tokio::time::Instant::now() + Duration::from_secs(86_400);
        let exit = loop {
            tokio::select! {
                exit = &mut pumped => break exit,
                ready = &mut check, if checking => {
                    checking = false;
                    if ready {
                        became_ready(services, service);
                    } else {
                        service.note(&format!("not ready within {} s; stopping it", ready_limit.as_secs()));
                        not_ready = true;
                        let _ = killpg(Pid::from_raw(pid), Signal::SIGTERM);
                        kill_at = Some(tokio::time::Instant::now() + stop_grace);
                    }
                }
                _ = tokio::time::sleep_until(kill_at.unwrap_or_else(far)), if kill_at.is_some() => {
                    kill_group(pid);
                    kill_at = None;
                }
            }
        };
        (exit, not_ready)
    };
    // Stragglers of its process group go with it.
    kill_group(pid);
    services.exec.reaper.forget_group_if_empty(pid);
    service.life().pid = None;
    let (exit, not_ready) = exit;
    LifeEnd::Ended {
        exit: exit.unwrap_or(ProcessExit {
            code: None,
            signal: None,
            timed_out: false,
        }),
        lived: started.elapsed(),
        not_ready,
    }
}

fn became_ready(services: &Services, service: &Service) {
    {
        let mut life = service.life();
        life.state = ServiceState::Running;
        life.ready_at_ms = Some(now_ms());
        life.settled = true;
    }
    service.note("ready");
    services.bump();
}

/// Waits out a backoff; `false` when the box began to stop meanwhile. A restart asked for
/// ends the wait at once.
async fn back_off(services: &Services, service: &Service, wait: Duration) -> bool {
    let mut changed = services.changed.subscribe();
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        changed.borrow_and_update();
        if services.is_stopping() {
            return false;
        }
        if std::mem::take(&mut service.life().restart_asked) {
            service.life().short_lives = 0;
            return true;
        }
        tokio::select! {
            _ = tokio::time::sleep_until(deadline) => return true,
            gone = changed.changed() => if gone.is_err() { return false },
        }
    }
}

/// Marks the service failed with `reason` (its last exit and log tail kept) and puts a
/// `service_failed` event on the box's event stream.
fn fail(services: &Services, service: &Service, reason: String) {
    service.note(&format!("failed: {reason}"));
    set_state(services, service, ServiceState::Failed, Some(reason));
    let info = service.info();
    let event = (
        SERVICE_FAILED_EVENT.to_owned(),
        serde_json::json!({
            "name": info.name,
            "reason": info.reason,
            "last_exit": info.last_exit,
            "restarts": info.restarts,
            "log_tail": info.log_tail,
        }),
    );
    // The journal syncs each append: off the agent's one async thread.
    let harness = services.harness.clone();
    tokio::task::spawn_blocking(move || crate::harness::supervisor::emit(&harness, vec![event]));
}

fn set_state(services: &Services, service: &Service, state: ServiceState, reason: Option<String>) {
    {
        let mut life = service.life();
        life.state = state;
        life.reason = reason;
    }
    services.bump();
}

fn describe(exit: &ProcessExit) -> String {
    match (exit.code, exit.signal) {
        (Some(code), _) => format!("exited with code {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        (None, None) => "ended".to_owned(),
    }
}

fn policy_name(service: &Service) -> &'static str {
    use berth_protocol::service::RestartPolicy;
    match service.config.restart {
        RestartPolicy::Always => "always",
        RestartPolicy::OnFailure => "on-failure",
        RestartPolicy::Never | RestartPolicy::Unknown => "never",
    }
}

/// The service's log: never full (it forgets its oldest output), never gone.
struct LogSink<'a>(&'a Service);

impl Sink for LogSink<'_> {
    async fn output(&mut self, pipe: Pipe, data: &[u8]) -> bool {
        self.0.log(pipe.into(), data);
        true
    }

    async fn gone(&self) {
        std::future::pending().await
    }
}
