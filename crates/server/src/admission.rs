//! How many long calls of one kind run at once: per tenant, so one tenant cannot take every
//! slot from the others, and across the daemon, so the sum stays bounded. A call over
//! either limit is refused at once (429 with `Retry-After`), never queued: a waiting
//! request would hold a connection and memory of its own.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use berth_protocol::TenantId;

use crate::error::OpError;

/// Uploads streaming into boxes at once. Each holds little memory (a few of hyper's
/// buffers); the limit shares the hosts' disks and I/O fairly.
pub const UPLOADS: Limits = Limits {
    what: "uploads",
    per_tenant: 4,
    daemon: 32,
};

/// Collected execs at once. Each may hold up to [`crate::ops::exec::OUTPUT_CAP_BYTES`] of
/// stdout and of stderr until its process ends; a client that wants more streams
/// (`Accept: application/x-ndjson`: one frame at a time).
pub const COLLECTED_EXECS: Limits = Limits {
    what: "collected execs",
    per_tenant: 16,
    daemon: 64,
};

/// Live event streams: `per_tenant` from `[server] max_event_streams_per_tenant`; the
/// daemon's connection cap bounds their sum.
pub fn event_streams(per_tenant: usize) -> Limits {
    Limits {
        what: "event streams (read pages with wait=false instead)",
        per_tenant,
        daemon: usize::MAX,
    }
}

/// Proxied requests and WebSocket connections to boxes' ports, from `[ports]`. Each holds
/// two connections and hyper's buffers, not a body.
pub fn port_connections(config: &crate::ports::config::PortsHostConfig) -> Limits {
    Limits {
        what: "connections to box ports",
        per_tenant: config.max_connections_per_tenant,
        daemon: config.max_connections,
    }
}

/// Limits of one kind of call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub what: &'static str,
    pub per_tenant: usize,
    pub daemon: usize,
}

/// The slots of one kind of call.
#[derive(Debug)]
pub struct Slots {
    limits: Limits,
    held: Mutex<Held>,
}

#[derive(Debug, Default)]
struct Held {
    total: usize,
    by_tenant: HashMap<TenantId, usize>,
}

impl Slots {
    pub fn new(limits: Limits) -> Arc<Slots> {
        Arc::new(Slots {
            limits,
            held: Mutex::new(Held::default()),
        })
    }

    /// Takes one of `tenant`'s slots, given back when the [`Slot`] is dropped.
    pub fn take(self: &Arc<Self>, tenant: &TenantId) -> Result<Slot, OpError> {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let count = held.by_tenant.get(tenant).copied().unwrap_or(0);
        let over = if count >= self.limits.per_tenant {
            Some((self.limits.per_tenant, "this tenant"))
        } else if held.total >= self.limits.daemon {
            Some((self.limits.daemon, "the daemon"))
        } else {
            None
        };
        if let Some((limit, holder)) = over {
            return Err(OpError::Busy {
                what: self.limits.what,
                limit,
                holder,
            });
        }
        held.total += 1;
        *held.by_tenant.entry(tenant.clone()).or_default() += 1;
        Ok(Slot {
            slots: self.clone(),
            tenant: tenant.clone(),
        })
    }
}

/// One call in progress.
#[derive(Debug)]
pub struct Slot {
    slots: Arc<Slots>,
    tenant: TenantId,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut held = self.slots.held.lock().unwrap_or_else(|p| p.into_inner());
        held.total -= 1;
        if let Some(count) = held.by_tenant.get_mut(&self.tenant) {
            *count -= 1;
            if *count == 0 {
                held.by_tenant.remove(&self.tenant);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant(seed: u8) -> TenantId {
        TenantId::from_random([seed; 20])
    }

    #[test]
    fn a_tenant_cannot_take_every_slot_and_the_daemon_total_holds() {
        let slots = Slots::new(Limits {
            what: "uploads",
            per_tenant: 2,
            daemon: 3,
        });
        let (a, b, c) = (tenant(1), tenant(2), tenant(3));
        let a1 = slots.take(&a).unwrap();
        let _a2 = slots.take(&a).unwrap();
        assert!(matches!(
            slots.take(&a),
            Err(OpError::Busy {
                limit: 2,
                holder: "this tenant",
                ..
            })
        ));
        let _b1 = slots.take(&b).unwrap();
        assert!(matches!(
            slots.take(&c),
            Err(OpError::Busy {
                limit: 3,
                holder: "the daemon",
                ..
            })
        ));
        drop(a1);
        let _c1 = slots.take(&c).expect("a dropped slot is free again");
        assert_eq!(slots.held.lock().unwrap().by_tenant.get(&a), Some(&1));
    }
}
