//! How the daemon is started.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use berth_runtime::Runtime;

use crate::host_config::HostConfig;

/// Everything the daemon needs; the CLI builds it from flags.
#[derive(Clone)]
pub struct ServerConfig {
    /// berth's data directory: `berth.db`, `admin.key`, `berth.url`, and the runtime's files.
    pub data_dir: PathBuf,
    /// Where the public API listens (`127.0.0.1:7070` by default; port 0 picks one).
    pub listen: SocketAddr,
    pub runtime: Arc<dyn Runtime>,
    /// How often the idle reclaimer looks for boxes past their idle timeout
    /// ([`DEFAULT_IDLE_CHECK`]; tests may make it shorter).
    pub idle_check: Duration,
    /// `berth.toml`: the gateway's overrides and extra roots, the secret store's key.
    pub host: HostConfig,
}

/// The idle reclaimer's default tick.
pub const DEFAULT_IDLE_CHECK: Duration = Duration::from_secs(1);

impl std::fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerConfig")
            .field("data_dir", &self.data_dir)
            .field("listen", &self.listen)
            .field("runtime", &self.runtime.name())
            .field("idle_check", &self.idle_check)
            .field("host", &self.host)
            .finish()
    }
}

/// File names inside the data directory.
pub const ADMIN_KEY_FILE: &str = "admin.key";
pub const URL_FILE: &str = "berth.url";
