//! The gateway's I/O: one Unix listener per box, one stream per outbound connection.
//!
//! Per stream (`session.rs`): the box's own TCP socket if the box's init handed it over with
//! the stream (a sandbox, `handoff.rs`), else the stream's bytes → optional CONNECT preamble
//! → ClientHello (SNI) → the box's allowlist → resolve and vet the address → dial → replay
//! the buffered bytes → splice, with one audit line per decision. The box is the one whose
//! listener accepted the stream; nothing the box sends can change that.
//!
//! `resolve_overrides` map a name to a fixed address and are the ONLY way past the address
//! checks (loopback, private, metadata…). They exist for tests and for pinning internal
//! services; the gateway logs every one at warn level when it starts.

mod audit;
mod audit_log;
mod decision;
mod handoff;
mod hello;
mod preamble;
mod resolve;
mod session;
mod splice;
mod zero_copy;

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use berth_protocol::BoxId;
use tokio::net::UnixListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::hostname::{canonical_host, HostError};
use crate::intercept::Interceptor;
use crate::policy::Allowlist;

/// Whose sockets the gateway takes (see [`GatewayConfig::handoff_from`]).
pub use berth_handoff::Sender as HandoffSender;

pub use audit::{
    AuditError, AuditRecord, AuditSink, MemorySink, RefusedAddress, Verdict, Via, WithheldRecord,
};
pub use audit_log::{AuditLimits, JsonlDirSink};
pub use decision::{DenyReason, Route};
pub use hello::{read_client_hello, HelloReadError};
pub use preamble::{
    parse_connect_head, read_preamble, ConnectTarget, Preamble, PreambleError,
    MAX_CONNECT_HEAD_BYTES,
};
pub use resolve::{vet_addresses, ResolveFuture, Resolver, StaticResolver, SystemResolver, Vetted};
pub use splice::{dial, Counted, Counters, DialError};

/// One box's egress policy. The gateway is handed this together with the box's listener.
#[derive(Debug, Clone)]
pub struct BoxEgress {
    pub box_id: BoxId,
    pub allow: Allowlist,
}

/// How long the gateway waits on each step.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    /// For the CONNECT head, and again for the ClientHello (from accept on the direct path,
    /// from the `200` on the CONNECT path).
    pub client_hello: Duration,
    pub dial: Duration,
    /// A relay with no byte either way for this long is closed (an event stream that
    /// keeps sending stays open).
    pub idle: Duration,
}

/// The default of [`Timeouts::idle`] (`[egress] idle_timeout_secs`).
pub const DEFAULT_IDLE: Duration = Duration::from_secs(300);
/// The default of [`GatewayConfig::max_connections_per_box`].
pub const DEFAULT_MAX_CONNECTIONS_PER_BOX: usize = 256;

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            client_hello: Duration::from_secs(10),
            dial: Duration::from_secs(10),
            idle: DEFAULT_IDLE,
        }
    }
}

/// Host-wide gateway settings (`[egress]` in `berth.toml`).
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    /// Canonical host name → fixed address, bypassing DNS and the address checks.
    pub resolve_overrides: HashMap<String, SocketAddr>,
    pub timeouts: Timeouts,
    /// Open connections one box may have at once; one more is refused at once (audited
    /// `too_many_connections`). Each holds two sockets and buffers on the host. A sandbox's
    /// berth-init hands its connections over and keeps none, so this is the bound on how
    /// many a sandbox box has open through the gateway.
    pub max_connections_per_box: usize,
    /// Who may hand the gateway a box's TCP socket instead of copying its bytes into the
    /// stream: the box's init ([`HandoffSender::BoxInit`], the daemon's setting and the
    /// default), or this very process (tests and benchmarks that play berth-init).
    pub handoff_from: HandoffSender,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        GatewayConfig {
            resolve_overrides: HashMap::new(),
            timeouts: Timeouts::default(),
            max_connections_per_box: DEFAULT_MAX_CONNECTIONS_PER_BOX,
            handoff_from: HandoffSender::BoxInit,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error("resolve override {host:?} is not a valid host name")]
    BadOverride {
        host: String,
        #[source]
        source: HostError,
    },
}

