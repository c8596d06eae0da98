//! A box's services (protocol version 7): the daemons its template declares, started and
//! supervised by `berth-init`.
//!
//! | call | method and path | request | response |
//! |---|---|---|---|
//! | [`crate::guest::Call::ServiceList`] | `GET /v1/services` | - | [`ServiceList`] |
//! | [`crate::guest::Call::ServiceLogs`] | `GET /v1/services/{name}/logs?offset=N&follow=B` | - | NDJSON of [`crate::process::ProcessFrame`] (`output` frames only) |
//! | [`crate::guest::Call::ServiceRestart`] | `POST /v1/services/{name}/restart` | - | [`ServiceInfo`] |
//!
//! **Start.** Before a box starts, the host writes its template's services, a JSON array of
//! [`ServiceConfig`], to `<run dir>/`[`SERVICES_FILE`] (a VM: [`crate::vm::VmConfig::services`]).
//! `berth-init` starts each at boot as soon as every service it names in `after` is ready,
//! those with none at once, in the file's order; the harness starts once every service has
//! settled (is ready, or has ended its first try). A service is ready when it has started
//! (no `ready` check), when its TCP port on 127.0.0.1 accepts a connection, or when its
//! ready command exits 0; one not ready within `ready_timeout_s` is stopped, and that counts
//! as a failed life.
//!
//! **Restart.** A life that ends is followed by another per [`RestartPolicy`], after a
//! backoff (100 ms doubling to 10 s). Lives that end within [`STABLE_AFTER_S`] of their
//! start count in a row; at one more than `max_restarts` of them (the restarts allowed in a
//! row) the service is `failed`, and so is one
//! that ended with an error and is not restarted: its last exit and the tail of its log
//! are kept, a `service_failed` event goes on the box's event stream, and the box and its
//! harness go on. A service whose `after` names a failed one never starts (`failed` too).
//!
//! **Stop.** Before the box stops, its services are stopped in reverse dependency order (a
//! service once every service that names it in `after` has ended): SIGTERM to the
//! service's process group, SIGKILL after its `stop_timeout_s`. Then everything else.
//!
//! **Logs.** Each service's stdout and stderr, across its restarts, go into one numbered
//! log (offsets count bytes, as a process's output does); `berth-init` keeps the last
//! [`SERVICE_LOG_BYTES`] and writes its own notes into it (`berth-init: …` lines on
//! stderr). `follow=false` ends the stream at the log's end; `follow=true` keeps it open.
//!
//! A running service keeps the box awake only when it says `keep_awake` ([`crate::process::Busy::services`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::guest::BoxUser;
use crate::process::ProcessExit;

/// The run-dir file holding the box's services (absent: none).
pub const SERVICES_FILE: &str = "services.json";
/// Services one template may declare.
pub const MAX_SERVICES: usize = 32;
/// Log kept per service, across its restarts.
pub const SERVICE_LOG_BYTES: usize = 256 * 1024;
/// The most of a failed service's log its [`ServiceInfo::log_tail`] carries.
pub const FAILED_LOG_TAIL_BYTES: usize = 4096;
/// A life shorter than this counts towards `max_restarts`; a longer one resets the count.
pub const STABLE_AFTER_S: u64 = 10;
pub const DEFAULT_SERVICE_MAX_RESTARTS: u32 = 5;
pub const DEFAULT_READY_TIMEOUT_S: u64 = 60;
pub const DEFAULT_STOP_TIMEOUT_S: u64 = 5;
/// The longest `stop_timeout_s`: a box's stop waits for its services' chain of them.
pub const MAX_STOP_TIMEOUT_S: u64 = 60;

/// One service, as the host writes it (validated from the template's `[[services]]`).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceConfig {
    /// Unique in the box: lowercase letters, digits and `-`, at most 63.
    pub name: String,
    /// Program and arguments; run in the foreground (a daemon that forks away is seen as
    /// exited).
    pub command: Vec<String>,
    #[serde(default)]
    pub user: BoxUser,
    /// Added to the base environment (which has the box's own).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Defaults to the user's home.
    #[serde(default)]
    pub cwd: Option<String>,
    #[serde(default)]
    pub restart: RestartPolicy,
    /// `None`: ready once started.
    #[serde(default)]
    pub ready: Option<ReadyCheck>,
    /// Services that must be ready before this one starts.
    #[serde(default)]
    pub after: Vec<String>,
    /// Whether it running keeps the box awake.
    #[serde(default)]
    pub keep_awake: bool,
    #[serde(default = "default_max_restarts")]
    pub max_restarts: u32,
    #[serde(default = "default_ready_timeout_s")]
    pub ready_timeout_s: u64,
    #[serde(default = "default_stop_timeout_s")]
    pub stop_timeout_s: u64,
}

fn default_max_restarts() -> u32 {
    DEFAULT_SERVICE_MAX_RESTARTS
}

