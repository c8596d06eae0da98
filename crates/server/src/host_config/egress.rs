//! `[egress]` of berth.toml: the gateway's overrides, extra roots and per-box limits.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EgressHostConfig {
    /// Host name → fixed address; the only way past the gateway's address checks.
    #[serde(default)]
    pub resolve_overrides: HashMap<String, SocketAddr>,
    /// PEM files of CAs the gateway trusts upstream, in addition to the webpki roots.
    #[serde(default)]
    pub extra_roots: Vec<PathBuf>,
    /// Connections one box may have open through the gateway at once; one more is
    /// refused at once (audited `too_many_connections`).
    #[serde(default = "default_egress_max_connections")]
    pub max_connections_per_box: u64,
    /// A relay with no byte either way for this long is closed.
    #[serde(default = "default_egress_idle_timeout_secs")]
    pub idle_timeout_secs: u64,
    /// Each file of a box's audit log is at most this large before the next one starts.
    #[serde(default = "default_audit_max_file_bytes")]
    pub audit_max_file_bytes: u64,
    /// Files of a box's audit log kept (the oldest go first).
    #[serde(default = "default_audit_max_files")]
    pub audit_max_files: u64,
    /// Audit lines waiting for the writer; beyond it lines are dropped and counted.
    #[serde(default = "default_audit_queue")]
    pub audit_queue: u64,
}

impl Default for EgressHostConfig {
    fn default() -> Self {
        EgressHostConfig {
            resolve_overrides: HashMap::new(),
            extra_roots: Vec::new(),
            max_connections_per_box: default_egress_max_connections(),
            idle_timeout_secs: default_egress_idle_timeout_secs(),
            audit_max_file_bytes: default_audit_max_file_bytes(),
            audit_max_files: default_audit_max_files(),
            audit_queue: default_audit_queue(),
        }
    }
}

fn default_egress_max_connections() -> u64 {
    berth_egress::gateway::DEFAULT_MAX_CONNECTIONS_PER_BOX as u64
}

fn default_egress_idle_timeout_secs() -> u64 {
    berth_egress::gateway::DEFAULT_IDLE.as_secs()
}

fn default_audit_max_file_bytes() -> u64 {
    berth_egress::gateway::AuditLimits::default().max_file_bytes
}

fn default_audit_max_files() -> u64 {
    berth_egress::gateway::AuditLimits::default().max_files as u64
}

fn default_audit_queue() -> u64 {
    berth_egress::gateway::AuditLimits::default().queue as u64
}

impl EgressHostConfig {
    /// Each limit with its sane bounds (key, value, min, max), checked with the others': a
    /// zero would refuse every connection or lose the log.
    pub(super) fn limits(&self) -> [(&'static str, u64, u64, u64); 5] {
        [
            (
                "[egress] max_connections_per_box",
                self.max_connections_per_box,
                1,
                1 << 20,
            ),
            (
                "[egress] idle_timeout_secs",
                self.idle_timeout_secs,
                1,
                7 * 86400,
            ),
            (
                "[egress] audit_max_file_bytes",
                self.audit_max_file_bytes,
                4096,
                1 << 40,
            ),
            ("[egress] audit_max_files", self.audit_max_files, 1, 1000),
            ("[egress] audit_queue", self.audit_queue, 1, 1 << 20),
        ]
    }
}
