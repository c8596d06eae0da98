//! `berth up`: run the daemon in the foreground.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use berth_runtime::sandbox::{SandboxConfig, SandboxRuntime};
use berth_server::runtimes::{RuntimeEntry, RuntimeState, Runtimes};
use clap::Args;
use tokio::signal::unix::{signal, SignalKind};

#[derive(Debug, Args)]
#[command(after_help = "\
Needs root, an OCI runtime and the static berth-init binary ($BERTH_INIT_BIN, else \
berth-init beside this executable). On its first start the daemon creates an admin API \
key, prints it once and keeps it in <data dir>/admin.key (mode 0600); it writes its URL to \
<data dir>/berth.url so that client commands on this host find it. Logs go to stderr \
(filter with RUST_LOG; default info). SIGINT or SIGTERM stops it gracefully.

HTTPS: --tls-cert and --tls-key serve a certificate you made (PEM files, reloaded within \
seconds when they change; a bad new pair is logged and the old one kept). --acme-domain \
gets one from an ACME CA (Let's Encrypt unless --acme-directory), validated with \
TLS-ALPN-01 on this listener, so the CA must reach it on port 443 (--listen 0.0.0.0:443); \
the account and certificate live in <data dir>/acme/ and it is renewed with a third of its \
life left. With TLS, berth.url holds https:// and <data dir>/berth.cert the certificate \
served, which client commands on this host pin. See docs/tls.md.")]
pub struct UpArgs {
    /// The address the HTTP API listens on (port 0 picks a free port).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7070")]
    pub listen: SocketAddr,
    /// The OCI runtime that runs the boxes: runc, crun or runsc (a name in PATH, or a path).
    #[arg(long, value_name = "RUNTIME", default_value = "runc")]
    pub oci_runtime: String,
    /// The host config file (egress resolve overrides and extra roots, the secret store's
    /// key file); default: <data dir>/berth.toml when it exists. See docs/config.md.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// How log lines are written to stderr: text, or json (one object a line with
    /// timestamp, level, target, fields, and the span's request_id and box_id; see
    /// docs/metrics.md).
    #[arg(long, value_name = "FORMAT", value_enum, default_value_t = crate::logging::LogFormat::Text)]
    pub log_format: crate::logging::LogFormat,
    /// The runtime of boxes created without `--runtime`: sandbox (containers), qemu or
    /// firecracker (microVMs; need `berth image build`; firecracker also a `firecracker`
    /// binary and KVM). Every runtime that works is offered either way (`berth runtime ls`).
    #[arg(long, value_name = "R", default_value = "sandbox", value_parser = ["sandbox", "qemu", "firecracker"])]
    pub runtime: String,
    /// Run Firecracker WITHOUT its jailer, as host root (no chroot, no uid drop, no
    /// namespaces): a guest that escapes into the VMM is root on this host. Only where the
    /// jailer cannot run; the daemon logs a warning and `berth runtime ls` shows it.
    #[arg(long)]
    pub firecracker_unjailed: bool,
    /// berth's address as browsers reach it, e.g. https://berth.example.com: `berth pair`
    /// links are built on it, and a signed-in browser's requests may come from it (as from
    /// the Host they name). Default: the request's Host, with https when served over TLS
    /// (or behind a proxy that sends X-Forwarded-Proto: https). A warning at start when its
    /// host shares a registrable domain with `[ports] base_domain` (docs/security.md).
    #[arg(long, value_name = "URL")]
    pub public_url: Option<berth_server::public_url::PublicUrl>,
    /// Serve HTTPS with this PEM certificate chain (leaf first); needs --tls-key.
    #[arg(
        long,
        value_name = "FILE",
        requires = "tls_key",
        conflicts_with = "acme_domain"
    )]
    pub tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Serve HTTPS with a certificate for NAME from an ACME CA (repeat for more names).
    #[arg(long, value_name = "NAME")]
    pub acme_domain: Vec<String>,
    /// The ACME directory URL.
    #[arg(long, value_name = "URL", default_value = berth_server::tls::acme::LETS_ENCRYPT, requires = "acme_domain")]
    pub acme_directory: String,
    /// A contact email for the ACME account (the CA's expiry warnings go there).
    #[arg(long, value_name = "EMAIL", requires = "acme_domain")]
    pub acme_email: Option<String>,
    /// A PEM root certificate that the ACME directory's own HTTPS is trusted by, besides the
    /// public roots (a private or test CA such as Pebble).
    #[arg(long, value_name = "FILE", requires = "acme_domain")]
    pub acme_directory_ca: Option<PathBuf>,
    /// The database: postgres://USER@HOST:PORT/DB for one shared by several hosts, or
    /// sqlite:PATH; default: [store] url in berth.toml, else <data dir>/berth.db. The
    /// password never goes in the URL: [store] password_file, $BERTH_STORE_PASSWORD or
    /// $PGPASSWORD (docs/config.md).
    #[arg(long, value_name = "URL")]
    pub store: Option<String>,
    /// single: this host runs everything (the default). api: a stateless replica of a
    /// cluster's API over a shared PostgreSQL (--store), which runs no box itself: it
    /// places boxes on the nodes (`berth node`) and routes every call on a box to its node
    /// (docs/cluster.md).
    #[arg(long, value_name = "ROLE", default_value = "single", value_parser = ["single", "api"])]
    pub role: String,
    /// With --role api: the cluster CA's directory (ca.crt and ca.key, from `berth cluster
    /// init`): the replica signs nodes' certificates as they join and its own.
    #[arg(long, value_name = "DIR", required_if_eq("role", "api"))]
    pub cluster_dir: Option<PathBuf>,
}

