//! Starting and stopping the daemon: data directory, store, first-start admin key,
//! reconciliation, the descriptor limit ([`fd_limit`]), the listener and its bounded
//! connections ([`connections`]), and the shutdown that stops every box.

mod connections;
mod fd_limit;

use std::fs;
use std::future::Future;
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::sync::Arc;

use berth_store::Store;
use tokio::net::TcpListener;

use crate::admission::connection::Connections;
use crate::admission::{self, Slots};
use crate::boxes::BoxTable;
use crate::cluster::node_agent;
use crate::cluster::node_client::NodeClients;
use crate::cluster::role::{ApiSide, Role, RoleConfig};
use crate::config::{ServerConfig, ADMIN_KEY_FILE, URL_FILE};
use crate::ctx::Ctx;
use crate::data_dir_lock::DataDirLock;
use crate::egress::EgressHost;
use crate::error::ServerError;
use crate::lifecycle::event_retention::EventPruner;
use crate::lifecycle::Activity;
use crate::ops::reconcile;
use crate::secrets::SecretStore;
use crate::templates::{self, SharedTemplates, TemplateRegistry};
use berth_runtime::error_chain;

/// A daemon bound to its address, not yet serving.
pub struct Server {
    listener: TcpListener,
    local_addr: SocketAddr,
    ctx: Ctx,
    /// The idle reclaimer's tick.
    idle_check: std::time::Duration,
    /// What one connection may hold (`[server]` in berth.toml).
    limits: connections::Limits,
    /// Who holds which connection: an address without a key, or a tenant.
    connections: Connections,
    /// HTTPS: the acceptor and what keeps its certificate current; `None` serves HTTP.
    tls: Option<crate::tls::Tls>,
    /// A node's mutual TLS (API replicas' certificates required).
    node_tls: Option<tokio_rustls::TlsAcceptor>,
    /// A node's plain-HTTP health listener.
    status: Option<TcpListener>,
    /// Held while the server lives: one daemon per data directory.
    _lock: DataDirLock,
    /// The admin key made on this first start (also in `<data>/admin.key`, mode 0600), for
    /// the CLI to print once. `None` on later starts.
    pub admin_key_created: Option<String>,
    /// `[backup]`: scheduled backups, started with the boxes' upkeep.
    backup: crate::backup::config::BackupHostConfig,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("local_addr", &self.local_addr)
            .finish_non_exhaustive()
    }
}

