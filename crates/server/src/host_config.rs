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
//! ```

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The file name looked up in the data directory when no `--config` is given.
pub const HOST_CONFIG_FILE: &str = "berth.toml";
/// The secret store's key, in the data directory unless `[secrets] key_file` says otherwise.
pub const DEFAULT_SECRETS_KEY_FILE: &str = "secrets.key";
/// A config file larger than this is refused (it is a few lines).
const MAX_BYTES: u64 = 1024 * 1024;

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

/// `[server]`: what the public API server lets one client hold.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(from = "ServerHostConfigFile")]
pub struct ServerHostConfig {
    /// Connections served at once; more wait in the listen backlog until one closes.
    pub max_connections: usize,
    /// A request's headers (and an idle keep-alive connection's next request) must arrive
    /// within this many seconds.
    pub header_timeout_s: u64,
    /// A request body that sends nothing for this many seconds is cut.
    pub body_idle_timeout_s: u64,
    /// Long-lived streams (process output, streaming execs, event streams, file watches,
    /// terminals, port connections) one tenant may hold open at once.
    pub max_streams_per_tenant: usize,
    /// Connections from one address (an IPv6 /64) on which no request has authenticated.
    pub max_anonymous_connections_per_address: usize,
    /// A new connection's first request headers (and its TLS handshake) must arrive
    /// within this many seconds (at most `header_timeout_s` takes effect).
    pub first_request_timeout_s: u64,
    /// The share of `max_connections` one tenant can never take: kept for the others.
    pub connections_kept_for_others_percent: u64,
    /// `max_event_streams_per_tenant` as berth.toml gave it: the old name of
    /// `max_streams_per_tenant` (when that is absent, this is its value), warned about.
    pub old_max_event_streams_per_tenant: Option<usize>,
    /// A send to the client of a stream that keeps a box awake (a terminal's output, an
    /// exec's frames) that has not completed after this many seconds ends the stream.
    pub send_timeout_s: u64,
}

/// `[server]` as written in berth.toml.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ServerHostConfigFile {
    max_connections: Option<usize>,
    header_timeout_s: Option<u64>,
    body_idle_timeout_s: Option<u64>,
    max_streams_per_tenant: Option<usize>,
    /// Before the budget covered every stream, it was event streams' only.
    max_event_streams_per_tenant: Option<usize>,
    max_anonymous_connections_per_address: Option<usize>,
    first_request_timeout_s: Option<u64>,
    connections_kept_for_others_percent: Option<u64>,
    send_timeout_s: Option<u64>,
}

impl From<ServerHostConfigFile> for ServerHostConfig {
    fn from(file: ServerHostConfigFile) -> Self {
        let defaults = ServerHostConfig::default();
        ServerHostConfig {
            max_connections: file.max_connections.unwrap_or(defaults.max_connections),
            header_timeout_s: file.header_timeout_s.unwrap_or(defaults.header_timeout_s),
            body_idle_timeout_s: file
                .body_idle_timeout_s
                .unwrap_or(defaults.body_idle_timeout_s),
            max_streams_per_tenant: file
                .max_streams_per_tenant
                .or(file.max_event_streams_per_tenant)
                .unwrap_or(defaults.max_streams_per_tenant),
            max_anonymous_connections_per_address: file
                .max_anonymous_connections_per_address
                .unwrap_or(defaults.max_anonymous_connections_per_address),
            first_request_timeout_s: file
                .first_request_timeout_s
                .unwrap_or(defaults.first_request_timeout_s),
            connections_kept_for_others_percent: file
                .connections_kept_for_others_percent
                .unwrap_or(defaults.connections_kept_for_others_percent),
            old_max_event_streams_per_tenant: file.max_event_streams_per_tenant,
            send_timeout_s: file.send_timeout_s.unwrap_or(defaults.send_timeout_s),
        }
    }
}

impl Default for ServerHostConfig {
    fn default() -> Self {
        ServerHostConfig {
            max_connections: 1024,
            header_timeout_s: 10,
            body_idle_timeout_s: 30,
            max_streams_per_tenant: 128,
            // A browser opens about 6 connections to a host, and a NAT (an office, a
            // carrier's) puts many clients behind one address; a connection leaves this
            // count at its first signed-in request. 64 lets ten browsers behind one address
            // open at the same instant, and holds one address to 1/16 of the default 1024.
            max_anonymous_connections_per_address: 64,
            // A TLS handshake and a request's headers over a slow mobile link take a second
            // or two; a client that says nothing for 5 s is gone or an attack.
            first_request_timeout_s: 5,
            connections_kept_for_others_percent: 25,
            old_max_event_streams_per_tenant: None,
            // As long as a terminal's client may stay silent: a client on a bad link that
            // reads again within it keeps its stream.
            send_timeout_s: 90,
        }
    }
}

