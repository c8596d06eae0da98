//! The host's own settings: `<data-dir>/berth.toml`, or the file `berth up --config` names.
//! Everything has a default, so the file is optional. The format is in `docs/config.md`.
//!
//! ```toml
//! [egress]
//! # Name → address, bypassing DNS AND the forbidden-address checks. For tests and for
//! # pinning internal services only.
//! resolve_overrides = { "api.example.test" = "127.0.0.1:8443" }
//! # CAs the gateway trusts upstream besides the public web roots (PEM files).
//! extra_roots = ["/etc/berth/internal-ca.pem"]
//! # Per box: connections open at once, and how long a silent relay stays open.
//! max_connections_per_box = 256
//! idle_timeout_secs = 300
//! # The audit log: file size, files kept per box, lines queued for the writer.
//! audit_max_file_bytes = 16777216
//! audit_max_files = 4
//! audit_queue = 8192
//!
//! [secrets]
//! # The key the secret store is encrypted with; keep it off the database's backups.
//! key_file = "/etc/berth/secrets.key"
//!
//! [storage]
//! # Below this much free space on the data dir's disk, new boxes and volume growth are
//! # refused (everything else goes on).
//! min_free_percent = 5
//! # What sparse volumes may still take counts against it, divided by this (1.0: none
//! # of it may be promised twice).
//! overcommit = 1.0
//! # Durable copies of boxes' volumes (none without a url): a directory, or S3 with
//! # credentials from the environment or credentials_file (`docs/config.md`).
//! url = "s3://berth-volumes/prod"
//! sync_interval_s = 300
//! keep_copies = 3
//! gc_interval_s = 3600
//!
//! [store]
//! # SQLite in the data dir unless this names a PostgreSQL database (`store.rs`).
//! url = "postgres://berth@db.internal/berth"
//! password_file = "/etc/berth/db-password"
//! ```

use std::path::{Path, PathBuf};

use serde::Deserialize;

mod egress;
mod error;
mod server;
pub(crate) mod store;
#[cfg(test)]
mod tests;

pub use egress::EgressHostConfig;
pub use error::HostConfigError;
pub use server::ServerHostConfig;
pub use store::{StoreConfigError, StoreHostConfig, StoreLocation, PASSWORD_VARS};

/// The file name looked up in the data directory when no `--config` is given.
pub const HOST_CONFIG_FILE: &str = "berth.toml";
/// The secret store's key, in the data directory unless `[secrets] key_file` says otherwise.
pub const DEFAULT_SECRETS_KEY_FILE: &str = "secrets.key";

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostConfig {
    #[serde(default)]
    pub egress: EgressHostConfig,
    #[serde(default)]
    pub secrets: SecretsHostConfig,
    #[serde(default)]
    pub storage: StorageHostConfig,
    #[serde(default)]
    pub events: EventsHostConfig,
    #[serde(default)]
    pub server: ServerHostConfig,
    /// `[ports]`: a box's ports through berth (`crate::ports::config`).
    #[serde(default)]
    pub ports: crate::ports::config::PortsHostConfig,
    /// `[push]`: Web Push (`crate::push::config`).
    #[serde(default)]
    pub push: crate::push::config::PushHostConfig,
    /// `[wakeups]`: limits of scheduled wakeups (`crate::lifecycle::wakeups::config`).
    #[serde(default)]
    pub wakeups: crate::lifecycle::wakeups::config::WakeupsHostConfig,
    /// `[terminals]`: when a terminal's client counts as gone (`crate::stream_limits`).
    #[serde(default)]
    pub terminals: crate::stream_limits::TerminalsHostConfig,
    /// `[webhooks]`: where and how hard webhooks are delivered (`crate::webhooks::config`).
    #[serde(default)]
    pub webhooks: crate::webhooks::config::WebhooksHostConfig,
    /// `[store]`: SQLite in the data dir, or a shared PostgreSQL (`store.rs`).
    #[serde(default)]
    pub store: StoreHostConfig,
    /// `[memory]`: how long boxes' memory snapshots are kept (`crate::memory`).
    #[serde(default)]
    pub memory: MemoryHostConfig,
    /// `[backup]`: scheduled backups of boxes to a directory (`crate::backup::schedule`).
    #[serde(default)]
    pub backup: crate::backup::config::BackupHostConfig,
}

/// `[memory]`: the retention of boxes' memory snapshots.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryHostConfig {
    #[serde(default)]
    pub retention: berth_protocol::memory_history::Retention,
}

