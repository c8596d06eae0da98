//! Wakeups, on both databases.

use serde_json::json;

use crate::ingress_tests::setup;
use crate::{
    AddedWakeup, NewWakeup, SlotFinished, SlotOutcome, SlotReached, WakeupKind, WakeupLimits,
    WakeupOrigin,
};

/// Slot `slot_ms` reached at `now_ms`, then `next_ms`.
fn reached(slot_ms: i64, next_ms: Option<i64>, now_ms: i64) -> SlotReached {
    SlotReached {
        slot_ms,
        next_ms,
        now_ms,
    }
}

const LIMITS: WakeupLimits = WakeupLimits {
    max_pending: 2,
    max_per_hour: None,
    max_box_crons: None,
};

const MINUTE_MS: i64 = 60_000;

fn event_count(store: &crate::Store, id: &berth_protocol::BoxId) -> usize {
    let limit = crate::PageLimit {
        events: 1000,
        bytes: 1 << 20,
    };
    store.read_events(id, 0, limit).unwrap().events.len()
}
const HOUR_MS: i64 = 60 * MINUTE_MS;

fn every_minute() -> WakeupKind {
    WakeupKind::Cron {
        expr: "* * * * *".into(),
        tz: "UTC".into(),
    }
}

conformance! {
    fn a_slot_fires_once_and_a_cron_moves_on(db) {
        let (store, id) = setup(db);
        let new = |kind, due| NewWakeup {
            box_id: &id,
            message: "check the build",
            kind,
            first_due_ms: due,
            created_by: WakeupOrigin::Api,
        };
        let AddedWakeup::Added(once) = store
            .add_wakeup(new(WakeupKind::In, 1_000), LIMITS)
            .unwrap()
        else {
            panic!("added");
        };
        assert!(once.id.starts_with("wk_") && once.id.len() == 3 + 16);
        let cron = WakeupKind::Cron {
            expr: "0 9 * * 1-5".into(),
            tz: "Europe/Paris".into(),
        };
        let AddedWakeup::Added(daily) = store.add_wakeup(new(cron.clone(), 5_000), LIMITS).unwrap()
        else {
            panic!("added");
        };
        assert_eq!(
            store
                .add_wakeup(new(WakeupKind::At, 9_000), LIMITS)
                .unwrap(),
            AddedWakeup::TooManyPending { max: 2 }
        );
        assert_eq!(store.next_wakeup_due_ms().unwrap(), Some(1_000));
        let due = store.due_wakeups(4_999, 10).unwrap();
        assert_eq!(due, vec![once.clone()]);

        // Posting twice under the slot's key stores one message; the slot finishes once.
        let key = once.slot_key(1_000);
        assert_eq!(key.as_str(), format!("wake:{}:1000", once.id));
        assert!(
            store
                .post_message(&id, Some(&key), &once.message)
                .unwrap()
                .created
        );
        assert!(
            !store
                .post_message(&id, Some(&key), &once.message)
                .unwrap()
                .created
        );
        let event = json!({"wakeup_id": once.id});
        let fire = |w, slot, next| {
            store
                .finish_slot(
                    w,
                    reached(slot, next, slot),
                    SlotOutcome::Fired,
                    ("wakeup", &event),
                    None,
                )
                .unwrap()
        };
        assert_eq!(fire(&once, 1_000, None), SlotFinished::Logged);
        assert_eq!(fire(&once, 1_000, None), SlotFinished::Gone);
        assert_eq!(store.count_undelivered(&id).unwrap(), 1);

        assert_eq!(fire(&daily, 5_000, Some(90_000)), SlotFinished::Logged);
        let listed = store.list_wakeups(&id).unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!((listed[0].next_due_ms, listed[0].fired), (90_000, 1));
        assert_eq!(listed[0].kind, cron);
        let page = store
            .read_events(
                &id,
                0,
                crate::PageLimit {
                    events: 100,
                    bytes: 1 << 20,
                },
            )
            .unwrap();
        assert_eq!(
            page.events.iter().filter(|e| e.kind == "wakeup").count(),
            2,
            "one event per slot"
        );

        assert!(store.delete_wakeup(&id, &daily.id).unwrap().is_some());
        assert!(store.delete_wakeup(&id, &daily.id).unwrap().is_none());
        assert_eq!(store.next_wakeup_due_ms().unwrap(), None);
    }

    fn a_box_makes_at_most_its_hourly_number(db) {
        let (store, id) = setup(db);
        let limits = WakeupLimits {
            max_pending: 100,
            max_per_hour: Some(2),
            max_box_crons: None,
        };
        let new = NewWakeup {
            box_id: &id,
            message: "m",
            kind: WakeupKind::In,
            first_due_ms: 1,
            created_by: WakeupOrigin::Box,
        };
        for _ in 0..2 {
            let AddedWakeup::Added(w) = store.add_wakeup(new.clone(), limits).unwrap() else {
                panic!("added");
            };
            // Cancelled ones still count against the hour.
            store.delete_wakeup(&id, &w.id).unwrap();
        }
        assert_eq!(
            store.add_wakeup(new, limits).unwrap(),
            AddedWakeup::TooManyPerHour { max: 2 }
        );
    }

    fn a_box_keeps_at_most_its_number_of_crons_and_older_ones_stay(db) {
        let (store, id) = setup(db);
        let limits = WakeupLimits {
            max_pending: 32,
            max_per_hour: None,
            max_box_crons: Some(2),
        };
        let new = |kind, created_by| NewWakeup {
            box_id: &id,
            message: "m",
            kind,
            first_due_ms: MINUTE_MS,
            created_by,
        };
        // Made before the cap (an upgrade keeps them): three of the box's own crons.
        let unbounded = WakeupLimits {
            max_box_crons: None,
            ..limits
        };
        for _ in 0..3 {
            assert!(matches!(
                store
                    .add_wakeup(new(every_minute(), WakeupOrigin::Box), unbounded)
                    .unwrap(),
                AddedWakeup::Added(_)
            ));
        }
        assert_eq!(
            store
                .add_wakeup(new(every_minute(), WakeupOrigin::Box), limits)
                .unwrap(),
            AddedWakeup::TooManyCrons { max: 2 }
        );
        assert_eq!(
            store.list_wakeups(&id).unwrap().len(),
            3,
            "the older ones stay"
        );
        // The cap is on the box's own crons: one-shot wakeups, and crons set through the API,
        // are not counted.
        for (kind, origin) in [
            (WakeupKind::In, WakeupOrigin::Box),
            (every_minute(), WakeupOrigin::Api),
        ] {
            assert!(matches!(
                store.add_wakeup(new(kind, origin), limits).unwrap(),
                AddedWakeup::Added(_)
            ));
        }
    }

    fn a_boxs_fired_slots_count_over_the_last_hour_and_a_skip_is_told_once_an_hour(db) {
        let (store, id) = setup(db);
        let limits = WakeupLimits {
            max_pending: 32,
            max_per_hour: None,
            max_box_crons: None,
        };
        let add = |created_by| {
            let new = NewWakeup {
                box_id: &id,
                message: "m",
                kind: every_minute(),
                first_due_ms: MINUTE_MS,
                created_by,
            };
            match store.add_wakeup(new, limits).unwrap() {
                AddedWakeup::Added(w) => w,
                other => panic!("{other:?}"),
            }
        };
        let own = add(WakeupOrigin::Box);
        let api = add(WakeupOrigin::Api);
        let reload = |w: &crate::Wakeup| {
            store
                .list_wakeups(&id)
                .unwrap()
                .into_iter()
                .find(|l| l.id == w.id)
                .unwrap()
        };
        let event = json!({"wakeup_id": own.id});

        let end = |w: &crate::Wakeup, at: SlotReached, outcome| {
            store
                .finish_slot(w, at, outcome, ("wakeup", &event), None)
                .unwrap()
        };
        let first = reached(MINUTE_MS, Some(2 * MINUTE_MS), MINUTE_MS);
        assert_eq!(end(&own, first, SlotOutcome::Fired), SlotFinished::Logged);
        // A wakeup set through the API is not the box's own: not counted.
        assert_eq!(end(&api, first, SlotOutcome::Fired), SlotFinished::Logged);
        assert_eq!(store.box_slots_fired(&id, MINUTE_MS).unwrap(), 1);
        assert_eq!(store.box_slots_fired(&id, HOUR_MS).unwrap(), 1);
        assert_eq!(
            store.box_slots_fired(&id, MINUTE_MS + HOUR_MS).unwrap(),
            0,
            "an hour later it no longer counts"
        );

        let own = reload(&own);
        assert_eq!(own.next_due_ms, 2 * MINUTE_MS);
        let before = event_count(&store, &id);
        let skip = |w: &crate::Wakeup, slot: i64, at: i64| {
            end(
                w,
                reached(slot, Some(slot + MINUTE_MS), at),
                SlotOutcome::Skipped,
            )
        };
        assert_eq!(
            skip(&own, 2 * MINUTE_MS, 2 * MINUTE_MS),
            SlotFinished::Logged
        );
        assert_eq!(
            skip(&own, 2 * MINUTE_MS, 2 * MINUTE_MS),
            SlotFinished::Gone,
            "once per slot"
        );
        let own = reload(&own);
        assert_eq!(
            (own.next_due_ms, own.fired, own.skipped),
            (3 * MINUTE_MS, 1, 1)
        );
        assert_eq!(
            skip(&own, 3 * MINUTE_MS, 3 * MINUTE_MS),
            SlotFinished::Counted
        );
        let events = event_count(&store, &id);
        assert_eq!(events, before + 1, "the log is told of the first skip only");
        // Skips do not count as fired.
        assert_eq!(store.box_slots_fired(&id, 3 * MINUTE_MS).unwrap(), 1);
        // An hour after the told one, the next is told again; in between, only counted.
        let own = reload(&own);
        let later = 2 * MINUTE_MS + HOUR_MS;
        assert_eq!(
            skip(&own, own.next_due_ms, later - 1),
            SlotFinished::Counted
        );
        let own = reload(&own);
        assert_eq!(skip(&own, own.next_due_ms, later), SlotFinished::Logged);
        assert_eq!(event_count(&store, &id), before + 2);
        // A last slot skipped ends the wakeup.
        let own = reload(&own);
        assert_eq!(
            end(
                &own,
                reached(own.next_due_ms, None, later + 2),
                SlotOutcome::Skipped
            ),
            SlotFinished::Counted
        );
        assert!(store
            .list_wakeups(&id)
            .unwrap()
            .iter()
            .all(|w| w.id != own.id));
    }
}
