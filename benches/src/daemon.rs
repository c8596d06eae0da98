//! What every benchmark shares: its sizes from the environment, its main, and a real daemon
//! (sandbox runtime on runc) served in-process on a loopback port.

use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use berth_runtime::sandbox::{SandboxConfig, SandboxRuntime};
use berth_server::{Server, ServerConfig, ServerError};

pub type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

pub const OCI_RUNTIME: &str = "runc";

/// A sample count from `var`, else `default`.
pub fn count(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Runs `bench` on a multi-thread runtime when cargo asks for benchmarks (`--bench`); a
/// plain `cargo test` of the bench targets runs nothing.
pub fn main<F: Future<Output = BenchResult<()>>>(bench: impl FnOnce() -> F) {
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build();
    let result = runtime
        .map_err(Into::into)
        .and_then(|rt| rt.block_on(bench()));
    if let Err(e) = result {
        eprintln!("bench failed: {e}");
        std::process::exit(1);
    }
}

/// A daemon serving in this process until [`Daemon::stop`].
pub struct Daemon {
    pub addr: SocketAddr,
    pub key: String,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<(), ServerError>>,
}

impl Daemon {
    /// A new daemon with its data in `data_dir`.
    pub async fn start(data_dir: &Path) -> BenchResult<Daemon> {
        let config = Daemon::config(data_dir, "127.0.0.1:0".parse()?)?;
        let server = Server::bind(config).await?;
        let key = server
            .admin_key_created
            .clone()
            .ok_or("no admin key on a new data dir")?;
        Ok(Daemon::serve(server, key))
    }

    /// A single host's config on `data_dir` (the sandbox runtime on runc), listening on
    /// `listen`: what a cluster's members change.
    pub fn config(data_dir: &Path, listen: SocketAddr) -> BenchResult<ServerConfig> {
        let runtime = SandboxRuntime::new(SandboxConfig {
            data_dir: data_dir.to_path_buf(),
            oci_runtime: OCI_RUNTIME.into(),
            init_bin: berth_runtime::init_binary()?,
        })?;
        Ok(ServerConfig {
            data_dir: data_dir.to_path_buf(),
            listen,
            runtimes: berth_server::Runtimes::single(Arc::new(runtime)),
            idle_check: berth_server::config::DEFAULT_IDLE_CHECK,
            host: Default::default(),
            tls: None,
            public_url: None,
            role: Default::default(),
        })
    }

    /// Serves a bound server in this process.
    pub fn serve(server: Server, key: String) -> Daemon {
        let addr = server.local_addr();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(server.serve(async {
            let _ = stopped.await;
        }));
        Daemon {
            addr,
            key,
            stop,
            task,
        }
    }

    /// Ends the daemon as a crash would: nothing is stopped, its lease is no longer
    /// renewed, its boxes' processes are left as they are.
    pub async fn crash(self) {
        self.task.abort();
        let _ = self.task.await;
    }

    /// Shuts the daemon down (every box is stopped).
    pub async fn stop(self) -> BenchResult<()> {
        let _ = self.stop.send(());
        self.task.await??;
        Ok(())
    }
}