/// The egress gateway. Cheap to clone; every box's listener is served by the same one.
#[derive(Clone)]
pub struct Gateway {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) config: GatewayConfig,
    pub(crate) resolver: Arc<dyn Resolver>,
    pub(crate) audit: Arc<dyn AuditSink>,
}

impl Gateway {
    /// The keys of `config.resolve_overrides` are canonicalised here (`API.Example.test.`
    /// becomes `api.example.test`, the spelling the SNI is compared in); a key that is not a
    /// valid host name is an error rather than an override that silently never matches.
    pub fn new(
        mut config: GatewayConfig,
        resolver: Arc<dyn Resolver>,
        audit: Arc<dyn AuditSink>,
    ) -> Result<Self, GatewayError> {
        let mut overrides = HashMap::with_capacity(config.resolve_overrides.len());
        for (host, addr) in config.resolve_overrides {
            let canonical = canonical_host(&host)
                .map_err(|source| GatewayError::BadOverride { host, source })?;
            overrides.insert(canonical, addr);
        }
        config.resolve_overrides = overrides;
        for (host, addr) in &config.resolve_overrides {
            tracing::warn!(
                %host, %addr,
                "egress resolve override: this name bypasses DNS AND the forbidden-address checks"
            );
        }
        Ok(Gateway {
            inner: Arc::new(Inner {
                config,
                resolver,
                audit,
            }),
        })
    }

    /// Serves one box's egress listener until `shutdown` completes. Each accepted stream is
    /// one outbound connection of `egress.box_id`. On shutdown the listener is closed and
    /// every open connection is cut, and each writes its audit line before this returns.
    /// Dropping the returned future instead aborts all connection tasks at once (no leak,
    /// but allow lines of open connections are lost).
    pub async fn serve_box(
        &self,
        listener: UnixListener,
        egress: BoxEgress,
        shutdown: impl Future<Output = ()>,
    ) {
        self.serve(listener, egress, None, shutdown).await
    }

    /// [`Gateway::serve_box`] for a box with credential rules: streams to a host named by a
    /// rule of `interceptor` are TLS-intercepted (`crate::intercept`), all others spliced.
    pub async fn serve_box_intercepting(
        &self,
        listener: UnixListener,
        egress: BoxEgress,
        interceptor: Arc<Interceptor>,
        shutdown: impl Future<Output = ()>,
    ) {
        self.serve(listener, egress, Some(interceptor), shutdown)
            .await
    }

    async fn serve(
        &self,
        listener: UnixListener,
        egress: BoxEgress,
        interceptor: Option<Arc<Interceptor>>,
        shutdown: impl Future<Output = ()>,
    ) {
        let egress = Arc::new(egress);
        let handoffs = Arc::new(handoff::Handoffs::new(self.inner.config.handoff_from));
        let (stop_tx, stop_rx) = watch::channel(false);
        let mut tasks = JoinSet::new();
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => {
                        let session = session::Session::new(
                            self.inner.clone(),
                            egress.clone(),
                            interceptor.clone(),
                            handoffs.clone(),
                            stop_rx.clone(),
                        );
                        while tasks.try_join_next().is_some() {}
                        if tasks.len() >= self.inner.config.max_connections_per_box {
                            // Refused before a byte is read: a box opening connections
                            // without end costs the host a socket and a line, no task. A
                            // socket handed over with the stream is closed with it, unread.
                            session.over_cap(stream);
                        } else {
                            tasks.spawn(session.run(stream));
                        }
                    }
                    Err(e) => {
                        // EMFILE and friends: keep serving; back off so the loop does not spin.
                        tracing::warn!(box_id = %egress.box_id, error = %e, "egress accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                },
                // Reap finished connections so the set does not grow without bound.
                Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            }
        }
        drop(listener);
        let _ = stop_tx.send(true);
        while tasks.join_next().await.is_some() {}
    }
}
