//! One push on its way: the subscription it goes to and what it says. The dispatcher
//! (`sender.rs`), the lanes and a delivery all pass it on.

use berth_store::push_subscriptions::PushSubscription;

use crate::outbound::origin_of;

/// One push: the subscription it goes to and its plaintext (JSON).
#[derive(Debug)]
pub struct Outgoing {
    pub subscription: PushSubscription,
    pub plaintext: Vec<u8>,
    /// Already tried once (a push is retried at most once).
    pub(super) retried: bool,
}

impl Outgoing {
    pub fn new(subscription: PushSubscription, plaintext: Vec<u8>) -> Outgoing {
        Outgoing {
            subscription,
            plaintext,
            retried: false,
        }
    }

    /// Its push service: the endpoint's origin (the whole endpoint if it has none, which a
    /// checked endpoint always has).
    pub(super) fn service(&self) -> String {
        let endpoint = &self.subscription.endpoint;
        origin_of(endpoint).map_or_else(|| endpoint.clone(), |(origin, _)| origin)
    }
}