/// `[events]`: how much of each box's event log the store keeps (the harness's own
/// transcript stays on the box's volume).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventsHostConfig {
    /// Past this many bytes of kept events, a box's oldest events are pruned.
    #[serde(default = "default_events_max_bytes")]
    pub max_bytes_per_box: u64,
    /// Events older than this many days are pruned.
    #[serde(default = "default_events_max_age_days")]
    pub max_age_days: u64,
    /// How often the pruner looks (it also runs when a box goes over its budget).
    #[serde(default = "default_events_prune_every_s")]
    pub prune_every_s: u64,
}

impl Default for EventsHostConfig {
    fn default() -> Self {
        EventsHostConfig {
            max_bytes_per_box: default_events_max_bytes(),
            max_age_days: default_events_max_age_days(),
            prune_every_s: default_events_prune_every_s(),
        }
    }
}

fn default_events_max_bytes() -> u64 {
    64 << 20
}

fn default_events_max_age_days() -> u64 {
    30
}

fn default_events_prune_every_s() -> u64 {
    60
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StorageHostConfig {
    /// Percent of the data dir's file system that must stay free (0 to 50).
    #[serde(default = "default_min_free_percent")]
    pub min_free_percent: f64,
    /// How far sparse volumes may be promised past the free space (1 to 100): what boxes'
    /// volumes may still take, divided by this, counts against `min_free_percent`. 1.0:
    /// no overcommit.
    #[serde(default = "default_overcommit")]
    pub overcommit: f64,
    /// Where boxes' durable copies go (the chunk store): an absolute path or `file:///…`,
    /// or `s3://bucket/prefix`. `None`: no copies are kept.
    #[serde(default)]
    pub url: Option<String>,
    /// S3 credentials (`access_key_id`, `secret_access_key`), else the environment's.
    #[serde(default)]
    pub credentials_file: Option<PathBuf>,
    /// How often a running box's volume is copied (0: only when it goes to sleep).
    #[serde(default = "default_sync_interval_s")]
    pub sync_interval_s: u64,
    /// Copies kept per box (at least 2: an upload builds on the one before).
    #[serde(default = "default_keep_copies")]
    pub keep_copies: u64,
    /// How often chunks no kept copy names are deleted.
    #[serde(default = "default_gc_interval_s")]
    pub gc_interval_s: u64,
}

impl Default for StorageHostConfig {
    fn default() -> Self {
        StorageHostConfig {
            min_free_percent: default_min_free_percent(),
            overcommit: default_overcommit(),
            url: None,
            credentials_file: None,
            sync_interval_s: default_sync_interval_s(),
            keep_copies: default_keep_copies(),
            gc_interval_s: default_gc_interval_s(),
        }
    }
}

fn default_sync_interval_s() -> u64 {
    300
}

fn default_keep_copies() -> u64 {
    3
}

fn default_gc_interval_s() -> u64 {
    3600
}

fn default_overcommit() -> f64 {
    1.0
}

fn default_min_free_percent() -> f64 {
    crate::disk_space::DEFAULT_MIN_FREE_PERCENT
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecretsHostConfig {
    /// `None`: `<data-dir>/secrets.key`.
    #[serde(default)]
    pub key_file: Option<PathBuf>,
}

impl SecretsHostConfig {
    /// Where the secret store's key lives for a daemon on `data_dir`.
    pub fn key_file(&self, data_dir: &Path) -> PathBuf {
        self.key_file
            .clone()
            .unwrap_or_else(|| data_dir.join(DEFAULT_SECRETS_KEY_FILE))
    }
}

impl HostConfig {
    /// Reads `path`; a missing file is an error (the caller asked for it by name).
    pub fn load(path: &Path) -> Result<HostConfig, HostConfigError> {
        let read = |source| HostConfigError::Read {
            path: path.to_path_buf(),
            source,
        };
        let len = std::fs::metadata(path).map_err(read)?.len();
        if len > error::MAX_BYTES {
            return Err(HostConfigError::TooLarge {
                path: path.to_path_buf(),
            });
        }
        let text = std::fs::read_to_string(path).map_err(read)?;
        HostConfig::parse(path, &text)
    }

    /// `<data-dir>/berth.toml` when it exists, else the defaults.
    pub fn load_default(data_dir: &Path) -> Result<HostConfig, HostConfigError> {
        let path = data_dir.join(HOST_CONFIG_FILE);
        match std::fs::symlink_metadata(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(HostConfig::default()),
            _ => HostConfig::load(&path),
        }
    }

    /// Parses the text of `path` (named in errors).
    pub fn parse(path: &Path, text: &str) -> Result<HostConfig, HostConfigError> {
        let config: HostConfig =
            toml::from_str(text).map_err(|source: toml::de::Error| HostConfigError::Syntax {
                path: path.to_path_buf(),
                line: source
                    .span()
                    .map(|span| text[..span.start.min(text.len())].lines().count().max(1)),
                source: Box::new(source),
            })?;
        if let Some(root) = config.egress.extra_roots.iter().find(|r| r.is_relative()) {
            return Err(HostConfigError::RelativeRoot {
                path: path.to_path_buf(),
                root: root.clone(),
            });
        }
        config.check_limits(path)?;
        let min_free = config.storage.min_free_percent;
        if !(0.0..=50.0).contains(&min_free) {
            return Err(HostConfigError::MinFreeOutOfRange {
                path: path.to_path_buf(),
                value: min_free,
            });
        }
        let overcommit = config.storage.overcommit;
        if !(1.0..=100.0).contains(&overcommit) {
            return Err(HostConfigError::OvercommitOutOfRange {
                path: path.to_path_buf(),
                value: overcommit,
            });
        }
        Ok(config)
    }
}

impl HostConfig {
    /// What the file should say instead (old keys still read), for the start's log.
    pub fn warnings(&self) -> Vec<String> {
        self.server.warnings()
    }

    /// `[events]` and `[server]` within sane bounds (a zero would stop the daemon working).
    fn check_limits(&self, path: &Path) -> Result<(), HostConfigError> {
        let (events, server) = (&self.events, &self.server);
        let checks: [(&'static str, u64, u64, u64); 10] = [
            // At least two of the largest events (1 MiB each) fit.
            (
                "[events] max_bytes_per_box",
                events.max_bytes_per_box,
                2 << 20,
                u64::MAX,
            ),
            ("[events] max_age_days", events.max_age_days, 1, 36500),
            ("[events] prune_every_s", events.prune_every_s, 1, 86400),
            (
                "[server] max_connections",
                server.max_connections as u64,
                1,
                1 << 20,
            ),
            (
                "[server] header_timeout_s",
                server.header_timeout_s,
                1,
                3600,
            ),
            (
                "[server] body_idle_timeout_s",
                server.body_idle_timeout_s,
                1,
                3600,
            ),
            (
                "[server] max_streams_per_tenant",
                server.max_streams_per_tenant as u64,
                1,
                1 << 20,
            ),
            (
                "[server] max_anonymous_connections_per_address",
                server.max_anonymous_connections_per_address as u64,
                1,
                1 << 20,
            ),
            (
                "[server] first_request_timeout_s",
                server.first_request_timeout_s,
                1,
                3600,
            ),
            (
                "[server] connections_kept_for_others_percent",
                server.connections_kept_for_others_percent,
                0,
                90,
            ),
        ];
        let wakeups = self.wakeups.limits();
        let send_timeout = ("[server] send_timeout_s", server.send_timeout_s, 1, 3600);
        let streams = self.terminals.limits().into_iter().chain([send_timeout]);
        let storage = [
            (
                "[storage] sync_interval_s",
                self.storage.sync_interval_s,
                0,
                86400,
            ),
            ("[storage] keep_copies", self.storage.keep_copies, 2, 1000),
            (
                "[storage] gc_interval_s",
                self.storage.gc_interval_s,
                60,
                7 * 86400,
            ),
        ];
        let store = (
            "[store] max_connections",
            self.store.max_connections as u64,
            1,
            1000,
        );
        for (key, value, min, max) in checks
            .into_iter()
            .chain(self.egress.limits())
            .chain(self.ports.limits())
            .chain(wakeups)
            .chain(streams)
            .chain(storage)
            .chain([store])
        {
            if !(min..=max).contains(&value) {
                return Err(HostConfigError::OutOfRange {
                    path: path.to_path_buf(),
                    key,
                    value,
                    min,
                    max,
                });
            }
        }
        if let Some(rule) = self.ports.base_domain_rule() {
            return Err(HostConfigError::BaseDomain {
                path: path.to_path_buf(),
                value: self.ports.base_domain.clone().unwrap_or_default(),
                rule,
            });
        }
        Ok(())
    }
}