fn default_ready_timeout_s() -> u64 {
    DEFAULT_READY_TIMEOUT_S
}

fn default_stop_timeout_s() -> u64 {
    DEFAULT_STOP_TIMEOUT_S
}

/// When a service's life is followed by another.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RestartPolicy {
    /// Whatever the exit.
    Always,
    /// When it exits with a code other than 0, or a signal ends it.
    #[default]
    OnFailure,
    Never,
    #[serde(other)]
    Unknown,
}

impl RestartPolicy {
    /// Whether a life that ended (`failed`: with an error, or never ready) is followed by
    /// another.
    pub fn restarts(self, failed: bool) -> bool {
        match self {
            RestartPolicy::Always => true,
            RestartPolicy::OnFailure => failed,
            RestartPolicy::Never | RestartPolicy::Unknown => false,
        }
    }
}

/// Exit code 0, not timed out.
pub fn exit_is_clean(exit: &ProcessExit) -> bool {
    exit.code == Some(0) && !exit.timed_out
}

/// How `berth-init` knows a service is ready (`{"port":N}` or `{"command":[…]}`).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReadyCheck {
    /// A TCP connection to 127.0.0.1 on this port succeeds.
    Port(u16),
    /// This command, run as the service's user with its environment, exits 0.
    Command(Vec<String>),
}

/// Where a service is in its life.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ServiceState {
    /// Waiting for the services it names in `after` to be ready.
    Waiting,
    /// Running, not yet ready.
    Starting,
    /// Running and ready.
    Running,
    /// Exited; the next life starts after the backoff.
    Restarting,
    /// Being stopped (the box is stopping, or a restart was asked for).
    Stopping,
    /// Ended and not restarted, without a failure (exit 0 under `on-failure` or `never`).
    Exited,
    /// Given up: see `reason`, `last_exit` and `log_tail`.
    Failed,
    /// Stopped by the box's stop; also the host's answer for every service of a box that
    /// is not running.
    Stopped,
    #[serde(other)]
    Unknown,
}

impl ServiceState {
    /// Whether a process of the service may be alive or about to be.
    pub fn is_live(self) -> bool {
        matches!(
            self,
            ServiceState::Waiting
                | ServiceState::Starting
                | ServiceState::Running
                | ServiceState::Restarting
                | ServiceState::Stopping
        )
    }
}

/// A service as `berth-init` knows it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceInfo {
    pub name: String,
    pub state: ServiceState,
    /// The running life's pid.
    #[serde(default)]
    pub pid: Option<u32>,
    /// Lives started after the first, this boot.
    #[serde(default)]
    pub restarts: u32,
    /// When the current (or last) life started, milliseconds since the Unix epoch.
    #[serde(default)]
    pub started_at_ms: Option<u64>,
    /// When it was last found ready.
    #[serde(default)]
    pub ready_at_ms: Option<u64>,
    /// How the last life ended.
    #[serde(default)]
    pub last_exit: Option<ProcessExit>,
    /// Why it failed, or what it waits for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The offset just past the last log byte.
    #[serde(default)]
    pub log_end: u64,
    /// The end of its log (at most [`FAILED_LOG_TAIL_BYTES`], lossy UTF-8), once failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_tail: Option<String>,
    #[serde(default)]
    pub keep_awake: bool,
    #[serde(default)]
    pub after: Vec<String>,
}

/// Answer to `GET /v1/services`: in the template's order.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceList {
    pub services: Vec<ServiceInfo>,
}

/// The event `berth-init` puts on the box's event stream when a service fails.
pub const SERVICE_FAILED_EVENT: &str = "service_failed";

/// The time a stop can take for `services`: along the longest chain of `after`, the sum of
/// their `stop_timeout_s` (services that no chain links stop side by side). The host adds it
/// to its grace when it stops a box.
pub fn stop_budget_s(services: &[ServiceConfig]) -> u64 {
    longest_chain_s(services, |s| s.stop_timeout_s.min(MAX_STOP_TIMEOUT_S))
}

/// The longest the services can take to settle at boot: along the longest chain of
/// `after`, the sum of their `ready_timeout_s`. The harness starts after it at the latest.
pub fn ready_budget_s(services: &[ServiceConfig]) -> u64 {
    longest_chain_s(services, |s| s.ready_timeout_s)
}

