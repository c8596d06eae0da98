//! Byte-bounded pages and the pruning of old events, on both databases.

use std::time::Duration;

use berth_protocol::harness::GuestEvent;
use serde_json::json;

use crate::ingress_tests::{count, guest, setup};
use crate::{BoxState, EventGap, EventRetention, PageLimit};

/// A guest event of `seq` whose data takes about `size` bytes, read by berth-init now.
fn sized(seq: u64, size: usize) -> GuestEvent {
    GuestEvent {
        seq,
        kind: "log".into(),
        data: json!({ "line": "x".repeat(size) }),
        at_ms: 0,
    }
}

const DAY: Duration = Duration::from_secs(24 * 3600);

conformance! {
    fn a_page_stops_at_its_byte_limit_but_always_holds_one_event(db) {
        let (store, id) = setup(db);
        let batch: Vec<GuestEvent> = (1..=10).map(|seq| sized(seq, 1000)).collect();
        store.append_guest_events(&id, &batch).unwrap();
        let limit = PageLimit {
            events: 1000,
            bytes: 2500,
        };
        let page = store.read_events(&id, 0, limit).unwrap();
        assert_eq!(page.events.len(), 2);
        assert!(page.more);
        assert_eq!(page.gap, None);
        let tiny = PageLimit {
            events: 1000,
            bytes: 10,
        };
        let page = store.read_events(&id, 4, tiny).unwrap();
        assert_eq!(
            page.events.len(),
            1,
            "one event even when it is over the limit"
        );
        assert_eq!(page.events[0].seq, 5);
        let page = store.read_events(&id, 8, limit).unwrap();
        assert_eq!(page.events.len(), 2);
        assert!(!page.more, "the last page says there is no more");
        let page = store.read_events(&id, 7, count(2)).unwrap();
        assert!(page.more, "a page full by count says there is more");
    }

    fn pruning_by_bytes_keeps_the_newest_marks_the_gap_and_never_reuses_a_seq(db) {
        let (store, id) = setup(db);
        let batch: Vec<GuestEvent> = (1..=100).map(|seq| sized(seq, 1000)).collect();
        let appended = store.append_guest_events(&id, &batch).unwrap();
        assert!(appended.kept_bytes > 100_000, "{appended:?}");
        let retention = EventRetention {
            max_bytes_per_box: 10_000,
            max_age: DAY,
        };
        let pruned = store.prune_events(retention).unwrap();
        assert_eq!(pruned.boxes, 1);
        let kept = 100 - pruned.events;
        assert!((1..=10).contains(&kept), "kept {kept} events of ~1 KB each");

        // A reader from the start is told what it missed, then gets the oldest kept onwards.
        let page = store.read_events(&id, 0, count(1000)).unwrap();
        let first_kept = 100 - kept + 1;
        assert_eq!(
            page.gap,
            Some(EventGap {
                first: 1,
                last: first_kept - 1
            })
        );
        assert_eq!(page.events.first().unwrap().seq, first_kept);
        assert_eq!(page.events.last().unwrap().seq, 100);
        // A reader that had read up to the pruned mark missed nothing.
        let page = store.read_events(&id, first_kept - 1, count(1000)).unwrap();
        assert_eq!(page.gap, None);
        assert_eq!(page.events.len() as u64, kept);

        // A second pass has nothing to do; the next event gets the next seq.
        assert_eq!(store.prune_events(retention).unwrap().events, 0);
        assert_eq!(
            store.append_event(&id, "note", &json!({})).unwrap(),
            101,
            "seqs go on after pruning"
        );
    }

    fn pruning_by_age_keeps_only_the_newest_event_and_a_state_change_gets_the_next_seq(db) {
        let (store, id) = setup(db);
        // berth-init read these in 2023.
        let old: Vec<GuestEvent> = (1..=5).map(|seq| guest(seq, "assistant")).collect();
        store.append_guest_events(&id, &old).unwrap();
        let retention = EventRetention {
            max_bytes_per_box: 1 << 30,
            max_age: DAY,
        };
        let pruned = store.prune_events(retention).unwrap();
        assert_eq!(pruned.events, 4, "every old event but the newest");
        let page = store.read_events(&id, 0, count(10)).unwrap();
        assert_eq!(page.gap, Some(EventGap { first: 1, last: 4 }));
        assert_eq!(page.events.len(), 1);
        assert_eq!(page.events[0].seq, 5);

        let generation = store.get_box(&id).unwrap().unwrap().generation;
        store
            .update_box_state(&id, generation, BoxState::Starting, None)
            .unwrap();
        assert_eq!(store.last_event_seq(&id).unwrap(), 6);
        // New events are young: kept.
        assert_eq!(store.prune_events(retention).unwrap().events, 1);
        let page = store.read_events(&id, 4, count(10)).unwrap();
        assert_eq!(page.gap, Some(EventGap { first: 5, last: 5 }));
        assert_eq!(page.events[0].seq, 6);
    }
}
