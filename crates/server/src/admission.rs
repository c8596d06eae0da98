//! How many long calls of one kind run at once: per holder (a tenant, or for connections
//! without a key an address), so one cannot take every slot from the others, and across the
//! daemon, so the sum stays bounded. A call over either limit is refused at once (429 with
//! `Retry-After`), never queued: a waiting request would hold a connection and memory of
//! its own. The API's connections are admitted with the same slots ([`connection`]).

pub mod connection;

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use berth_protocol::TenantId;
use futures_util::{Stream, StreamExt};

use crate::error::OpError;

/// Who a [`Limits::each`] is for, as an error names it.
pub const TENANT: &str = "this tenant";

/// Uploads streaming into boxes at once. Each holds little memory (a few of hyper's
/// buffers); the limit shares the hosts' disks and I/O fairly.
pub const UPLOADS: Limits = Limits {
    what: "uploads running",
    holder: TENANT,
    each: 4,
    daemon: 32,
};

/// Collected execs at once. Each may hold up to [`crate::ops::exec::OUTPUT_CAP_BYTES`] of
/// stdout and of stderr until its process ends; a client that wants more streams
/// (`Accept: application/x-ndjson`: one frame at a time).
pub const COLLECTED_EXECS: Limits = Limits {
    what: "collected execs running (stream with Accept: application/x-ndjson instead)",
    holder: TENANT,
    each: 16,
    daemon: 64,
};

/// Long-lived streams, one budget for every kind: process output, streaming execs, event
/// streams, file watches, terminals, and proxied requests and WebSockets to boxes' ports
/// (on top of `[ports]`' own limits). Each is taken with `ctx.streams.take(&tenant)` and
/// held until the stream ends. `each` is `[server] max_streams_per_tenant`; the daemon's
/// connection cap bounds the sum (an upgraded WebSocket leaves it, but keeps its stream).
pub fn streams(per_tenant: usize) -> Limits {
    Limits {
        what: "streams open (process output, streaming execs, event streams, file watches, \
               terminals and port connections each hold one until they end: close one)",
        holder: TENANT,
        each: per_tenant,
        daemon: usize::MAX,
    }
}

/// Proxied requests and WebSocket connections to boxes' ports, from `[ports]`. Each holds
/// two connections and hyper's buffers, not a body.
pub fn port_connections(config: &crate::ports::config::PortsHostConfig) -> Limits {
    Limits {
        what: "connections to box ports open",
        holder: TENANT,
        each: config.max_connections_per_tenant,
        daemon: config.max_connections,
    }
}

/// Limits of one kind of call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// What is counted, as the refusal names it ("this tenant already has 4 {what}").
    pub what: &'static str,
    /// Who [`Limits::each`] is for, as the refusal names it.
    pub holder: &'static str,
    /// At most this many per holder.
    pub each: usize,
    pub daemon: usize,
}

/// The slots of one kind of call, counted per holder `K` (a tenant by default).
#[derive(Debug)]
pub struct Slots<K = TenantId> {
    limits: Limits,
    held: Mutex<Held<K>>,
}

#[derive(Debug)]
struct Held<K> {
    total: usize,
    by_holder: HashMap<K, usize>,
}

impl<K: Eq + Hash + Clone> Slots<K> {
    pub fn new(limits: Limits) -> Arc<Slots<K>> {
        Arc::new(Slots {
            limits,
            held: Mutex::new(Held {
                total: 0,
                by_holder: HashMap::new(),
            }),
        })
    }

    /// Takes one of `holder`'s slots, given back when the [`Slot`] is dropped.
    pub fn take(self: &Arc<Self>, holder: &K) -> Result<Slot<K>, OpError> {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let count = held.by_holder.get(holder).copied().unwrap_or(0);
        let over = if count >= self.limits.each {
            Some((self.limits.each, self.limits.holder))
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
        *held.by_holder.entry(holder.clone()).or_default() += 1;
        Ok(Slot {
            slots: self.clone(),
            holder: holder.clone(),
        })
    }

    /// Slots `holder` holds now.
    pub fn held_by(&self, holder: &K) -> usize {
        let held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        held.by_holder.get(holder).copied().unwrap_or(0)
    }

    /// Every holder holding a slot now, with how many (for `/metrics`).
    pub fn held(&self) -> Vec<(K, usize)> {
        let held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        held.by_holder
            .iter()
            .map(|(holder, count)| (holder.clone(), *count))
            .collect()
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }
}

/// One call in progress.
#[derive(Debug)]
pub struct Slot<K: Eq + Hash = TenantId> {
    slots: Arc<Slots<K>>,
    holder: K,
}

impl<K: Eq + Hash> Slot<K> {
    /// Whose slot this is.
    pub fn holder(&self) -> &K {
        &self.holder
    }
}

impl Slot {
    /// `stream`, holding this slot until it is dropped (a response body: when its
    /// connection is done with it, or gone).
    pub fn holding<S: Stream>(self, stream: S) -> impl Stream<Item = S::Item> {
        stream.map(move |item| {
            let _held = &self;
            item
        })
    }
}

impl<K: Eq + Hash> Drop for Slot<K> {
    fn drop(&mut self) {
        let mut held = self.slots.held.lock().unwrap_or_else(|p| p.into_inner());
        held.total -= 1;
        if let Some(count) = held.by_holder.get_mut(&self.holder) {
            *count -= 1;
            if *count == 0 {
                held.by_holder.remove(&self.holder);
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
            holder: TENANT,
            each: 2,
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
        let mut held = slots.held();
        held.sort();
        let mut want = vec![(a.clone(), 2), (b.clone(), 1)];
        want.sort();
        assert_eq!(held, want);
        drop(a1);
        let _c1 = slots.take(&c).expect("a dropped slot is free again");
        assert_eq!(slots.held_by(&a), 1);
    }

    #[tokio::test]
    async fn a_stream_holds_its_slot_until_it_is_dropped() {
        let slots = Slots::new(streams(1));
        let a = tenant(1);
        let mut body = Box::pin(
            slots
                .take(&a)
                .unwrap()
                .holding(futures_util::stream::iter([1, 2])),
        );
        assert!(slots.take(&a).is_err(), "held while the stream is open");
        while body.next().await.is_some() {}
        assert!(slots.take(&a).is_err(), "held until the body is dropped");
        drop(body);
        assert!(slots.take(&a).is_ok(), "given back with the body");
    }
}
