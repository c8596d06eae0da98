//! Webhooks: a tenant's endpoints told of its boxes' events (`box.state_changed`,
//! `box.failed`, `turn.completed`, `wakeup.fired`, `process.exited`).
//!
//! - [`registry`]: adding (the URL checked, the signing secret made and sealed), listing,
//!   deleting, and the test delivery.
//! - [`events`]: the names, and the body a box event becomes.
//! - [`worker`]: fans queued events out to deliveries and attempts them, signed
//!   ([`signature`]), never following a redirect, retried with backoff for a day.
//! - [`config`]: `[webhooks]` of berth.toml.
//!
//! The queue is filled by the store, in the transaction that stores each event
//! (`berth_store::webhooks`): what the daemon stored, it delivers, across restarts.

pub mod config;
pub mod events;
pub mod registry;
pub mod signature;
pub mod worker;

use std::sync::Arc;

use berth_protocol::BoxId;
use berth_store::EventListener;
use tokio::sync::Notify;

use self::config::WebhooksHostConfig;

/// Webhooks one tenant may have.
pub const MAX_WEBHOOKS_PER_TENANT: usize = 20;
/// Deliveries of one webhook waiting at once; past them new events for it are recorded as
/// failed at once (a receiver that is down cannot make the daemon keep without bound).
pub const MAX_PENDING_PER_WEBHOOK: u64 = 10_000;

/// The daemon's webhook state: the settings, and the worker's doorbell.
#[derive(Debug)]
pub struct Webhooks {
    pub config: WebhooksHostConfig,
    pub(crate) doorbell: Arc<Notify>,
    pub(crate) tls: Arc<rustls::ClientConfig>,
}

impl Webhooks {
    pub fn new(config: &WebhooksHostConfig) -> Arc<Webhooks> {
        Arc::new(Webhooks {
            config: config.clone(),
            doorbell: Arc::new(Notify::new()),
            tls: Arc::new(crate::outbound::tls_config()),
        })
    }

    /// Something to deliver may be there: a stored event, a new test delivery.
    pub fn ring(&self) {
        self.doorbell.notify_one();
    }
}

/// Every stored event rings: the worker looks at the queue (cheap when it is empty).
impl EventListener for Webhooks {
    fn appended(&self, _box_id: &BoxId, _last_seq: u64) {
        self.ring();
    }
}

/// Why a webhook request is refused.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    #[error("webhook url refused: {0}")]
    Url(String),
    #[error("unknown webhook event {name:?}: the events are {}", events::EVENT_NAMES.join(", "))]
    UnknownEvent { name: String },
    #[error("a webhook needs at least one event: {}", events::EVENT_NAMES.join(", "))]
    NoEvents,
    #[error("a webhook's description is at most 256 characters")]
    Description,
    #[error("a tenant has at most {max} webhooks; delete one (DELETE /v1/webhooks/{{id}}) first")]
    TooMany { max: usize },
    #[error("no webhook {id:?}")]
    NotFound { id: String },
}
