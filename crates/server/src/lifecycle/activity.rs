//! Who is using a box right now, and since when nobody has.
//!
//! Every call that does work in a box (exec for its whole stream, a file call, a message
//! being delivered) holds an [`ActivityGuard`] from [`Activity::begin`]; dropping the guard
//! ends the use. An open event stream holds none: watching a box is not using it. A box is idle when no guard is
//! held and the last one was dropped at least `stop_after_s` ago. The idle reclaimer
//! (`lifecycle/idle.rs`) reads this; nothing here is durable.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use berth_protocol::BoxId;

#[derive(Debug, Clone, Copy)]
struct Entry {
    in_flight: u32,
    last_active: Instant,
}

/// In-flight uses and the last activity of every box.
#[derive(Debug, Default)]
pub struct Activity {
    boxes: Mutex<HashMap<BoxId, Entry>>,
}

/// Whether a box is in use, as [`Activity::state`] sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Use {
    /// This many calls are using the box.
    Busy(u32),
    /// Nobody uses the box; the last use ended this long ago.
    IdleFor(Duration),
}

impl Activity {
    /// Marks the start of a use of box `id`; the use lasts until the guard is dropped.
    pub fn begin(self: &Arc<Self>, id: &BoxId) -> ActivityGuard {
        {
            let mut boxes = self.lock();
            let entry = boxes.entry(id.clone()).or_insert(Entry {
                in_flight: 0,
                last_active: Instant::now(),
            });
            entry.in_flight += 1;
            entry.last_active = Instant::now();
        }
        ActivityGuard {
            activity: self.clone(),
            id: id.clone(),
        }
    }

    /// Records a moment of activity (a box start, a harness found busy) without a guard.
    pub fn touch(&self, id: &BoxId) {
        let mut boxes = self.lock();
        let entry = boxes.entry(id.clone()).or_insert(Entry {
            in_flight: 0,
            last_active: Instant::now(),
        });
        entry.last_active = Instant::now();
    }

    /// Whether box `id` is in use. A box never seen counts as active just now: it gets a
    /// whole idle timeout from the first time anyone asks.
    pub fn state(&self, id: &BoxId) -> Use {
        let mut boxes = self.lock();
        let entry = boxes.entry(id.clone()).or_insert(Entry {
            in_flight: 0,
            last_active: Instant::now(),
        });
        match entry.in_flight {
            0 => Use::IdleFor(entry.last_active.elapsed()),
            n => Use::Busy(n),
        }
    }

    /// Like [`Activity::state`], for reading only: a box never seen is `None` (and stays
    /// unseen, so looking does not restart its clock).
    pub fn peek(&self, id: &BoxId) -> Option<Use> {
        let boxes = self.lock();
        let entry = boxes.get(id)?;
        Some(match entry.in_flight {
            0 => Use::IdleFor(entry.last_active.elapsed()),
            n => Use::Busy(n),
        })
    }

    /// Drops what is known about a deleted box.
    pub fn forget(&self, id: &BoxId) {
        self.lock().remove(id);
    }

    fn end(&self, id: &BoxId) {
        let mut boxes = self.lock();
        if let Some(entry) = boxes.get_mut(id) {
            entry.in_flight = entry.in_flight.saturating_sub(1);
            entry.last_active = Instant::now();
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<BoxId, Entry>> {
        self.boxes.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// One use of a box; ends when dropped. `Send + 'static`: a streaming response can own it.
#[derive(Debug)]
#[must_use = "the use of the box ends when the guard is dropped"]
pub struct ActivityGuard {
    activity: Arc<Activity>,
    id: BoxId,
}

impl ActivityGuard {
    pub fn box_id(&self) -> &BoxId {
        &self.id
    }
}

impl Drop for ActivityGuard {
    fn drop(&mut self) {
        self.activity.end(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn idle_for(u: Use) -> Duration {
        match u {
            Use::IdleFor(d) => d,
            Use::Busy(n) => panic!("busy with {n}"),
        }
    }

    #[test]
    fn guards_count_uses_and_the_last_drop_restarts_the_clock() {
        let activity = Arc::new(Activity::default());
        let id = BoxId::from_random([1; 20]);
        let other = BoxId::from_random([2; 20]);
        let a = activity.begin(&id);
        let b = activity.begin(&id);
        assert_eq!(activity.state(&id), Use::Busy(2));
        assert!(matches!(activity.state(&other), Use::IdleFor(_)));
        drop(a);
        assert_eq!(activity.state(&id), Use::Busy(1));
        std::thread::sleep(Duration::from_millis(20));
        drop(b);
        assert!(idle_for(activity.state(&id)) < Duration::from_millis(20));
    }

    #[test]
    fn a_guard_outliving_forget_does_not_underflow() {
        let activity = Arc::new(Activity::default());
        let id = BoxId::from_random([3; 20]);
        let g = activity.begin(&id);
        activity.forget(&id);
        drop(g);
        assert!(matches!(activity.state(&id), Use::IdleFor(_)));
        let g = activity.begin(&id);
        assert_eq!(activity.state(&id), Use::Busy(1));
        drop(g);
    }

    #[test]
    fn guards_move_across_threads() {
        fn is_send_static<T: Send + 'static>(_: &T) {}
        let activity = Arc::new(Activity::default());
        let g = activity.begin(&BoxId::from_random([4; 20]));
        is_send_static(&g);
    }
}
