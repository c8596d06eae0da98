//! Who holds each of the API's connections. A connection is anonymous, counted against the
//! address it came from, until a request on it authenticates (an API key, a web session's
//! cookie, a share link's cookie: [`charge`] is called where each is checked); from then
//! on it counts against its tenant. One address holds at most
//! `[server] max_anonymous_connections_per_address` anonymous connections, and a tenant at
//! most `max_connections` less the share kept for others
//! (`connections_kept_for_others_percent`), so neither one address without a key nor one
//! tenant can take every connection. Over either, the connection is answered `429` and
//! closed: the address's at once, before it is read; the tenant's after the request that
//! would have charged it.

use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Arc, Mutex, Weak};

use berth_protocol::TenantId;

use crate::admission::{Limits, Slot, Slots, TENANT};
use crate::error::OpError;
use crate::host_config::ServerHostConfig;

/// The connections of every client, by address and by tenant.
#[derive(Debug)]
pub struct Connections {
    anonymous: Arc<Slots<Address>>,
    tenants: Arc<Slots<TenantId>>,
}

/// A client's address as anonymous connections are counted: an IPv4 address, or an IPv6
/// /64 (what one host or one home network is given: counting single IPv6 addresses would
/// let one client take as many as it likes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Address(IpAddr);

impl Address {
    pub fn of(ip: IpAddr) -> Address {
        match ip.to_canonical() {
            IpAddr::V6(v6) => {
                let mut segments = v6.segments();
                segments[4..].fill(0);
                Address(IpAddr::V6(Ipv6Addr::from(segments)))
            }
            v4 => Address(v4),
        }
    }
}

impl Connections {
    pub fn new(config: &ServerHostConfig) -> Connections {
        // The listener's own cap (`max_connections`) bounds the sums: a connection moving
        // from one tenant to another holds both slots for a moment, and must not be refused
        // for it.
        let daemon = usize::MAX;
        Connections {
            anonymous: Slots::new(Limits {
                what: "connections open without a key (send fewer at once, or authenticate)",
                holder: "this address",
                each: config.max_anonymous_connections_per_address,
                daemon,
            }),
            tenants: Slots::new(Limits {
                what: "connections open (close idle ones)",
                holder: TENANT,
                each: tenant_share(
                    config.max_connections,
                    config.connections_kept_for_others_percent,
                ),
                daemon,
            }),
        }
    }

    /// A connection just accepted from `peer`: anonymous until a request on it
    /// authenticates; `Busy` when the address already holds its share.
    pub fn admit(&self, peer: IpAddr) -> Result<Admitted, OpError> {
        let slot = self.anonymous.take(&Address::of(peer))?;
        Ok(Admitted {
            charge: Arc::new(Mutex::new(Charge {
                holder: Holder::Anonymous { _slot: slot },
                closing: false,
            })),
            tenants: self.tenants.clone(),
        })
    }
}

/// Connections one tenant may hold: `max_connections` less `kept_percent` of it (rounded
/// up, so some is kept whenever there are two), and at least one.
pub fn tenant_share(max_connections: usize, kept_percent: u64) -> usize {
    let kept = (max_connections as u64 * kept_percent).div_ceil(100) as usize;
    max_connections.saturating_sub(kept).max(1)
}

/// One admitted connection, held by its task for as long as it is open: what it counts
/// against goes with it when it closes.
#[derive(Debug, Clone)]
pub struct Admitted {
    charge: Arc<Mutex<Charge>>,
    tenants: Arc<Slots<TenantId>>,
}

#[derive(Debug)]
struct Charge {
    holder: Holder,
    /// A request on it went over its tenant's share: it closes after that answer.
    closing: bool,
}

#[derive(Debug)]
enum Holder {
    Anonymous { _slot: Slot<Address> },
    Tenant(Slot<TenantId>),
}

impl Admitted {
    /// What a request on this connection carries (in its extensions) to [`charge`] it.
    pub fn handle(&self) -> ConnectionHandle {
        ConnectionHandle {
            charge: Arc::downgrade(&self.charge),
            tenants: self.tenants.clone(),
        }
    }

    /// Whether a request on it went over its tenant's share: its answer closes it.
    pub fn closing(&self) -> bool {
        self.charge
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .closing
    }
}

/// A request's way to its connection's charge. Weak: a request kept past its connection
/// (it should not be) holds nothing.
#[derive(Debug, Clone)]
pub struct ConnectionHandle {
    charge: Weak<Mutex<Charge>>,
    tenants: Arc<Slots<TenantId>>,
}

impl ConnectionHandle {
    fn charge(&self, tenant: &TenantId) -> Result<(), OpError> {
        let Some(charge) = self.charge.upgrade() else {
            return Ok(());
        };
        let mut charge = charge.lock().unwrap_or_else(|p| p.into_inner());
        if matches!(&charge.holder, Holder::Tenant(slot) if slot.holder() == tenant) {
            return Ok(());
        }
        // A connection another tenant's request used before (a proxy's, say) moves over.
        match self.tenants.take(tenant) {
            Ok(slot) => {
                charge.holder = Holder::Tenant(slot);
                Ok(())
            }
            Err(busy) => {
                charge.closing = true;
                Err(busy)
            }
        }
    }
}