impl ServerHostConfig {
    /// What berth.toml should say instead, for the start's log.
    fn warnings(&self) -> Vec<String> {
        match self.old_max_event_streams_per_tenant {
            Some(old) => vec![format!(
                "[server] max_event_streams_per_tenant = {old} is the old name of \
                 max_streams_per_tenant, which counts every long-lived stream (not only event \
                 streams) and is {} now; rename the key (the old one is read only when the new \
                 one is absent)",
                self.max_streams_per_tenant
            )],
            None => Vec::new(),
        }
    }
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
}

impl Default for StorageHostConfig {
    fn default() -> Self {
        StorageHostConfig {
            min_free_percent: default_min_free_percent(),
            overcommit: default_overcommit(),
        }
    }
}

fn default_overcommit() -> f64 {
    1.0
}

fn default_min_free_percent() -> f64 {
    crate::disk_space::DEFAULT_MIN_FREE_PERCENT
}

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
    /// Each limit within sane bounds: a zero would refuse every connection or lose the log.
    fn check(&self, path: &Path) -> Result<(), HostConfigError> {
        let checks: [(&'static str, u64, u64, u64); 5] = [
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
        ];
        for (key, value, min, max) in checks {
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
        Ok(())
    }
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

/// Why the host config could not be used. Shown as `FILE[:LINE]: message`.
#[derive(Debug, thiserror::Error)]
pub enum HostConfigError {
    #[error("{}: cannot read the file", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: the file is larger than {MAX_BYTES} bytes", path.display())]
    TooLarge { path: PathBuf },
    #[error("{}{}: {}", path.display(), line.map(|l| format!(":{l}")).unwrap_or_default(), source.message())]
    Syntax {
        path: PathBuf,
        line: Option<usize>,
        /// Boxed: an error is rare, a `Result` of one is everywhere.
        #[source]
        source: Box<toml::de::Error>,
    },
    #[error("{}: [egress] extra_roots: {} must be an absolute path", path.display(), root.display())]
    RelativeRoot { path: PathBuf, root: PathBuf },
    #[error("{}: [storage] min_free_percent must be between 0 and 50, got {value}", path.display())]
    MinFreeOutOfRange { path: PathBuf, value: f64 },
    #[error("{}: [storage] overcommit must be between 1 and 100, got {value}", path.display())]
    OvercommitOutOfRange { path: PathBuf, value: f64 },
    #[error("{}: [ports] base_domain {value:?} {rule}", path.display())]
    BaseDomain {
        path: PathBuf,
        value: String,
        rule: &'static str,
    },
    #[error("{}: {key} must be between {min} and {max}, got {value}", path.display())]
    OutOfRange {
        path: PathBuf,
        key: &'static str,
        value: u64,
        min: u64,
        max: u64,
    },
}

impl HostConfig {
    /// Reads `path`; a missing file is an error (the caller asked for it by name).
    pub fn load(path: &Path) -> Result<HostConfig, HostConfigError> {
        let read = |source| HostConfigError::Read {
            path: path.to_path_buf(),
            source,
        };
        let len = std::fs::metadata(path).map_err(read)?.len();
        if len > MAX_BYTES {
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
        config.egress.check(path)?;
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
        for (key, value, min, max) in checks
            .into_iter()
            .chain(self.ports.limits())
            .chain(wakeups)
            .chain(streams)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<HostConfig, HostConfigError> {
        HostConfig::parse(Path::new("berth.toml"), text)
    }

    #[test]
    fn an_empty_file_is_the_defaults() {
        assert_eq!(parse("").unwrap(), HostConfig::default());
        let dir = Path::new("/var/lib/berth");
        assert_eq!(
            HostConfig::default().secrets.key_file(dir),
            dir.join("secrets.key")
        );
    }

    #[test]
    fn reads_every_setting() {
        let config = parse(
            r#"
[egress]
resolve_overrides = { "api.example.test" = "127.0.0.1:8443", "v6.example.test" = "[::1]:443" }
extra_roots = ["/etc/berth/ca.pem"]

[secrets]
key_file = "/etc/berth/secrets.key"

[storage]
min_free_percent = 10
"#,
        )
        .unwrap();
        assert_eq!(config.storage.min_free_percent, 10.0);
        assert_eq!(
            parse("").unwrap().storage.min_free_percent,
            crate::disk_space::DEFAULT_MIN_FREE_PERCENT
        );
        for bad in ["-1", "51", "nan"] {
            let err = parse(&format!("[storage]\nmin_free_percent = {bad}\n")).unwrap_err();
            assert!(
                matches!(err, HostConfigError::MinFreeOutOfRange { .. }),
                "{bad}: {err}"
            );
        }
        assert_eq!(
            config.egress.resolve_overrides["api.example.test"],
            "127.0.0.1:8443".parse().unwrap()
        );
        assert_eq!(
            config.egress.resolve_overrides["v6.example.test"],
            "[::1]:443".parse().unwrap()
        );
        assert_eq!(
            config.egress.extra_roots,
            [PathBuf::from("/etc/berth/ca.pem")]
        );
        assert_eq!(
            config.secrets.key_file(Path::new("/d")),
            PathBuf::from("/etc/berth/secrets.key")
        );
    }

    #[test]
    fn mistakes_name_the_line() {
        let cases = [
            (
                "[egress]\nresolve_overrides = { \"a.test\" = \"nope\" }\n",
                2,
            ),
            // An unknown key is reported at its table.
            ("\n[egress]\nallow = [\"x\"]\n", 2),
            ("\n\n[gateway]\n", 3),
        ];
        for (text, line) in cases {
            let err = parse(text).unwrap_err();
            let HostConfigError::Syntax { line: got, .. } = &err else {
                panic!("{text:?}: {err}");
            };
            assert_eq!(*got, Some(line), "{text:?}: {err}");
            assert!(
                err.to_string().starts_with(&format!("berth.toml:{line}: ")),
                "{err}"
            );
        }
    }

    #[test]
    fn events_and_server_limits_have_defaults_and_bounds() {
        let config = parse(
            "[events]\nmax_bytes_per_box = 10485760\nmax_age_days = 7\n\
             [server]\nmax_connections = 16\nmax_streams_per_tenant = 2\n",
        )
        .unwrap();
        assert_eq!(config.events.max_bytes_per_box, 10 << 20);
        assert_eq!(config.events.max_age_days, 7);
        assert_eq!(config.events.prune_every_s, 60);
        assert_eq!(config.server.max_connections, 16);
        assert_eq!(config.server.header_timeout_s, 10);
        assert_eq!(config.server.max_streams_per_tenant, 2);
        assert!(config.warnings().is_empty());
        let defaults = parse("").unwrap();
        assert_eq!(defaults.events.max_bytes_per_box, 64 << 20);
        assert_eq!(defaults.events.max_age_days, 30);
        assert_eq!(defaults.server.max_connections, 1024);
        assert_eq!(defaults.server, ServerHostConfig::default());
        assert_eq!(defaults.server.max_streams_per_tenant, 128);
        assert_eq!(defaults.server.send_timeout_s, 90);
        assert_eq!(
            (
                defaults.terminals.ping_every_s,
                defaults.terminals.silent_limit_s
            ),
            (30, 90)
        );
        let set = parse(
            "[server]\nsend_timeout_s = 5\n[terminals]\nping_every_s = 1\nsilent_limit_s = 2\n",
        )
        .unwrap();
        assert_eq!(set.server.send_timeout_s, 5);
        assert_eq!(
            (set.terminals.ping_every_s, set.terminals.silent_limit_s),
            (1, 2)
        );
        for bad in [
            "[events]\nmax_bytes_per_box = 1000\n",
            "[server]\nmax_connections = 0\n",
            "[server]\nheader_timeout_s = 0\n",
            "[server]\nmax_streams_per_tenant = 0\n",
            "[server]\nmax_anonymous_connections_per_address = 0\n",
            "[server]\nfirst_request_timeout_s = 0\n",
            "[server]\nconnections_kept_for_others_percent = 91\n",
            "[server]\nsend_timeout_s = 0\n",
            "[terminals]\nping_every_s = 0\n",
            // Silent for no longer than between two pings: a live client would be cut.
            "[terminals]\nping_every_s = 30\nsilent_limit_s = 30\n",
        ] {
            let err = parse(bad).unwrap_err();
            assert!(
                matches!(err, HostConfigError::OutOfRange { .. }),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn the_old_event_stream_key_still_sets_the_stream_budget_with_a_warning() {
        let config = parse("[server]\nmax_event_streams_per_tenant = 7\n").unwrap();
        assert_eq!(config.server.max_streams_per_tenant, 7);
        let warnings = config.warnings();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains("max_event_streams_per_tenant = 7")
                && warnings[0].contains("rename"),
            "{warnings:?}"
        );
        // The new key wins; the old one is still named.
        let both =
            parse("[server]\nmax_event_streams_per_tenant = 7\nmax_streams_per_tenant = 9\n")
                .unwrap();
        assert_eq!(both.server.max_streams_per_tenant, 9);
        assert_eq!(both.warnings().len(), 1);
        // Out of range under its old name too.
        let err = parse("[server]\nmax_event_streams_per_tenant = 0\n").unwrap_err();
        assert!(err.to_string().contains("max_streams_per_tenant"), "{err}");
        // A misspelt key is still refused.
        let err = parse("[server]\nmax_stream_per_tenant = 9\n").unwrap_err();
        assert!(matches!(err, HostConfigError::Syntax { .. }), "{err}");
    }

    #[test]
    fn egress_limits_have_defaults_and_bounds() {
        let defaults = parse("").unwrap().egress;
        assert_eq!(defaults.max_connections_per_box, 256);
        assert_eq!(defaults.idle_timeout_secs, 300);
        assert_eq!(defaults.audit_max_files, 4);
        let set = parse("[egress]\nmax_connections_per_box = 8\nidle_timeout_secs = 60\naudit_max_file_bytes = 1048576\naudit_max_files = 2\naudit_queue = 16\n").unwrap().egress;
        assert_eq!(
            (
                set.max_connections_per_box,
                set.idle_timeout_secs,
                set.audit_max_file_bytes,
                set.audit_max_files,
                set.audit_queue
            ),
            (8, 60, 1 << 20, 2, 16)
        );
        for bad in [
            "[egress]\nmax_connections_per_box = 0\n",
            "[egress]\nidle_timeout_secs = 0\n",
            "[egress]\naudit_max_file_bytes = 10\n",
            "[egress]\naudit_max_files = 0\n",
            "[egress]\naudit_queue = 0\n",
        ] {
            let err = parse(bad).unwrap_err();
            assert!(
                matches!(err, HostConfigError::OutOfRange { .. }),
                "{bad}: {err}"
            );
            assert!(err.to_string().contains("[egress]"), "{err}");
        }
    }

    #[test]
    fn extra_roots_must_be_absolute() {
        let err = parse("[egress]\nextra_roots = [\"ca.pem\"]\n").unwrap_err();
        assert!(matches!(err, HostConfigError::RelativeRoot { .. }), "{err}");
    }

    #[test]
    fn a_missing_default_file_is_fine_a_named_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            HostConfig::load_default(dir.path()).unwrap(),
            HostConfig::default()
        );
        let err = HostConfig::load(&dir.path().join("nope.toml")).unwrap_err();
        assert!(matches!(err, HostConfigError::Read { .. }), "{err}");
    }

    #[test]
    fn overcommit_defaults_to_none_and_is_bounded() {
        assert_eq!(parse("").unwrap().storage.overcommit, 1.0);
        let config = parse("[storage]\novercommit = 4\n").unwrap();
        assert_eq!(config.storage.overcommit, 4.0);
        for bad in ["0.5", "0", "101", "nan"] {
            let err = parse(&format!("[storage]\novercommit = {bad}\n")).unwrap_err();
            assert!(
                matches!(err, HostConfigError::OvercommitOutOfRange { .. }),
                "{bad}: {err}"
            );
        }
    }
}

#[cfg(test)]
mod ports_tests {
    use super::*;

    #[test]
    fn ports_settings_are_read_and_checked() {
        let path = Path::new("berth.toml");
        let config = HostConfig::parse(
            path,
            "[ports]\nbase_domain = \"boxes.example.com\"\nlisten_wait_s = 5\n",
        )
        .unwrap();
        assert_eq!(
            config.ports.base_domain.as_deref(),
            Some("boxes.example.com")
        );
        assert_eq!(config.ports.listen_wait_s, 5);
        assert_eq!(config.ports.max_connections_per_tenant, 64);
        let err = HostConfig::parse(path, "[ports]\nbase_domain = \"Example\"\n").unwrap_err();
        assert!(matches!(err, HostConfigError::BaseDomain { .. }), "{err}");
        let err = HostConfig::parse(path, "[ports]\nlisten_wait_s = 601\n").unwrap_err();
        assert!(
            err.to_string()
                .contains("[ports] listen_wait_s must be between 0 and 600"),
            "{err}"
        );
    }
}
