//! Keep-alive connections to the apps in boxes, reused across proxied requests.
//!
//! Dialling a port is a guest-channel connection, an upgrade round trip, a TCP connect
//! inside the box and, for many app servers, a thread or task of their own: most of a
//! small request's time through the proxy. A connection whose answer was read to its end
//! goes back here, keyed by box, boot and port (a connection of an earlier boot is never
//! reused), and the next request to that port takes it. Bounded: a few idle connections
//! per port and in all, each for a short while.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::body::Body;
use berth_protocol::BoxId;
use hyper::client::conn::http1::SendRequest;

/// Idle connections kept per box port.
const IDLE_PER_PORT: usize = 8;
/// Idle connections kept in all.
const IDLE_TOTAL: usize = 256;
/// An idle connection older than this is dropped rather than reused (apps close idle
/// keep-alive connections after a while of their own: Node.js after 5 s).
const IDLE_FOR: Duration = Duration::from_secs(4);

/// Which app a connection reaches.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AppKey {
    pub box_id: BoxId,
    pub boot: u64,
    pub port: u16,
}

#[derive(Default)]
pub struct AppPool {
    idle: Mutex<Idle>,
}

#[derive(Default)]
struct Idle {
    total: usize,
    by_app: HashMap<AppKey, Vec<(Instant, SendRequest<Body>)>>,
}

impl std::fmt::Debug for AppPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppPool").finish_non_exhaustive()
    }
}

impl AppPool {
    /// An idle connection to `key`'s app that is still open, if any (the caller waits for
    /// it to be ready: the end of its last answer may not have reached its task yet).
    pub fn take(&self, key: &AppKey) -> Option<SendRequest<Body>> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let Idle { total, by_app } = &mut *idle;
        let senders = by_app.get_mut(key)?;
        let mut found = None;
        while let Some((since, sender)) = senders.pop() {
            *total -= 1;
            if since.elapsed() < IDLE_FOR && !sender.is_closed() {
                found = Some(sender);
                break;
            }
        }
        if senders.is_empty() {
            by_app.remove(key);
        }
        found
    }

    /// Keeps `sender` for the next request to `key`, when there is room.
    pub fn give(&self, key: AppKey, sender: SendRequest<Body>) {
        if sender.is_closed() {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.total >= IDLE_TOTAL {
            // Room first: drop what has gone stale anywhere.
            idle.by_app.retain(|_, senders| {
                senders.retain(|(since, s)| since.elapsed() < IDLE_FOR && !s.is_closed());
                !senders.is_empty()
            });
            idle.total = idle.by_app.values().map(Vec::len).sum();
            if idle.total >= IDLE_TOTAL {
                return;
            }
        }
        let senders = idle.by_app.entry(key).or_default();
        if senders.len() >= IDLE_PER_PORT {
            return;
        }
        senders.push((Instant::now(), sender));
        idle.total += 1;
    }

    /// Idle connections held (for tests and logs).
    pub fn idle_count(&self) -> usize {
        self.idle.lock().unwrap_or_else(|p| p.into_inner()).total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client connection over an in-memory pipe, and the app's end of it.
    async fn connection() -> (SendRequest<Body>, tokio::io::DuplexStream) {
        let (ours, theirs) = tokio::io::duplex(1024);
        let (sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(ours))
                .await
                .unwrap();
        tokio::spawn(conn);
        (sender, theirs)
    }

    fn key(port: u16) -> AppKey {
        AppKey {
            box_id: BoxId::from_random([7; 20]),
            boot: 1,
            port,
        }
    }

    #[tokio::test]
    async fn idle_connections_are_bounded_per_port_and_closed_ones_are_not_reused() {
        let pool = AppPool::default();
        let mut apps = Vec::new();
        for _ in 0..IDLE_PER_PORT + 2 {
            let (sender, app) = connection().await;
            apps.push(app);
            pool.give(key(80), sender);
        }
        assert_eq!(pool.idle_count(), IDLE_PER_PORT);
        assert!(pool.take(&key(81)).is_none(), "another port's connection");
        let other_boot = AppKey { boot: 2, ..key(80) };
        assert!(
            pool.take(&other_boot).is_none(),
            "an earlier boot's connection"
        );

        // The app closes every connection: none is handed out again.
        drop(apps);
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            match pool.take(&key(80)) {
                None => break,
                Some(sender) => {
                    assert!(Instant::now() < deadline, "a closed connection stays open");
                    // Seen before the close reached it: wait for it to close.
                    let mut sender = sender;
                    assert!(sender.ready().await.is_err());
                }
            }
        }
        assert_eq!(pool.idle_count(), 0);
    }
}
