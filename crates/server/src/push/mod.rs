//! Web Push from the daemon: RFC 8030 delivery, RFC 8291 message encryption (`aes128gcm`)
//! and RFC 8292 VAPID. A browser subscribes (`api/push.rs`); when a turn ends on a box
//! that no event stream of its tenant is watching ([`trigger`]), each of the tenant's
//! subscriptions gets an encrypted notification through a bounded queue ([`sender`]),
//! delivered beside other push services' ([`lanes`], [`delivery`]).

pub mod config;
pub mod delivery;
pub mod encrypt;
pub mod endpoint;
pub mod lanes;
pub mod outgoing;
pub mod sender;
pub mod subscriptions;
pub mod trigger;
pub mod vapid;
pub mod watchers;

use std::path::Path;
use std::sync::Arc;

use berth_store::Store;

use self::config::PushHostConfig;
use self::endpoint::EndpointRefused;
use self::sender::{Sender, Worker};
use self::vapid::{VapidError, VapidKey};
use self::watchers::Watchers;

/// Subscriptions one tenant may hold (a few devices each for a few people).
pub const MAX_SUBSCRIPTIONS_PER_TENANT: usize = 20;

/// The daemon's push state: its VAPID key, the settings, who is watching, the queue.
#[derive(Debug)]
pub struct Push {
    pub vapid: Arc<VapidKey>,
    pub config: Arc<PushHostConfig>,
    pub watchers: Arc<Watchers>,
    pub sender: Sender,
}

impl Push {
    /// Loads (or at the first start, makes) the VAPID key and starts the sender. Needs a
    /// tokio runtime.
    pub fn start(
        data_dir: &Path,
        config: &PushHostConfig,
        store: Arc<Store>,
    ) -> Result<Arc<Push>, VapidError> {
        let vapid = Arc::new(VapidKey::load_or_create(data_dir)?);
        let config = Arc::new(config.clone());
        let sender = Worker {
            store,
            vapid: vapid.clone(),
            config: config.clone(),
        }
        .spawn();
        Ok(Arc::new(Push {
            vapid,
            config,
            watchers: Arc::default(),
            sender,
        }))
    }
}

/// Why a subscription request is refused.
#[derive(Debug, thiserror::Error)]
pub enum PushError {
    #[error("push subscription refused: {0}")]
    Endpoint(#[from] EndpointRefused),
    #[error("invalid push subscription keys.{field}: {rule}")]
    InvalidKey {
        field: &'static str,
        rule: &'static str,
    },
    #[error("a tenant has at most {max} push subscriptions; delete one (DELETE /v1/web/push/subscriptions/{{id}}) first")]
    TooMany { max: usize },
    #[error("no push subscription {id:?}")]
    NotFound { id: String },
}
