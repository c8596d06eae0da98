//! Name resolution and the address vetting that follows it. The gateway resolves every name
//! itself (the box's view of DNS is never trusted) and dials only an address it has vetted,
//! so there is no second lookup for a rebinding attack to race.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;

use crate::address::forbidden_reason;

use super::audit::RefusedAddress;
use super::decision::DenyReason;

pub type ResolveFuture<'a> = Pin<Box<dyn Future<Output = io::Result<Vec<SocketAddr>>> + Send + 'a>>;

/// Turns a canonical host name and port into candidate addresses. The production resolver
/// is [`SystemResolver`]; tests inject fixed answers so no DNS is involved.
pub trait Resolver: Send + Sync {
    fn resolve<'a>(&'a self, host: &'a str, port: u16) -> ResolveFuture<'a>;
}

/// The host's resolver, through `tokio::net::lookup_host`.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemResolver;

impl Resolver for SystemResolver {
    fn resolve<'a>(&'a self, host: &'a str, port: u16) -> ResolveFuture<'a> {
        Box::pin(async move { Ok(tokio::net::lookup_host((host, port)).await?.collect()) })
    }
}

/// Fixed answers by name; a name it does not know fails to resolve. For tests.
#[derive(Debug, Default, Clone)]
pub struct StaticResolver {
    pub answers: HashMap<String, Vec<std::net::IpAddr>>,
}

impl Resolver for StaticResolver {
    fn resolve<'a>(&'a self, host: &'a str, port: u16) -> ResolveFuture<'a> {
        let answer = match self.answers.get(host) {
            Some(ips) => Ok(ips.iter().map(|ip| SocketAddr::new(*ip, port)).collect()),
            None => Err(io::Error::new(io::ErrorKind::NotFound, "no static answer")),
        };
        Box::pin(std::future::ready(answer))
    }
}

/// The outcome of vetting a resolver's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vetted {
    pub addr: SocketAddr,
    /// Addresses in the answer that were refused (kept for the audit line).
    pub refused: Vec<RefusedAddress>,
}

/// Picks the first address that is not forbidden. When all are forbidden the deny carries
/// the first one's class (`forbidden_address:loopback`) and every refused address.
pub fn vet_addresses(addrs: &[SocketAddr]) -> Result<Vetted, (DenyReason, Vec<RefusedAddress>)> {
    let mut refused = Vec::new();
    for addr in addrs {
        match forbidden_reason(addr.ip()) {
            Some(reason) => refused.push(RefusedAddress {
                addr: addr.ip(),
                reason,
            }),
            None => {
                return Ok(Vetted {
                    addr: *addr,
                    refused,
                })
            }
        }
    }
    match refused.first() {
        Some(first) => Err((DenyReason::ForbiddenAddress(first.reason), refused)),
        None => Err((DenyReason::ResolveFailed, refused)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_the_first_allowed_address() {
        let addrs: Vec<SocketAddr> = vec![
            "127.0.0.1:443".parse().unwrap(),
            "93.184.215.14:443".parse().unwrap(),
        ];
        let v = vet_addresses(&addrs).unwrap();
        assert_eq!(v.addr, addrs[1]);
        assert_eq!(v.refused.len(), 1);
    }

    #[test]
    fn refuses_when_all_are_forbidden() {
        let addrs: Vec<SocketAddr> = vec!["10.0.0.1:443".parse().unwrap()];
        let (reason, refused) = vet_addresses(&addrs).unwrap_err();
        assert!(matches!(reason, DenyReason::ForbiddenAddress(_)));
        assert_eq!(refused.len(), 1);
        let (reason, _) = vet_addresses(&[]).unwrap_err();
        assert_eq!(reason, DenyReason::ResolveFailed);
    }
}