/// Charges the connection that `extensions`' request came on to `tenant`, whose
/// credentials the request just proved: one call from wherever a request authenticates.
/// Over the tenant's share the request fails (`Busy`: `429`) and its connection closes
/// after the answer. A request that came on no admitted connection (a test's router)
/// charges nothing.
pub fn charge(extensions: &http::Extensions, tenant: &TenantId) -> Result<(), OpError> {
    match extensions.get::<ConnectionHandle>() {
        Some(handle) => handle.charge(tenant),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant(seed: u8) -> TenantId {
        TenantId::from_random([seed; 20])
    }

    fn connections(max: usize, per_address: usize, kept_percent: u64) -> Connections {
        Connections::new(&ServerHostConfig {
            max_connections: max,
            max_anonymous_connections_per_address: per_address,
            connections_kept_for_others_percent: kept_percent,
            ..Default::default()
        })
    }

    fn charged(admitted: &Admitted, tenant: &TenantId) -> Result<(), OpError> {
        let mut extensions = http::Extensions::new();
        extensions.insert(admitted.handle());
        charge(&extensions, tenant)
    }

    #[test]
    fn a_tenants_share_keeps_some_for_others() {
        assert_eq!(tenant_share(1024, 25), 768);
        assert_eq!(tenant_share(8, 25), 6);
        assert_eq!(tenant_share(3, 25), 2);
        assert_eq!(tenant_share(1, 25), 1);
        assert_eq!(tenant_share(1024, 0), 1024);
        assert_eq!(tenant_share(10, 90), 1);
    }

    #[test]
    fn an_address_holds_its_share_until_its_connections_authenticate() {
        let connections = connections(16, 2, 25);
        let peer: IpAddr = "192.0.2.7".parse().unwrap();
        let first = connections.admit(peer).unwrap();
        let _second = connections.admit(peer).unwrap();
        let over = connections.admit(peer).unwrap_err();
        assert!(
            over.to_string()
                .starts_with("this address already has 2 connections"),
            "{over}"
        );
        let _other_address = connections.admit("192.0.2.8".parse().unwrap()).unwrap();
        // Authenticated, the first is its tenant's: the address has room again.
        charged(&first, &tenant(1)).unwrap();
        let _third = connections.admit(peer).unwrap();
        assert_eq!(connections.tenants.held_by(&tenant(1)), 1);
        drop(first);
        assert_eq!(connections.tenants.held_by(&tenant(1)), 0);
    }

    #[test]
    fn a_tenant_over_its_share_is_refused_and_its_connection_closes() {
        let connections = connections(4, 4, 25);
        let a = tenant(1);
        let held: Vec<_> = (0..3)
            .map(|i| {
                let admitted = connections.admit(format!("192.0.2.{i}").parse().unwrap());
                let admitted = admitted.unwrap();
                charged(&admitted, &a).unwrap();
                // A second request of the same tenant on it charges nothing more.
                charged(&admitted, &a).unwrap();
                admitted
            })
            .collect();
        assert_eq!(connections.tenants.held_by(&a), 3);
        let fourth = connections.admit("192.0.2.9".parse().unwrap()).unwrap();
        let over = charged(&fourth, &a).unwrap_err();
        assert!(matches!(over, OpError::Busy { limit: 3, .. }), "{over}");
        assert!(fourth.closing() && !held[0].closing());
        // Another tenant is served on it; and a connection moves from tenant to tenant.
        let b = tenant(2);
        let other = connections.admit("192.0.2.10".parse().unwrap()).unwrap();
        charged(&other, &b).unwrap();
        charged(&held[0], &b).unwrap();
        assert_eq!(connections.tenants.held_by(&a), 2);
        assert_eq!(connections.tenants.held_by(&b), 2);
    }

    #[test]
    fn a_handle_outliving_its_connection_charges_nothing() {
        let connections = connections(4, 4, 25);
        let admitted = connections.admit("192.0.2.1".parse().unwrap()).unwrap();
        let mut extensions = http::Extensions::new();
        extensions.insert(admitted.handle());
        drop(admitted);
        charge(&extensions, &tenant(1)).unwrap();
        assert_eq!(connections.tenants.held_by(&tenant(1)), 0);
        assert_eq!(
            connections
                .anonymous
                .held_by(&Address::of("192.0.2.1".parse().unwrap())),
            0
        );
    }

    #[test]
    fn ipv6_clients_are_counted_by_their_64() {
        let a = Address::of("2001:db8:1:2:aaaa::1".parse().unwrap());
        let b = Address::of("2001:db8:1:2:bbbb::2".parse().unwrap());
        let c = Address::of("2001:db8:1:3::1".parse().unwrap());
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(
            Address::of("::ffff:192.0.2.1".parse().unwrap()),
            Address::of("192.0.2.1".parse().unwrap())
        );
    }
}