impl UpArgs {
    fn tls(&self) -> Option<berth_server::config::TlsConfig> {
        use berth_server::config::TlsConfig;
        if let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) {
            return Some(TlsConfig::Files {
                cert: cert.clone(),
                key: key.clone(),
            });
        }
        (!self.acme_domain.is_empty()).then(|| {
            TlsConfig::Acme(berth_server::tls::AcmeConfig {
                domains: self.acme_domain.clone(),
                directory: self.acme_directory.clone(),
                email: self.acme_email.clone(),
                directory_ca: self.acme_directory_ca.clone(),
            })
        })
    }
}

pub fn run(args: UpArgs, data_dir: PathBuf) -> anyhow::Result<()> {
    run_daemon(args.log_format, serve(args, data_dir))
}

/// Runs a daemon (`berth up`, `berth node`) on a multi-thread runtime, logging as asked.
pub(crate) fn run_daemon(
    log_format: crate::logging::LogFormat,
    daemon: impl std::future::Future<Output = anyhow::Result<()>>,
) -> anyhow::Result<()> {
    crate::logging::init(log_format);
    // This program reads sleeping boxes' volume images, confined (berth_image::read_volume).
    let program = std::env::current_exe().context("finding berth's own program")?;
    berth_server::ops::memory_read::set_reader_program(program);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("berth")
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(daemon)
}

async fn serve(args: UpArgs, data_dir: PathBuf) -> anyhow::Result<()> {
    let tls = args.tls();
    if let Some(tls) = &tls {
        berth_server::tls::check(tls)?;
    }
    // Listen for the signals before anything starts, so none is missed.
    let shutdown = shutdown_signal().context("installing the SIGINT/SIGTERM handlers")?;

    let host = host_config(args.config.as_deref(), args.store.as_deref(), &data_dir)?;
    // A bad URL (or a password in it) is said before the runtimes' probes.
    host.store.location(&data_dir)?;
    // Said at once, not after the runtimes' probes (qemu's boots a kernel): the daemon
    // takes this lock for its life when it binds, a moment later.
    if data_dir.is_dir() {
        drop(berth_server::data_dir_lock::DataDirLock::acquire(
            &data_dir,
        )?);
    }
    let role = match args.role.as_str() {
        "api" => {
            let dir = args
                .cluster_dir
                .as_deref()
                .context("--role api needs --cluster-dir")?;
            api_role(dir)?
        }
        _ => berth_server::cluster::role::RoleConfig::Single,
    };
    let runtimes = match role {
        // A replica runs no box: its runtimes are the nodes'.
        berth_server::cluster::role::RoleConfig::Api { .. } => Runtimes::new(
            berth_server::runtimes::all_runtimes()
                .map(|name| RuntimeEntry::unavailable(name, "boxes run on the cluster's nodes"))
                .collect(),
            &args.runtime,
        )?,
        _ => {
            probe_runtimes(
                &data_dir,
                &args.oci_runtime,
                &args.runtime,
                args.firecracker_unjailed,
            )
            .await?
        }
    };
    let config = berth_server::ServerConfig {
        data_dir: data_dir.clone(),
        listen: args.listen,
        runtimes,
        idle_check: berth_server::config::DEFAULT_IDLE_CHECK,
        host,
        tls,
        public_url: args.public_url.clone(),
        role,
    };
    let server = berth_server::Server::bind(config)
        .await
        .context("starting the daemon")?;
    if let Some(key) = &server.admin_key_created {
        let path = data_dir.join(crate::data_dir::ADMIN_KEY_FILE);
        println!("admin API key (also in {}): {key}", path.display());
    }
    server.serve(shutdown).await.context("serving the API")?;
    tracing::info!("berth stopped");
    Ok(())
}

