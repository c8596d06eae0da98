//! Ending a service's life from outside: all of them before the box stops, in reverse
//! dependency order, or one when the host asks for a restart. Either way the life's process
//! group gets SIGTERM, then SIGKILL after the service's `stop_timeout_s`; its supervisor sees
//! the exit and decides what follows.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use berth_protocol::service::{ServiceInfo, ServiceState};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

use super::{life, Service, Services};
use crate::error::ApiError;
use crate::reaper::kill_group;

/// How long after SIGKILL a life's end is waited for (its pipes drained).
const AFTER_KILL: Duration = Duration::from_secs(2);

impl Services {
    /// Stops every service: a service once every service that comes after it has ended,
    /// so the services that depend on nothing stop last. Nothing starts again after.
    pub async fn stop_all(self: &Arc<Self>) {
        self.stopping.store(true, Ordering::SeqCst);
        self.bump();
        let stops = self.all.iter().map(|service| {
            let (services, service) = (self.clone(), service.clone());
            async move {
                services.wait_for_dependents(&service).await;
                services.end_life(&service).await;
                services.wait_unsupervised(&service).await;
            }
        });
        futures_util::future::join_all(stops).await;
    }

    /// `POST /v1/services/{name}/restart`: the running life is stopped and a new one
    /// started at once (no backoff, the count of failures in a row reset); a service that
    /// had ended (exited or failed) is started again. Answers once the new life is under
    /// way.
    pub async fn restart(
        self: &Arc<Self>,
        service: &Arc<Service>,
    ) -> Result<ServiceInfo, ApiError> {
        if self.is_stopping() {
            return Err(ApiError::ServicesStopping);
        }
        if let Some(reason) = &service.refused {
            return Err(ApiError::ServiceRefused {
                name: service.config.name.clone(),
                reason: reason.clone(),
            });
        }
        let (supervised, old_pid) = {
            let mut life = service.life();
            life.short_lives = 0;
            if life.supervised {
                life.restart_asked = life.pid.is_some() || life.state == ServiceState::Restarting;
            } else {
                life.restarts += 1;
                life.state = ServiceState::Waiting;
                life.reason = None;
            }
            (life.supervised, life.pid)
        };
        service.note("restart asked for");
        if supervised {
            self.bump();
            if old_pid.is_some() {
                self.end_life(service).await;
            }
        } else {
            life::supervise(self, service);
        }
        self.wait_under_way(service, old_pid).await;
        Ok(service.info())
    }

    /// Waits until no service that names `service` in `after` has a supervisor running.
    async fn wait_for_dependents(&self, service: &Service) {
        let name = &service.config.name;
        let mut changed = self.changed.subscribe();
        loop {
            changed.borrow_and_update();
            let waiting = self
                .all
                .iter()
                .any(|s| s.config.after.contains(name) && s.life().supervised);
            if !waiting || changed.changed().await.is_err() {
                return;
            }
        }
    }

    /// SIGTERM to the running life's group, SIGKILL after the stop timeout; returns once
    /// the supervisor has seen the exit (or the kill had its time).
    async fn end_life(&self, service: &Service) {
        let Some(pid) = service.life().pid else {
            return;
        };
        service.life().state = ServiceState::Stopping;
        self.bump();
        let _ = killpg(Pid::from_raw(pid), Signal::SIGTERM);
        let grace = Duration::from_secs(service.config.stop_timeout_s);
        if !self.wait_life_gone(service, pid, grace).await {
            service.note(&format!(
                "still running {} s after SIGTERM; killing it",
                grace.as_secs()
            ));
            kill_group(pid);
            self.wait_life_gone(service, pid, AFTER_KILL).await;
        }
    }

    /// `true` once the life of `pid` is over (its supervisor cleared the pid).
    async fn wait_life_gone(&self, service: &Service, pid: i32, limit: Duration) -> bool {
        let mut changed = self.changed.subscribe();
        let gone = async {
            loop {
                changed.borrow_and_update();
                if service.life().pid != Some(pid) {
                    return;
                }
                if changed.changed().await.is_err() {
                    return;
                }
            }
        };
        tokio::time::timeout(limit, gone).await.is_ok()
    }

    async fn wait_unsupervised(&self, service: &Service) {
        let mut changed = self.changed.subscribe();
        let ended = async {
            loop {
                changed.borrow_and_update();
                if !service.life().supervised || changed.changed().await.is_err() {
                    return;
                }
            }
        };
        let _ = tokio::time::timeout(AFTER_KILL, ended).await;
    }

    /// Waits (a little) until a new life is spawned, or the service is waiting, or has
    /// ended, so the answer shows the restart rather than the old life's end.
    async fn wait_under_way(&self, service: &Service, old_pid: Option<i32>) {
        let mut changed = self.changed.subscribe();
        let under_way = async {
            loop {
                changed.borrow_and_update();
                {
                    let life = service.life();
                    let moved_on = !matches!(
                        life.state,
                        ServiceState::Stopping | ServiceState::Restarting
                    ) && life.pid != old_pid;
                    if moved_on || (old_pid.is_none() && life.state != ServiceState::Restarting) {
                        return;
                    }
                }
                if changed.changed().await.is_err() {
                    return;
                }
            }
        };
        let _ = tokio::time::timeout(AFTER_KILL, under_way).await;
    }
}
