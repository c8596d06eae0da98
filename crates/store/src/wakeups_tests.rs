//! Wakeups against a real SQLite file.

use serde_json::json;

use crate::ingress_tests::setup;
use crate::{AddedWakeup, NewWakeup, WakeupKind, WakeupLimits, WakeupOrigin};

const LIMITS: WakeupLimits = WakeupLimits {
    max_pending: 2,
    max_per_hour: None,
};

#[test]
fn a_slot_fires_once_and_a_cron_moves_on() {
    let (_dir, store, id) = setup();
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
    assert!(store
        .finish_slot(&once, 1_000, None, ("wakeup", &event))
        .unwrap());
    assert!(!store
        .finish_slot(&once, 1_000, None, ("wakeup", &event))
        .unwrap());
    assert_eq!(store.count_undelivered(&id).unwrap(), 1);

    assert!(store
        .finish_slot(&daily, 5_000, Some(90_000), ("wakeup", &event))
        .unwrap());
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

#[test]
fn a_box_makes_at_most_its_hourly_number() {
    let (_dir, store, id) = setup();
    let limits = WakeupLimits {
        max_pending: 100,
        max_per_hour: Some(2),
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
