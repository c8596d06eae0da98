//! Messages, events and boot tokens, on both databases.

use std::sync::{Arc, Mutex};

use berth_protocol::harness::GuestEvent;
use berth_protocol::{BoxId, TenantId};
use serde_json::json;

use crate::test_db::TestDb;
use crate::{
    BoxRecord, BoxState, EventListener, MessageId, MessageState, NewBox, PageLimit, Store,
    StoreError, DEFAULT_TENANT,
};

/// A store on `db` with the default tenant and one box of it.
pub(crate) fn setup(db: &TestDb) -> (Store, BoxId) {
    let store = db.open();
    let tenant = store.create_tenant(DEFAULT_TENANT).unwrap();
    let record = insert_box(&store, tenant.id, "b");
    (store, record.id)
}

/// A new box `name` of `tenant`.
pub(crate) fn insert_box(store: &Store, tenant: TenantId, name: &str) -> BoxRecord {
    let mut random = [0u8; 20];
    getrandom::fill(&mut random).unwrap();
    let record = store
        .insert_box(&NewBox {
            id: BoxId::from_random(random),
            tenant_id: tenant,
            name: name.into(),
            template: "host".into(),
            memory_mib: 512,
            pids: 256,
            cpus: 1.0,
            sleep: crate::SleepSettings {
                pause_after_s: 0,
                snapshot_after_s: 0,
                stop_after_s: 60,
                auto_resume: true,
            },
            egress: None,
            runtime: "sandbox".into(),
            disk_mib: None,
            labels: Default::default(),
            env: Default::default(),
        })
        .unwrap();
    assert_eq!(record.stop_after_s, 60);
    record
}

pub(crate) fn guest(seq: u64, kind: &str) -> GuestEvent {
    GuestEvent {
        seq,
        kind: kind.into(),
        data: json!({"type": kind, "n": seq}),
        at_ms: 1_700_000_000_123,
    }
}

#[derive(Default)]
struct Heard(Mutex<Vec<u64>>);

impl EventListener for Heard {
    fn appended(&self, _box_id: &BoxId, last_seq: u64) {
        self.0.lock().unwrap().push(last_seq);
    }
}