/// The largest sum of `each` along a chain of `after` links.
fn longest_chain_s(services: &[ServiceConfig], each: impl Fn(&ServiceConfig) -> u64) -> u64 {
    // A service's chain is its own time plus the longest chain among the services it names
    // in `after`; `depth` ends a cycle (refused by the host's validation) all the same.
    fn chain(
        name: &str,
        services: &[ServiceConfig],
        each: &dyn Fn(&ServiceConfig) -> u64,
        memo: &mut BTreeMap<String, u64>,
        depth: usize,
    ) -> u64 {
        if let Some(known) = memo.get(name) {
            return *known;
        }
        let Some(service) = services.iter().find(|s| s.name == name) else {
            return 0;
        };
        let below = if depth > services.len() {
            0
        } else {
            service
                .after
                .iter()
                .map(|dep| chain(dep, services, each, memo, depth + 1))
                .max()
                .unwrap_or(0)
        };
        let total = each(service).saturating_add(below);
        memo.insert(name.to_owned(), total);
        total
    }
    let mut memo = BTreeMap::new();
    services
        .iter()
        .map(|s| chain(&s.name, services, &each, &mut memo, 0))
        .max()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn service(name: &str, after: &[&str], stop_timeout_s: u64) -> ServiceConfig {
        ServiceConfig {
            name: name.into(),
            command: vec!["x".into()],
            user: BoxUser::User,
            env: BTreeMap::new(),
            cwd: None,
            restart: RestartPolicy::OnFailure,
            ready: None,
            after: after.iter().map(|s| s.to_string()).collect(),
            keep_awake: false,
            max_restarts: DEFAULT_SERVICE_MAX_RESTARTS,
            ready_timeout_s: DEFAULT_READY_TIMEOUT_S,
            stop_timeout_s,
        }
    }

    #[test]
    fn version_7_service_schema_is_frozen() {
        let config: ServiceConfig = serde_json::from_value(json!({
            "name": "web", "command": ["httpd"], "ready": {"port": 8080},
            "restart": "on-failure", "after": ["db"]
        }))
        .unwrap();
        assert_eq!(config.ready, Some(ReadyCheck::Port(8080)));
        assert_eq!(config.restart, RestartPolicy::OnFailure);
        assert_eq!(
            (
                config.max_restarts,
                config.ready_timeout_s,
                config.stop_timeout_s
            ),
            (5, 60, 5)
        );
        assert_eq!(
            serde_json::to_value(&config).unwrap(),
            json!({"name":"web","command":["httpd"],"user":"user","env":{},"cwd":null,
                "restart":"on-failure","ready":{"port":8080},"after":["db"],"keep_awake":false,
                "max_restarts":5,"ready_timeout_s":60,"stop_timeout_s":5})
        );
        let command: ReadyCheck =
            serde_json::from_value(json!({"command":["pg_isready"]})).unwrap();
        assert_eq!(command, ReadyCheck::Command(vec!["pg_isready".into()]));
        let later: RestartPolicy = serde_json::from_value(json!("sometimes")).unwrap();
        assert_eq!(later, RestartPolicy::Unknown);
        let info = ServiceInfo {
            name: "web".into(),
            state: ServiceState::Failed,
            pid: None,
            restarts: 5,
            started_at_ms: Some(1),
            ready_at_ms: None,
            last_exit: Some(ProcessExit {
                code: Some(3),
                signal: None,
                timed_out: false,
            }),
            reason: Some("why".into()),
            log_end: 9,
            log_tail: Some("boom\n".into()),
            keep_awake: false,
            after: vec![],
        };
        assert_eq!(
            serde_json::to_value(&info).unwrap(),
            json!({"name":"web","state":"failed","pid":null,"restarts":5,"started_at_ms":1,
                "ready_at_ms":null,"last_exit":{"code":3,"signal":null,"timed_out":false},
                "reason":"why","log_end":9,"log_tail":"boom\n","keep_awake":false,"after":[]})
        );
    }

    #[test]
    fn policies_restart_on_what_they_say() {
        let clean = ProcessExit {
            code: Some(0),
            signal: None,
            timed_out: false,
        };
        let killed = ProcessExit {
            code: None,
            signal: Some(9),
            timed_out: false,
        };
        assert!(exit_is_clean(&clean) && !exit_is_clean(&killed));
        assert!(RestartPolicy::Always.restarts(false));
        assert!(!RestartPolicy::OnFailure.restarts(false));
        assert!(RestartPolicy::OnFailure.restarts(true));
        assert!(!RestartPolicy::Never.restarts(true));
    }

    #[test]
    fn the_stop_budget_is_the_longest_chain_of_timeouts() {
        assert_eq!(stop_budget_s(&[]), 0);
        let side_by_side = [service("a", &[], 5), service("b", &[], 7)];
        assert_eq!(stop_budget_s(&side_by_side), 7);
        let chain = [
            service("db", &[], 10),
            service("api", &["db"], 5),
            service("web", &["api"], 2),
            service("cron", &["db"], 30),
        ];
        assert_eq!(stop_budget_s(&chain), 40);
        assert_eq!(ready_budget_s(&chain), 180, "60 s each along db, api, web");
        // A cycle (refused before it gets here) still ends.
        let cycle = [service("a", &["b"], 1), service("b", &["a"], 1)];
        assert!(stop_budget_s(&cycle) > 0);
    }
}
