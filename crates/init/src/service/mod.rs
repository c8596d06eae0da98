//! The box's services (`berth_protocol::service`): the daemons its template declares,
//! started at boot before the harness, restarted by their policy, stopped before the box.
//!
//! - [`boot`]: the `services` boot phase (read `services.json`, check the `after` links).
//! - [`life`]: one supervisor task per service: wait for what it comes after, run a life,
//!   check it is ready, decide about the next.
//! - [`ready`]: the readiness checks.
//! - [`stop`]: stopping in reverse dependency order, and a restart asked for by the host.
//! - [`logs`]: `GET /v1/services/{name}/logs`.
//!
//! Each service's changing part is one [`Life`] under its own lock, never held across an
//! await. Every change of any service bumps one [`Services::changed`] counter: a dependent
//! waiting for its `after`, the harness waiting for the services to settle and a stop
//! waiting for dependents to end all wait on it.

pub mod boot;
mod life;
pub mod logs;
mod ready;
mod stop;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use berth_protocol::process::{OutputStream, ProcessExit};
use berth_protocol::service::{
    ready_budget_s, ServiceConfig, ServiceInfo, ServiceList, ServiceState, FAILED_LOG_TAIL_BYTES,
    SERVICE_LOG_BYTES, STABLE_AFTER_S,
};
use tokio::sync::{watch, Notify};

use crate::error::ApiError;
use crate::exec::Executor;
use crate::harness::Harness;
use crate::process::tail::Tail;

/// Every service of this boot, in the template's order.
#[derive(Debug)]
pub struct Services {
    exec: Arc<Executor>,
    /// Where `service_failed` events are journalled.
    harness: Arc<Harness>,
    all: Vec<Arc<Service>>,
    /// Set once the box begins to stop: nothing starts or restarts after.
    stopping: AtomicBool,
    /// Bumped on every change of any service's state.
    changed: watch::Sender<u64>,
    /// The longest the harness waits for the services to settle: the longest chain of
    /// ready timeouts, and the time a life takes to count as stable.
    settle_limit: Duration,
}

#[derive(Debug)]
pub struct Service {
    config: ServiceConfig,
    /// Why it can never run (a broken `after` link): it is not restarted either.
    refused: Option<String>,
    life: Mutex<Life>,
    /// Woken on new log output.
    logged: Notify,
}

/// What changes about a service.
#[derive(Debug)]
struct Life {
    state: ServiceState,
    pid: Option<i32>,
    restarts: u32,
    /// Lives in a row that ended within `STABLE_AFTER_S` of their start.
    short_lives: u32,
    started_at_ms: Option<u64>,
    ready_at_ms: Option<u64>,
    last_exit: Option<ProcessExit>,
    reason: Option<String>,
    log: Tail,
    /// Ready once, or its first try is over: the harness no longer waits for it.
    settled: bool,
    /// Its supervisor task runs.
    supervised: bool,
    /// The host asked for a restart: the life ending now is followed by one at once.
    restart_asked: bool,
}

impl Services {
    /// The services of `configs` (checked by [`boot::check`]); none runs until [`Self::start`].
    pub fn new(
        exec: Arc<Executor>,
        harness: Arc<Harness>,
        configs: Vec<(ServiceConfig, Option<String>)>,
    ) -> Arc<Self> {
        let plain: Vec<ServiceConfig> = configs.iter().map(|(c, _)| c.clone()).collect();
        let settle_limit = Duration::from_secs(ready_budget_s(&plain) + STABLE_AFTER_S);
        let all = configs
            .into_iter()
            .map(|(config, refused)| {
                let mut life = Life {
                    state: ServiceState::Waiting,
                    pid: None,
                    restarts: 0,
                    short_lives: 0,
                    started_at_ms: None,
                    ready_at_ms: None,
                    last_exit: None,
                    reason: None,
                    log: Tail::new(SERVICE_LOG_BYTES),
                    settled: false,
                    supervised: false,
                    restart_asked: false,
                };
                if let Some(reason) = &refused {
                    life.state = ServiceState::Failed;
                    life.settled = true;
                    note(&mut life, &format!("not started: {reason}"));
                    life.reason = Some(reason.clone());
                }
                Arc::new(Service {
                    config,
                    refused,
                    life: Mutex::new(life),
                    logged: Notify::new(),
                })
            })
            .collect();
        Arc::new(Services {
            exec,
            harness,
            all,
            stopping: AtomicBool::new(false),
            changed: watch::Sender::new(0),
            settle_limit,
        })
    }