impl Server {
    /// Prepares the data directory, opens the store, makes the admin key on first start,
    /// reconciles the runtime with the store, binds the listener and writes `berth.url`.
    pub async fn bind(config: ServerConfig) -> Result<Server, ServerError> {
        for warning in config.host.warnings() {
            tracing::warn!("berth.toml: {warning}");
        }
        fd_limit::ensure(config.host.server.max_connections);
        let data = &config.data_dir;
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(data)
            .map_err(|source| ServerError::Io {
                action: "create the data directory",
                path: data.clone(),
                source,
            })?;
        for dir in [data.clone(), data.join(crate::ctx::BOXES_DIR)] {
            not_listable(&dir)?;
        }
        let lock = DataDirLock::acquire(data)?;
        // A node serves API replicas only, with the cluster's mutual TLS.
        let node_tls = match &config.role {
            RoleConfig::Node { tls, .. } => Some(tokio_rustls::TlsAcceptor::from(tls.clone())),
            _ => None,
        };
        // Bad certificate files stop the start before anything else is touched.
        let tls = match &config.tls {
            Some(tls) => Some(crate::tls::Tls::load(tls.clone(), data)?),
            None => {
                crate::tls::forget_cert_file(data)?;
                None
            }
        };
        let store_config = &config.host.store;
        let location = store_config.location(data)?;
        let store = Arc::new(store_config.open(&location)?);
        tracing::info!(backend = store.backend(), "store open");
        let admin_key_created = store.ensure_admin_key()?;
        // Before listening: a key that does not match the stored secrets stops the start.
        let secrets = Arc::new(SecretStore::open(
            store.clone(),
            &config.host.secrets.key_file(data),
            &location.describe(),
        )?);
        if let Some(key) = &admin_key_created {
            write_private(&data.join(ADMIN_KEY_FILE), &format!("{key}\n"))?;
            tracing::info!(path = %data.join(ADMIN_KEY_FILE).display(), "first start: admin key created");
        }
        let role = Arc::new(match &config.role {
            RoleConfig::Single => Role::Single,
            RoleConfig::Node { node, .. } => {
                Role::Node(node_agent::register(&store, &config.runtimes, node)?)
            }
            RoleConfig::Api { tls } => Role::Api(ApiSide {
                nodes: NodeClients::new(tls.clone()),
            }),
        });
        let metrics = Arc::new(crate::metrics::Metrics::default());
        let durable = crate::durable::Durable::open(
            &config.host.storage,
            data,
            store.clone(),
            metrics.durable.clone(),
        )?;
        let memory = Arc::new(
            crate::memory::Memory::open(
                data,
                durable.as_ref().map(|d| d.chunks()),
                std::time::Duration::from_secs(config.host.storage.gc_interval_s),
                config.host.memory.retention,
            )
            .map_err(ServerError::MemoryHistory)?,
        );
        let ctx = Ctx {
            data_dir: data.clone(),
            push: crate::push::Push::start(data, &config.host.push, store.clone())?,
            store,
            runtimes: Arc::new(config.runtimes.clone()),
            boxes: Arc::new(BoxTable::default()),
            activity: Arc::new(Activity::default()),
            templates: Arc::new(load_templates(data).await),
            secrets,
            egress: Arc::new(EgressHost::new(data, &config.host.egress)?),
            disk: crate::disk_space::DiskGuard::new(data, config.host.storage.min_free_percent)
                .with_overcommit(config.host.storage.overcommit),
            streams: Slots::new(admission::streams(
                config.host.server.max_streams_per_tenant,
            )),
            uploads: Slots::new(admission::UPLOADS),
            collected_execs: Slots::new(admission::COLLECTED_EXECS),
            ports: Arc::new(config.host.ports.clone()),
            public_url: config.public_url.clone(),
            shared_site: Arc::new(crate::ports::shared_site::SharedSiteWarning::new(
                config.host.ports.base_domain.as_deref(),
                config.public_url.as_ref(),
            )),
            port_connections: Slots::new(admission::port_connections(&config.host.ports)),
            app_pool: Default::default(),
            event_pruner: Arc::new(EventPruner::new(&config.host.events)),
            wakeups: crate::lifecycle::wakeups::doorbell::Wakeups::new(&config.host.wakeups),
            stream_limits: crate::stream_limits::StreamLimits::new(
                config.host.server.send_timeout_s,
                &config.host.terminals,
            ),
            e2b: crate::e2b::state::E2b::open(data)?,
            webhooks: crate::webhooks::Webhooks::new(&config.host.webhooks),
            metrics,
            role,
            jobs: Default::default(),
            durable,
            memory,
        };
        crate::webhooks::worker::listen(&ctx);
        crate::backup::clean(data);
        // An API replica runs no box: there is nothing of its own to reconcile.
        let reconciled = match ctx.role.api() {
            Some(_) => Ok(()),
            None => reconcile::reconcile(&ctx).await,
        };
        if let Err(e) = reconciled {
            // The store failing here fails every request too: refuse to start.
            if let crate::error::OpError::Store(source) = e {
                return Err(ServerError::Store(*source));
            }
            tracing::error!(error = %error_chain(&e), "reconcile failed");
        }
        let listener = bind(config.listen).await?;
        let local_addr = listener
            .local_addr()
            .map_err(|source| ServerError::Listen {
                addr: config.listen,
                source,
            })?;
        let url_path = data.join(URL_FILE);
        let scheme = if tls.is_some() || node_tls.is_some() {
            "https"
        } else {
            "http"
        };
        let url = format!("{scheme}://{}\n", reachable(local_addr));
        fs::write(&url_path, url).map_err(|source| ServerError::Io {
            action: "write",
            path: url_path,
            source,
        })?;
        tracing::info!(%local_addr, runtimes = ?ctx.runtimes, "berth listening");
        let status = match &config.role {
            RoleConfig::Node {
                status_listen: Some(addr),
                ..
            } => Some(bind(*addr).await?),
            _ => None,
        };
        Ok(Server {
            tls,
            node_tls,
            status,
            _lock: lock,
            listener,
            local_addr,
            ctx,
            idle_check: config.idle_check,
            limits: connections::Limits::from(&config.host.server),
            connections: Connections::new(&connection_limits(&config)),
            admin_key_created,
            backup: config.host.backup.clone(),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The store (for the CLI's admin commands and for tests).
    pub fn store(&self) -> Arc<Store> {
        self.ctx.store.clone()
    }

    /// The wakeups' limits, doorbell and clock (for tests that drive the clock).
    pub fn wakeups(&self) -> Arc<crate::lifecycle::wakeups::doorbell::Wakeups> {
        self.ctx.wakeups.clone()
    }

    /// Serves until `shutdown` resolves, then stops every box (which also ends open exec
    /// streams), lets open requests finish, and stops any box they woke meanwhile.
    pub async fn serve(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServerError> {
        let app = crate::api::router(self.ctx.clone());
        let ctx = &self.ctx;
        // What runs beside the API depends on the role: boxes' upkeep where boxes run, the
        // cluster's singleton jobs once (on one host, or on the replica holding their lease).
        let mut background: Vec<AbortOnDrop> = Vec::new();
        let mut jobs: Vec<AbortOnDrop> = Vec::new();
        let runs_boxes = ctx.role.api().is_none();
        let mut reclaimer = runs_boxes
            .then(|| AbortOnDrop(crate::lifecycle::idle::spawn(ctx.clone(), self.idle_check)));
        if runs_boxes {
            background.push(AbortOnDrop(crate::runtimes::watch_images(
                (*ctx.runtimes).clone(),
                ctx.data_dir.clone(),
            )));
            background.push(AbortOnDrop(ctx.disk.clone().watch()));
        }
        match &*ctx.role {
            Role::Single => {
                jobs.extend(
                    crate::cluster::jobs::spawn_single(ctx)
                        .into_iter()
                        .map(AbortOnDrop),
                );
                background.push(AbortOnDrop(crate::lifecycle::warm_pool::spawn(ctx.clone())));
            }
            Role::Node(_) => background.push(AbortOnDrop(node_agent::spawn(ctx.clone()))),
            Role::Api(api) => jobs.push(AbortOnDrop(crate::cluster::jobs::spawn_api(
                ctx.clone(),
                api.nodes.tls().replica().to_owned(),
            ))),
        }
        background.push(AbortOnDrop(
            ctx.event_pruner.clone().spawn(ctx.store.clone()),
        ));
        if runs_boxes {
            if let Some(durable) = &ctx.durable {
                durable.resume_pending();
            }
            background.extend(crate::lifecycle::copy::spawn_sync(ctx.clone()).map(AbortOnDrop));
            background.push(AbortOnDrop(ctx.memory.spawn_gc()));
            background
                .extend(crate::backup::schedule::spawn(ctx.clone(), &self.backup).map(AbortOnDrop));
        }
        let _status = self
            .status
            .map(|listener| AbortOnDrop(crate::cluster::status::spawn(listener, ctx.clone())));
        let _tls_upkeep = self.tls.as_ref().map(|t| AbortOnDrop(t.spawn_upkeep()));
        let acceptor = self
            .tls
            .as_ref()
            .map(|t| t.acceptor.clone())
            .or(self.node_tls.clone());
        let (stop, stopping) = tokio::sync::watch::channel(false);
        let serving = connections::serve(
            self.listener,
            app,
            self.limits,
            self.connections,
            acceptor,
            stopping,
        );
        let mut serving = std::pin::pin!(serving);
        tokio::select! {
            () = &mut serving => {}
            () = shutdown => {
                tracing::info!("shutting down: stopping every box");
                // The reclaimer and the jobs first: nothing starts or stops a box meanwhile.
                reclaimer.take();
                jobs.clear();
                // No new connections; open ones finish the request in flight.
                let _ = stop.send(true);
                if runs_boxes {
                    reconcile::stop_all(&self.ctx).await;
                }
                serving.await
            }
        }
        drop(reclaimer);
        if runs_boxes {
            reconcile::stop_all(&self.ctx).await;
        }
        // The audit log has its own writer thread: what is queued lands before the exit.
        self.ctx.egress.flush_audit();
        Ok(())
    }
}

/// `[server]`'s connection limits, as this role applies them. Every connection to a node
/// comes from an API replica that proved itself in the TLS handshake, many clients' calls
/// from a few addresses: the per-address share for connections without a key, which stops
/// one address from crowding out the rest on a public listener, would throttle the replicas.
fn connection_limits(config: &ServerConfig) -> crate::host_config::ServerHostConfig {
    let mut server = config.host.server.clone();
    if matches!(config.role, RoleConfig::Node { .. }) {
        server.max_anonymous_connections_per_address = server.max_connections;
    }
    server
}

async fn bind(addr: SocketAddr) -> Result<TcpListener, ServerError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| ServerError::Listen { addr, source })
}

/// The built-in templates and `<data>/templates/*.toml`; a bad file is logged and skipped.
async fn load_templates(data: &Path) -> SharedTemplates {
    let data = data.to_owned();
    let loaded = tokio::task::spawn_blocking(move || {
        TemplateRegistry::load(&data, templates::builtins(&data))
    })
    .await;
    let (registry, errors) = match loaded {
        Ok(loaded) => loaded,
        // The loader panicked: a bug, passed on as the panic it is.
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    };
    for e in &errors {
        tracing::warn!(error = %error_chain(e), "template skipped");
    }
    let names: Vec<String> = registry.list().iter().map(|t| t.name.clone()).collect();
    tracing::info!(templates = ?names, skipped = errors.len(), "templates loaded");
    SharedTemplates::new(registry)
}

/// Aborts a background task when the server's future ends or is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Binds, serves until `shutdown`, and stops every box.
pub async fn run(
    config: ServerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    Server::bind(config).await?.serve(shutdown).await
}

/// An address a local client can dial: `0.0.0.0` and `::` become loopback.
fn reachable(addr: SocketAddr) -> SocketAddr {
    match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => {
            SocketAddr::new(Ipv4Addr::LOCALHOST.into(), addr.port())
        }
        IpAddr::V6(ip) if ip.is_unspecified() => {
            SocketAddr::new(Ipv6Addr::LOCALHOST.into(), addr.port())
        }
        _ => addr,
    }
}

/// Takes read and write away from group and others on `dir` if it exists, keeping the
/// search bit a runtime gave it: a box's mapped root must traverse the data dir and
/// `boxes/` to reach its own directory (which only it and root may enter), but no other
/// host user may list what boxes or files the daemon has.
fn not_listable(dir: &Path) -> Result<(), ServerError> {
    let io = |source| ServerError::Io {
        action: "narrow the permissions of",
        path: dir.to_owned(),
        source,
    };
    let mode = match fs::metadata(dir) {
        Ok(meta) => meta.permissions().mode() & 0o7777,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io(e)),
    };
    if mode & 0o066 != 0 {
        fs::set_permissions(dir, fs::Permissions::from_mode(mode & !0o066)).map_err(io)?;
    }
    Ok(())
}

/// Writes a secret file, mode 0600 (also when it existed with wider permissions).
fn write_private(path: &Path, contents: &str) -> Result<(), ServerError> {
    let io = |source| ServerError::Io {
        action: "write",
        path: path.to_owned(),
        source,
    };
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(io)?;
    file.set_permissions(fs::Permissions::from_mode(0o600))
        .map_err(io)?;
    file.write_all(contents.as_bytes()).map_err(io)?;
    file.sync_all().map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcard_addresses_are_written_as_loopback() {
        assert_eq!(
            reachable("0.0.0.0:7070".parse().unwrap()).to_string(),
            "127.0.0.1:7070"
        );
        assert_eq!(
            reachable("[::]:7070".parse().unwrap()).to_string(),
            "[::1]:7070"
        );
        assert_eq!(
            reachable("10.0.0.1:1".parse().unwrap()).to_string(),
            "10.0.0.1:1"
        );
    }
}
