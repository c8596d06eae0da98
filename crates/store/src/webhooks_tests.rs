//! Webhooks, on both databases: events are queued with the event itself, only for
//! a tenant with webhooks and only of the kinds they may want; fan-out and attempts.

use berth_protocol::TenantId;
use serde_json::json;
use time::OffsetDateTime;

use crate::tests::new_box;
use crate::webhooks::{Attempt, DeliveryState, NewDelivery, Webhook, WebhookAdded};
use crate::BoxState;

fn webhook(tenant: &TenantId, id: &str) -> Webhook {
    Webhook {
        id: id.to_owned(),
        tenant_id: tenant.clone(),
        url: "https://hooks.example/in".to_owned(),
        events: vec!["box.state_changed".to_owned()],
        description: String::new(),
        key_id: "k1".to_owned(),
        nonce: vec![1; 12],
        ciphertext: vec![2; 40],
        created_at: OffsetDateTime::now_utc().replace_nanosecond(0).unwrap(),
    }
}

fn delivery(tenant: &TenantId, webhook: &str, id: &str) -> NewDelivery {
    NewDelivery {
        id: id.to_owned(),
        webhook_id: webhook.to_owned(),
        tenant_id: tenant.clone(),
        event: "box.state_changed".to_owned(),
        payload: "{}".to_owned(),
        refused: None,
    }
}

conformance! {
    fn events_are_queued_with_their_box_only_for_tenants_with_webhooks(db) {
        let store = db.open();
        let acme = store.create_tenant("acme").unwrap();
        let other = store.create_tenant("other").unwrap();
        let mine = store.insert_box(&new_box(&acme.id, "alice")).unwrap();
        let theirs = store.insert_box(&new_box(&other.id, "bob")).unwrap();

        // No webhook yet: nothing is queued.
        store
            .append_event(&mine.id, "state", &json!({"state": "running"}))
            .unwrap();
        assert!(store.webhook_queue(10).unwrap().is_empty());

        let hook = webhook(&acme.id, "wh_0000000000000001");
        assert_eq!(
            store.add_webhook(&hook, 5).unwrap(),
            WebhookAdded::Added(hook.clone())
        );
        // A state change (stored in its own transaction with the event), a turn's result, and
        // kinds no webhook is told of.
        store
            .update_box_state(&mine.id, mine.generation, BoxState::Starting, None)
            .unwrap();
        store
            .append_event(&mine.id, "result", &json!({"result": "hi"}))
            .unwrap();
        store
            .append_event(&mine.id, "assistant", &json!({}))
            .unwrap();
        store.append_event(&mine.id, "log", &json!({})).unwrap();
        store
            .append_event(&theirs.id, "state", &json!({"state": "running"}))
            .unwrap();

        let queued = store.webhook_queue(10).unwrap();
        let kinds: Vec<_> = queued.iter().map(|q| (q.kind.as_str(), q.seq)).collect();
        assert_eq!(kinds, [("state", 2), ("result", 3)]);
        assert_eq!(queued[0].box_name, "alice");
        assert_eq!(queued[0].tenant_id, acme.id);
        assert_eq!(queued[0].data["state"], "starting");
        assert_eq!(queued[1].data["result"], "hi");

        // Fanned out: the queue empties and the deliveries are pending, due now.
        let done: Vec<i64> = queued.iter().map(|q| q.id).collect();
        let mut refused = delivery(&acme.id, &hook.id, "msg_b");
        refused.refused = Some("too many pending".to_owned());
        store
            .fan_out(&done, &[delivery(&acme.id, &hook.id, "msg_a"), refused])
            .unwrap();
        assert!(store.webhook_queue(10).unwrap().is_empty());
        assert_eq!(store.pending_deliveries(&hook.id).unwrap(), 1);
        let due = store.due_deliveries(i64::MAX, 10).unwrap();
        assert_eq!(due.len(), 1);
        assert_eq!(
            (due[0].id.as_str(), due[0].state),
            ("msg_a", DeliveryState::Pending)
        );
        assert_eq!(
            store.next_delivery_due().unwrap(),
            Some(due[0].next_attempt_ms)
        );

        // A failed attempt to retry later, then an answered one; a late record is ignored.
        let later = due[0].next_attempt_ms + 60_000;
        let retry = Attempt {
            status: Some(503),
            error: None,
            retry: Some(Some(later)),
        };
        store.record_attempt("msg_a", &retry).unwrap();
        assert!(store.due_deliveries(later - 1, 10).unwrap().is_empty());
        assert_eq!(store.due_deliveries(later, 10).unwrap()[0].attempts, 1);
        let answered = Attempt {
            status: Some(204),
            error: None,
            retry: None,
        };
        store.record_attempt("msg_a", &answered).unwrap();
        store.record_attempt("msg_a", &retry).unwrap();
        let listed = store.list_deliveries(&acme.id, &hook.id, 10).unwrap();
        let states: Vec<_> = listed
            .iter()
            .map(|d| (d.id.as_str(), d.state, d.attempts))
            .collect();
        assert!(
            states.contains(&("msg_a", DeliveryState::Delivered, 2)),
            "{states:?}"
        );
        assert!(
            states.contains(&("msg_b", DeliveryState::Failed, 0)),
            "{states:?}"
        );
        assert_eq!(store.next_delivery_due().unwrap(), None);
        // Another tenant sees none of it.
        assert!(store
            .list_deliveries(&other.id, &hook.id, 10)
            .unwrap()
            .is_empty());
        assert!(store.get_delivery(&other.id, "msg_a").unwrap().is_none());
        assert!(store
            .get_webhook(Some(&other.id), &hook.id)
            .unwrap()
            .is_none());
    }

    fn webhooks_are_bounded_per_tenant_and_take_their_deliveries_with_them(db) {
        let store = db.open();
        let acme = store.create_tenant("acme").unwrap();
        let first = webhook(&acme.id, "wh_0000000000000001");
        store.add_webhook(&first, 1).unwrap();
        assert_eq!(
            store
                .add_webhook(&webhook(&acme.id, "wh_0000000000000002"), 1)
                .unwrap(),
            WebhookAdded::LimitReached { max: 1 }
        );
        store
            .fan_out(&[], &[delivery(&acme.id, &first.id, "msg_a")])
            .unwrap();
        assert_eq!(store.secret_key_ids().unwrap(), ["k1"]);
        assert!(store.delete_webhook(&acme.id, &first.id).unwrap());
        assert!(!store.delete_webhook(&acme.id, &first.id).unwrap());
        assert!(store.due_deliveries(i64::MAX, 10).unwrap().is_empty());
        // A delivery for a webhook deleted meanwhile is not stored.
        store
            .fan_out(&[], &[delivery(&acme.id, &first.id, "msg_b")])
            .unwrap();
        assert!(store.due_deliveries(i64::MAX, 10).unwrap().is_empty());
    }
}