    /// Starts a supervisor for every service that was not refused; returns at once.
    pub fn start(self: &Arc<Self>) {
        for service in self.all.iter().filter(|s| s.refused.is_none()) {
            life::supervise(self, service);
        }
    }

    pub fn list(&self) -> ServiceList {
        ServiceList {
            services: self.all.iter().map(|s| s.info()).collect(),
        }
    }

    pub fn get(&self, name: &str) -> Result<Arc<Service>, ApiError> {
        self.find(name).cloned().ok_or_else(|| ApiError::NoService {
            name: name.to_owned(),
        })
    }

    fn find(&self, name: &str) -> Option<&Arc<Service>> {
        self.all.iter().find(|s| s.config.name == name)
    }

    /// Running services that keep the box awake.
    pub fn busy(&self) -> u32 {
        let count = self
            .all
            .iter()
            .filter(|s| {
                s.config.keep_awake
                    && matches!(
                        s.life().state,
                        ServiceState::Starting | ServiceState::Running | ServiceState::Restarting
                    )
            })
            .count();
        u32::try_from(count).unwrap_or(u32::MAX)
    }

    /// Resolves once every service has settled (been ready once, or ended its first try),
    /// the box began to stop, or the settle limit has passed, so a service that never comes
    /// up delays the harness by its own timeouts at most.
    pub async fn settled(self: Arc<Self>) {
        let limit = self.settle_limit;
        let all_settled = async {
            let mut changed = self.changed.subscribe();
            loop {
                changed.borrow_and_update();
                if self.is_stopping() || self.all.iter().all(|s| s.life().settled) {
                    return;
                }
                if changed.changed().await.is_err() {
                    return;
                }
            }
        };
        if tokio::time::timeout(limit, all_settled).await.is_err() {
            eprintln!(
                "berth-init: the services did not settle within {} s; starting the harness anyway",
                limit.as_secs()
            );
        }
    }

    fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    /// Publishes a change of some service's state.
    fn bump(&self) {
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }
}

impl Service {
    pub fn info(&self) -> ServiceInfo {
        let life = self.life();
        let log_tail = (life.state == ServiceState::Failed).then(|| {
            String::from_utf8_lossy(&life.log.last_bytes(FAILED_LOG_TAIL_BYTES)).into_owned()
        });
        ServiceInfo {
            name: self.config.name.clone(),
            state: life.state,
            pid: life.pid.and_then(|p| u32::try_from(p).ok()),
            restarts: life.restarts,
            started_at_ms: life.started_at_ms,
            ready_at_ms: life.ready_at_ms,
            last_exit: life.last_exit,
            reason: life.reason.clone(),
            log_end: life.log.end(),
            log_tail,
            keep_awake: self.config.keep_awake,
            after: self.config.after.clone(),
        }
    }

    fn life(&self) -> MutexGuard<'_, Life> {
        self.life.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends output to the log and wakes its followers.
    fn log(&self, stream: OutputStream, data: &[u8]) {
        self.life().log.push(stream, data);
        self.logged.notify_waiters();
    }

    /// Writes one of berth-init's own lines into the log.
    fn note(&self, text: &str) {
        note(&mut self.life(), text);
        self.logged.notify_waiters();
    }
}

/// A `berth-init: …` line on the log's stderr.
fn note(life: &mut Life, text: &str) {
    life.log.push(
        OutputStream::Stderr,
        format!("berth-init: {text}\n").as_bytes(),
    );
}
