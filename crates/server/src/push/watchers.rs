//! Who is watching which box: the open event streams (`GET /v1/boxes/{ref}/events`) per
//! tenant and box. A turn that ends while its box is watched needs no push: the person
//! sees the answer on the screen that holds the stream.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use berth_protocol::{BoxId, TenantId};

type Key = (TenantId, BoxId);

/// Open streams per (tenant, box). At most one entry per open stream, and streams are
/// bounded per tenant (`[server] max_streams_per_tenant`), so this is bounded too.
#[derive(Debug, Default)]
pub struct Watchers {
    open: Mutex<HashMap<Key, usize>>,
}

/// Held by an open stream; dropping it (the client went away) ends the watch.
#[derive(Debug)]
pub struct Watching {
    watchers: Arc<Watchers>,
    key: Key,
}

impl Watchers {
    /// Counts a stream of `tenant` on `box_id` until the returned guard drops.
    pub fn watch(self: &Arc<Self>, tenant: &TenantId, box_id: &BoxId) -> Watching {
        let key = (tenant.clone(), box_id.clone());
        *self.lock().entry(key.clone()).or_default() += 1;
        Watching {
            watchers: self.clone(),
            key,
        }
    }

    /// Whether `tenant` has an event stream of `box_id` open now.
    pub fn is_watched(&self, tenant: &TenantId, box_id: &BoxId) -> bool {
        self.lock().contains_key(&(tenant.clone(), box_id.clone()))
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<Key, usize>> {
        // Counts stay consistent under a panic elsewhere (each change is one statement).
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Watching {
    fn drop(&mut self) {
        let mut open = self.watchers.lock();
        if let Some(count) = open.get_mut(&self.key) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_box_is_watched_while_any_stream_of_its_tenant_is_open() {
        let watchers = Arc::new(Watchers::default());
        let tenant = TenantId::from_random([1; 20]);
        let other = TenantId::from_random([2; 20]);
        let id = BoxId::from_random([3; 20]);
        assert!(!watchers.is_watched(&tenant, &id));
        let first = watchers.watch(&tenant, &id);
        let second = watchers.watch(&tenant, &id);
        assert!(watchers.is_watched(&tenant, &id));
        assert!(!watchers.is_watched(&other, &id));
        drop(first);
        assert!(watchers.is_watched(&tenant, &id));
        drop(second);
        assert!(!watchers.is_watched(&tenant, &id));
        assert!(watchers.lock().is_empty(), "no entry left behind");
    }
}
