//! What every operation works with.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use berth_protocol::TenantId;
use berth_runtime::Runtime;
use berth_store::{BoxRecord, Store};

use crate::admission::Slots;
use crate::boxes::BoxTable;
use crate::disk_space::DiskGuard;
use crate::egress::policy::EgressPolicy;
use crate::egress::{EgressHost, SecretLookupError};
use crate::error::OpError;
use crate::lifecycle::event_retention::EventPruner;
use crate::lifecycle::Activity;
use crate::runtimes::Runtimes;
use crate::secrets::SecretStore;
use crate::templates::SharedTemplates;

/// Where the boxes' directories are, under the data dir (each runtime's, and the
/// volume images every runtime shares).
pub const BOXES_DIR: &str = "boxes";

/// How long a stopping box gets between SIGTERM and SIGKILL.
pub const STOP_GRACE: Duration = Duration::from_secs(5);

#[derive(Clone)]
pub struct Ctx {
    /// berth's data directory (images, layers, templates).
    pub data_dir: PathBuf,
    pub store: Arc<Store>,
    /// Every box runs on the runtime its record names ([`Ctx::runtime_of`]).
    pub runtimes: Arc<Runtimes>,
    pub boxes: Arc<BoxTable>,
    /// Who is using which box: `ctx.activity.begin(&id)` for the length of a use.
    pub activity: Arc<Activity>,
    /// The template registry; a reload swaps it whole, and applies at a box's next start.
    pub templates: Arc<SharedTemplates>,
    /// Per-tenant credentials, sealed at rest; the gateway reveals them, the API never does.
    pub secrets: Arc<SecretStore>,
    /// The egress gateway every running box's channel is served by.
    pub egress: Arc<EgressHost>,
    /// Refuses what takes more disk while the data dir's disk is nearly full.
    pub disk: DiskGuard,
    /// Long-lived streams of every kind, one budget per tenant
    /// (`[server] max_streams_per_tenant`, [`crate::admission::streams`]).
    pub streams: Arc<Slots>,
    /// Uploads streaming into boxes ([`crate::admission::UPLOADS`]).
    pub uploads: Arc<Slots>,
    /// Collected execs ([`crate::admission::COLLECTED_EXECS`]).
    pub collected_execs: Arc<Slots>,
    /// `[ports]` of berth.toml.
    pub ports: Arc<crate::ports::config::PortsHostConfig>,
    /// berth's origin as browsers reach it (`berth up --public-url`), if given.
    pub public_url: Option<crate::public_url::PublicUrl>,
    /// Says once when `[ports] base_domain` shares a registrable domain with berth's host.
    pub shared_site: Arc<crate::ports::shared_site::SharedSiteWarning>,
    /// Proxied requests and WebSocket connections to boxes' ports (`[ports]` limits).
    pub port_connections: Arc<Slots>,
    /// Keep-alive connections to apps in boxes, reused across proxied requests.
    pub app_pool: Arc<crate::ports::pool::AppPool>,
    /// Keeps each box's event log within `[events]`; told when a box's log grows.
    pub event_pruner: Arc<EventPruner>,
    /// Web Push: the VAPID key, who watches which box, the send queue.
    pub push: Arc<crate::push::Push>,
    /// Scheduled wakeups: `[wakeups]` limits and the scheduler's doorbell.
    pub wakeups: Arc<crate::lifecycle::wakeups::doorbell::Wakeups>,
    /// When the client of a terminal or an exec stream counts as gone.
    pub stream_limits: crate::stream_limits::StreamLimits,
    /// The E2B API's access-token key and lifetime doorbell (`crate::e2b`).
    pub e2b: Arc<crate::e2b::state::E2b>,
    /// Webhooks: their settings and the worker's doorbell.
    pub webhooks: Arc<crate::webhooks::Webhooks>,
    /// What `/metrics` counts as the daemon goes (transitions, wakes).
    pub metrics: Arc<crate::metrics::Metrics>,
    /// One host, a node, or an API replica, and what that role holds.
    pub role: Arc<crate::cluster::role::Role>,
    /// The term the cluster's singleton jobs write under (`cluster::jobs`).
    pub jobs: Arc<crate::cluster::jobs_term::JobsTerm>,
    /// Durable copies of boxes' volumes; `None` without `[storage] url`.
    pub durable: Option<Arc<crate::durable::Durable>>,
    /// Boxes' memory history and search indexes.
    pub memory: Arc<crate::memory::Memory>,
}

impl Ctx {
    /// How the gateway reads the secrets of `tenant`'s credential rules at a box's boot.
    pub fn tenant_secrets<'a>(
        &'a self,
        tenant: &'a TenantId,
    ) -> impl FnMut(&str) -> Result<Option<String>, SecretLookupError> + 'a {
        move |name| {
            Ok(self
                .secrets
                .reveal(tenant, name)?
                .map(|value| value.expose().to_owned()))
        }
    }

    /// The runtime the box runs on; unavailable (gone from this daemon, or failing its
    /// checks): the box cannot be started, stopped or removed until it is back.
    pub fn runtime_of(&self, record: &BoxRecord) -> Result<Arc<dyn Runtime>, OpError> {
        self.runtimes
            .get(&record.runtime)
            .map_err(|source| OpError::BoxRuntime {
                name: record.name.clone(),
                source,
            })
    }

    /// Whether the box's template runs a harness: only such boxes take messages (others:
    /// 400). Looked up in the current registry (a template reloaded without a harness, or
    /// gone, takes no more messages).
    pub fn box_has_harness(&self, record: &BoxRecord) -> bool {
        self.templates
            .get(&record.template)
            .is_some_and(|t| t.harness.is_some())
    }

    /// The box's egress policy right now, validated: its own (given at creation) if it has
    /// one, else its template's in the current registry, else empty. Fails closed: a stored
    /// policy that no longer parses or validates is logged and yields the empty policy
    /// (nothing leaves), never the template's wider one.
    pub fn box_egress(&self, record: &BoxRecord) -> EgressPolicy {
        match &record.egress {
            Some(json) => EgressPolicy::from_stored(&record.id, json),
            None => self
                .templates
                .get(&record.template)
                .map(|t| t.egress.clone())
                .unwrap_or_default(),
        }
    }
}
