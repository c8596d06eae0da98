//! The JSON of E2B's control plane, as its OpenAPI spec (`spec/openapi.yml`) and the pinned
//! SDKs' generated models have it: camelCase, a few snake_case exceptions
//! (`allow_internet_access`), and `ID` spelled upper-case. Request bodies refuse unknown
//! fields (a field berth does not know may ask for something it would silently not do).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `POST /sandboxes` and `POST /v2/sandboxes` (`NewSandbox`, `NewSandboxV2`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NewSandbox {
    #[serde(rename = "templateID")]
    pub template_id: String,
    /// Seconds; absent: the version's default.
    #[serde(default)]
    pub timeout: Option<i64>,
    #[serde(default)]
    pub auto_pause: Option<bool>,
    #[serde(default)]
    pub auto_pause_memory: Option<bool>,
    #[serde(default)]
    pub auto_resume: Option<AutoResume>,
    /// v1 only; every sandbox is secured (`access_token.rs`).
    #[serde(default)]
    pub secure: Option<bool>,
    #[serde(default, rename = "allow_internet_access")]
    pub allow_internet_access: Option<bool>,
    #[serde(default)]
    pub network: Option<NetworkConfig>,
    #[serde(default)]
    pub metadata: Option<BTreeMap<String, String>>,
    #[serde(default)]
    pub env_vars: Option<BTreeMap<String, String>>,
    /// Only `null` (or absent) is honoured: berth runs no MCP gateway in boxes.
    #[serde(default)]
    pub mcp: Option<Value>,
    #[serde(default)]
    pub iam: Option<Value>,
    #[serde(default)]
    pub volume_mounts: Option<Vec<Value>>,
}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct AutoResume {
    pub enabled: bool,
}

/// `SandboxNetworkConfig`: berth honours the part that is an allowlist of host names
/// (`create.rs`), and refuses the rest.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NetworkConfig {
    #[serde(default)]
    pub allow_public_traffic: Option<bool>,
    #[serde(default)]
    pub allow_out: Option<Vec<String>>,
    #[serde(default)]
    pub deny_out: Option<Vec<String>>,
    #[serde(default)]
    pub dns_servers: Option<Vec<String>>,
    #[serde(default)]
    pub egress_proxy: Option<Value>,
    #[serde(default)]
    pub mask_request_host: Option<String>,
    #[serde(default)]
    pub https_ports: Option<Vec<Value>>,
    #[serde(default)]
    pub rules: Option<Value>,
}

/// `POST /sandboxes/{id}/connect` (`ConnectSandbox`).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ConnectSandbox {
    pub timeout: i64,
    #[serde(default)]
    pub memory: Option<bool>,
}

/// `POST /v2/sandboxes/{id}/connect` (`ConnectSandboxV2`).
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ConnectSandboxV2 {
    #[serde(default)]
    pub timeout: Option<i64>,
    /// `false`: come back from disk alone (a cold boot), not from memory.
    #[serde(default)]
    pub memory: Option<bool>,
}

/// `POST /sandboxes/{id}/resume` (`ResumedSandbox`, deprecated by E2B for `connect`).
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ResumedSandbox {
    #[serde(default)]
    pub timeout: Option<i64>,
    /// Deprecated by E2B, and ignored: the timeout action is the sandbox's own.
    #[serde(default)]
    pub auto_pause: Option<bool>,
    #[serde(default)]
    pub memory: Option<bool>,
}

/// `POST /sandboxes/{id}/pause` (`SandboxPauseRequest`, optional).
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PauseRequest {
    /// `false`: keep only the disk (berth stops the box).
    #[serde(default)]
    pub memory: Option<bool>,
    /// berth's pause does not need the guest's agent: accepted, with nothing to check.
    #[serde(default)]
    pub require_healthy_guest: Option<bool>,
}

/// `POST /sandboxes/{id}/timeout` (`SandboxTimeoutRequest`).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TimeoutRequest {
    pub timeout: i64,
}

/// `POST /sandboxes/{id}/refreshes` (`SandboxRefreshRequest`).
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RefreshRequest {
    #[serde(default)]
    pub duration: Option<i64>,
}

/// `Sandbox`: what create, connect and resume answer.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Sandbox {
    #[serde(rename = "templateID")]
    pub template_id: String,
    #[serde(rename = "sandboxID")]
    pub sandbox_id: String,
    pub alias: String,
    #[serde(rename = "clientID")]
    pub client_id: &'static str,
    pub envd_version: &'static str,
    pub envd_access_token: String,
    /// berth's port URLs take the API key or a share link, never this token: always null.
    pub traffic_access_token: Option<String>,
    pub domain: Option<String>,
}

/// `SandboxState`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum SandboxState {
    Running,
    Paused,
}

impl SandboxState {
    pub fn parse(s: &str) -> Option<SandboxState> {
        match s {
            "running" => Some(SandboxState::Running),
            "paused" => Some(SandboxState::Paused),
            _ => None,
        }
    }
}

/// `SandboxLifecycle`.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Lifecycle {
    pub auto_resume: bool,
    /// `kill` or `pause`.
    pub on_timeout: &'static str,
}

/// `SandboxDetail`: `GET /sandboxes/{id}`.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SandboxDetail {
    #[serde(flatten)]
    pub listed: ListedSandbox,
    pub envd_access_token: String,
    pub allow_internet_access: Option<bool>,
    pub domain: Option<String>,
    pub lifecycle: Lifecycle,
    /// For a paused sandbox: `full` (processes kept) or `filesystem` (only the disk).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pause_mode: Option<&'static str>,
}

/// `ListedSandbox`: an entry of `GET /v2/sandboxes`.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ListedSandbox {
    #[serde(rename = "templateID")]
    pub template_id: String,
    pub alias: String,
    #[serde(rename = "sandboxID")]
    pub sandbox_id: String,
    #[serde(rename = "clientID")]
    pub client_id: &'static str,
    /// RFC 3339.
    pub started_at: String,
    pub end_at: String,
    #[serde(rename = "cpuCount")]
    pub cpu_count: u64,
    #[serde(rename = "memoryMB")]
    pub memory_mb: u64,
    #[serde(rename = "diskSizeMB")]
    pub disk_size_mb: u64,
    pub metadata: BTreeMap<String, String>,
    pub state: SandboxState,
    pub envd_version: &'static str,
    /// E2B volumes are not berth's (a box has its one volume): always empty.
    pub volume_mounts: Vec<Value>,
}

/// `SandboxMetric`.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SandboxMetric {
    pub timestamp: String,
    pub timestamp_unix: i64,
    pub cpu_count: u64,
    /// Not measured by berth's runtimes: always 0.
    pub cpu_used_pct: f64,
    pub mem_used: u64,
    pub mem_total: u64,
    /// Not measured: always 0.
    pub mem_cache: u64,
    pub disk_used: u64,
    pub disk_total: u64,
}

/// `SandboxesWithMetrics`: `GET /sandboxes/metrics`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SandboxesWithMetrics {
    pub sandboxes: BTreeMap<String, SandboxMetric>,
}

/// `Error`: every error's body.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ErrorBody {
    pub code: u16,
    pub message: String,
    /// E2B's machine-readable code, where it has one for the case.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_code: Option<&'static str>,
}
