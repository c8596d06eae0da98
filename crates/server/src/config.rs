//! How the daemon is started.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::host_config::HostConfig;
use crate::public_url::PublicUrl;
use crate::runtimes::Runtimes;
pub use crate::tls::TlsConfig;

/// Everything the daemon needs; the CLI builds it from flags.
#[derive(Clone)]
pub struct ServerConfig {
    /// berth's data directory: `berth.db`, `admin.key`, `berth.url`, and the runtime's files.
    pub data_dir: PathBuf,
    /// Where the public API listens (`127.0.0.1:7070` by default; port 0 picks one).
    pub listen: SocketAddr,
    /// The runtimes boxes may run on and the default for new boxes
    /// ([`Runtimes::single`] for one).
    pub runtimes: Runtimes,
    /// How often the idle reclaimer looks for boxes past their idle timeout
    /// ([`DEFAULT_IDLE_CHECK`]; tests may make it shorter).
    pub idle_check: Duration,
    /// `berth.toml`: the gateway's overrides and extra roots, the secret store's key.
    pub host: HostConfig,
    /// Serve HTTPS instead of HTTP: certificate files or ACME (`None`: plain HTTP).
    pub tls: Option<TlsConfig>,
    /// berth's origin as browsers reach it (`--public-url`): pairing links are built on
    /// it; `None`: from each request's `Host`.
    pub public_url: Option<PublicUrl>,
    /// One host, a node, or an API replica (docs/cluster.md).
    pub role: crate::cluster::role::RoleConfig,
}

/// The idle reclaimer's default tick.
pub const DEFAULT_IDLE_CHECK: Duration = Duration::from_secs(1);

impl std::fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerConfig")
            .field("data_dir", &self.data_dir)
            .field("listen", &self.listen)
            .field("runtimes", &self.runtimes)
            .field("idle_check", &self.idle_check)
            .field("host", &self.host)
            .field("tls", &self.tls)
            .field("public_url", &self.public_url)
            .field("role", &self.role)
            .finish()
    }
}

/// File names inside the data directory (`berth.cert`: [`crate::tls::CERT_FILE`]).
pub const ADMIN_KEY_FILE: &str = "admin.key";
pub const URL_FILE: &str = "berth.url";