/// The host config (`--config FILE`, else `<data dir>/berth.toml` when it exists), its
/// `[store] url` replaced by `--store` when given.
pub(crate) fn host_config(
    file: Option<&std::path::Path>,
    store: Option<&str>,
    data_dir: &std::path::Path,
) -> anyhow::Result<berth_server::HostConfig> {
    let mut host = match file {
        Some(path) => berth_server::HostConfig::load(path),
        None => berth_server::HostConfig::load_default(data_dir),
    }?;
    if let Some(url) = store {
        host.store.url = Some(url.to_owned());
    }
    Ok(host)
}

/// Every runtime this host has, tried: one that cannot run is offered as unavailable with
/// the reason (`berth runtime ls`), and only the default (`runtime`) must work.
pub(crate) async fn probe_runtimes(
    data_dir: &std::path::Path,
    oci_runtime: &str,
    default: &str,
    firecracker_unjailed: bool,
) -> anyhow::Result<Runtimes> {
    let data_dir = data_dir.to_owned();
    let init_bin = berth_runtime::init_binary()?;
    // Both runtimes are tried; one that cannot run is offered as unavailable with the
    // reason (`berth runtime ls`), and only the default must work. qemu's KVM probe boots
    // its kernel once: it runs while the sandbox is prepared.
    let qemu = tokio::spawn(berth_server::runtimes::qemu_entry(data_dir.clone()));
    let firecracker = tokio::spawn(berth_server::runtimes::firecracker_entry(
        data_dir.clone(),
        firecracker_unjailed,
    ));
    let sandbox = match SandboxRuntime::new(SandboxConfig {
        data_dir: data_dir.clone(),
        oci_runtime: oci_runtime.to_owned(),
        init_bin,
    }) {
        Ok(sandbox) => RuntimeEntry::ready(Arc::new(sandbox), None),
        Err(e) => RuntimeEntry::unavailable("sandbox", berth_runtime::error_chain(&e)),
    };
    let qemu = qemu.await.context("preparing the qemu runtime")?;
    let firecracker = firecracker
        .await
        .context("preparing the firecracker runtime")?;
    for entry in [&sandbox, &qemu, &firecracker] {
        if let RuntimeState::Unavailable { reason } = &entry.state {
            if entry.name == default {
                anyhow::bail!("the default runtime {} cannot run: {reason}", entry.name);
            }
            tracing::warn!(runtime = %entry.name, %reason, "runtime unavailable");
        }
    }
    Ok(Runtimes::new(vec![sandbox, qemu, firecracker], default)?
        .with_firecracker_unjailed(firecracker_unjailed))
}

/// Resolves on the first SIGINT or SIGTERM.
pub(crate) fn shutdown_signal(
) -> std::io::Result<impl std::future::Future<Output = ()> + Send + 'static> {
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    Ok(async move {
        tokio::select! {
            _ = interrupt.recv() => tracing::info!("SIGINT received, shutting down"),
            _ = terminate.recv() => tracing::info!("SIGTERM received, shutting down"),
        }
    })
}

/// `berth up --role api`: the replica's own certificate, made with the cluster CA.
fn api_role(
    cluster_dir: &std::path::Path,
) -> anyhow::Result<berth_server::cluster::role::RoleConfig> {
    let ca = berth_server::cluster::ca::ClusterCa::load(cluster_dir)?;
    let replica = format!(
        "{}-{}",
        host_name().unwrap_or_else(|_| "api".into()),
        std::process::id()
    );
    let tls = berth_server::cluster::mtls::ApiTls::new(Arc::new(ca), &replica)?;
    Ok(berth_server::cluster::role::RoleConfig::Api { tls: Arc::new(tls) })
}

/// This machine's host name (a node's name, a replica's).
pub(crate) fn host_name() -> anyhow::Result<String> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .context("reading this machine's host name; give the node one with --name")?;
    Ok(name.trim().to_owned())
}