conformance! {
    fn messages_get_gapless_seqs_and_are_durable_across_handles(db) {
        let (store, id) = setup(db);
        let a = store.post_message(&id, None, "one").unwrap();
        let b = store.post_message(&id, None, "two").unwrap();
        assert_eq!((a.seq, b.seq), (1, 2));
        assert!(a.created && a.id.as_str().starts_with("msg_") && a.id != b.id);
        // A second handle (another connection) sees the committed rows at once.
        let other = db.open();
        let listed = other.list_messages(&id, 0, 10).unwrap();
        assert_eq!(listed.len(), 2);
        assert_eq!(listed[1].content, "two");
        assert_eq!(listed[0].state, MessageState::Queued);
        assert_eq!(other.list_messages(&id, 1, 10).unwrap()[0].seq, 2);
        assert_eq!(other.list_messages(&id, 0, 1).unwrap().len(), 1);
    }

    fn an_idempotency_key_answers_the_same_message_and_refuses_other_content(db) {
        let (store, id) = setup(db);
        let key = MessageId::from_key("client-1:a.b").unwrap();
        store
            .append_event(&id, "state", &serde_json::json!({"state": "running"}))
            .unwrap();
        let first = store.post_message(&id, Some(&key), "hi").unwrap();
        assert_eq!(
            first.events_after,
            Some(1),
            "the turn starts after the newest event"
        );
        store
            .append_event(&id, "result", &serde_json::json!({"result": "hello"}))
            .unwrap();
        let again = store.post_message(&id, Some(&key), "hi").unwrap();
        // A repost of an answered message still points before its answer.
        assert_eq!(
            (again.seq, again.created, again.events_after),
            (first.seq, false, Some(1))
        );
        assert!(matches!(
            store.post_message(&id, Some(&key), "other"),
            Err(StoreError::IdempotencyConflict { .. })
        ));
        assert_eq!(store.list_messages(&id, 0, 10).unwrap().len(), 1);
        for bad in ["", "a b", "é", &"x".repeat(129)] {
            assert!(MessageId::from_key(bad).is_err(), "{bad:?}");
        }
        assert!(MessageId::from_key(&"x".repeat(128)).is_ok());
    }

    fn delivery_goes_in_seq_order_and_marks_once(db) {
        let (store, id) = setup(db);
        let ids: Vec<_> = ["a", "b", "c"]
            .iter()
            .map(|c| store.post_message(&id, None, c).unwrap().id)
            .collect();
        assert_eq!(store.count_undelivered(&id).unwrap(), 3);
        assert_eq!(
            store.boxes_with_queued_messages(None).unwrap(),
            vec![id.clone()]
        );
        for expected in &ids {
            let next = store.next_undelivered(&id).unwrap().unwrap();
            assert_eq!(&next.id, expected);
            assert!(store.mark_delivered(&id, &next.id).unwrap());
            assert!(!store.mark_delivered(&id, &next.id).unwrap());
        }
        assert!(store.next_undelivered(&id).unwrap().is_none());
        let listed = store.list_messages(&id, 0, 10).unwrap();
        assert!(listed
            .iter()
            .all(|m| m.state == MessageState::Delivered && m.delivered_at.is_some()));
        assert!(store.boxes_with_queued_messages(None).unwrap().is_empty());
    }

    fn guest_events_are_stored_once_with_host_seqs_and_state_changes_interleave(db) {
        let (store, id) = setup(db);
        let heard = Arc::new(Heard::default());
        store.add_event_listener(heard.clone());
        let record = store.get_box(&id).unwrap().unwrap();
        store
            .update_box_state(&id, record.generation, BoxState::Starting, None)
            .unwrap();
        let stored = store
            .append_guest_events(&id, &[guest(1, "system"), guest(2, "assistant")])
            .unwrap();
        assert_eq!((stored.stored, stored.last_seq, stored.cursor), (2, 3, 2));
        // A re-read from an older cursor stores only what is new.
        let again = store
            .append_guest_events(&id, &[guest(2, "assistant"), guest(3, "result")])
            .unwrap();
        assert_eq!((again.stored, again.last_seq, again.cursor), (1, 4, 3));
        assert_eq!(store.append_event(&id, "note", &json!({})).unwrap(), 5);
        assert_eq!(*heard.0.lock().unwrap(), vec![1, 3, 4, 5]);

        let reopened = db.open();
        assert_eq!(reopened.event_cursor(&id).unwrap(), 3);
        let events = reopened.read_events(&id, 0, count(100)).unwrap().events;
        let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, vec![1, 2, 3, 4, 5]);
        let kinds: Vec<&str> = events.iter().map(|e| e.kind.as_str()).collect();
        assert_eq!(
            kinds,
            vec!["state", "system", "assistant", "result", "note"]
        );
        assert_eq!(events[0].data, json!({"state": "starting", "reason": null}));
        assert_eq!(events[3].data["n"], 3);
        assert_eq!(
            reopened.read_events(&id, 3, count(1)).unwrap().events[0].seq,
            4
        );
        assert_eq!(reopened.last_event_seq(&id).unwrap(), 5);
    }

    fn the_boot_token_lives_while_running_and_deleting_a_box_drops_its_log(db) {
        let (store, id) = setup(db);
        let mut generation = store.get_box(&id).unwrap().unwrap().generation;
        generation = store
            .update_box_state(&id, generation, BoxState::Starting, None)
            .unwrap();
        generation = store
            .update_box_state(&id, generation, BoxState::Running, None)
            .unwrap();
        let boot = crate::LastBoot {
            began_at_ms: None,
            total_micros: 0,
            restored: false,
            phases: Vec::new(),
        };
        store.record_boot(&id, "tok", &boot).unwrap();
        assert_eq!(store.boot_token(&id).unwrap().as_deref(), Some("tok"));
        generation = store
            .update_box_state(&id, generation, BoxState::Stopping, None)
            .unwrap();
        assert_eq!(store.boot_token(&id).unwrap(), None);
        store.post_message(&id, None, "x").unwrap();
        store
            .append_guest_events(&id, &[guest(1, "system")])
            .unwrap();
        store
            .update_box_state(&id, generation, BoxState::Deleted, None)
            .unwrap();
        assert!(matches!(
            store.boot_token(&id),
            Err(StoreError::BoxNotFound { .. })
        ));
        assert!(store
            .read_events(&id, 0, count(10))
            .unwrap()
            .events
            .is_empty());
        assert!(store.list_messages(&id, 0, 10).unwrap().is_empty());
        assert!(matches!(
            store.post_message(&id, None, "y"),
            Err(StoreError::BoxNotFound { .. })
        ));
    }

    fn many_posts_get_every_seq_once_and_print_the_fsync_rate(db) {
        let (store, id) = setup(db);
        let began = std::time::Instant::now();
        let n = 500;
        for i in 0..n {
            let posted = store.post_message(&id, None, &format!("m{i}")).unwrap();
            assert_eq!(posted.seq, i + 1);
        }
        let elapsed = began.elapsed();
        println!(
            "{n} messages committed (fsync'd) in {:.0} ms: {:.0} messages/s",
            elapsed.as_secs_f64() * 1000.0,
            n as f64 / elapsed.as_secs_f64()
        );
        let listed = store.list_messages(&id, 0, 1000).unwrap();
        assert_eq!(listed.len(), n as usize);
        assert!(listed
            .iter()
            .enumerate()
            .all(|(i, m)| m.seq == i as u64 + 1));
    }
}

/// A page limit by count only.
pub(crate) fn count(events: u32) -> PageLimit {
    PageLimit {
        events,
        bytes: u64::MAX,
    }
}
