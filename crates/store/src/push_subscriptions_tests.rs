//! Push subscriptions, on both databases.

use crate::push_subscriptions::{NewPushSubscription, Subscribed};

fn new(endpoint: &str) -> NewPushSubscription<'_> {
    NewPushSubscription {
        endpoint,
        p256dh: "BPkey",
        auth: "auth",
    }
}

conformance! {
    fn subscriptions_are_per_tenant_unique_per_endpoint_and_bounded(db) {
        let store = db.open();
        let acme = store.create_tenant("acme").unwrap();
        let other = store.create_tenant("other").unwrap();

        let Subscribed::Added(first) = store
            .add_push_subscription(&acme.id, new("https://push.example/a"), 2)
            .unwrap()
        else {
            panic!("the first subscription is added");
        };
        assert!(first.id.starts_with("ps_") && first.id.len() == 3 + 16);

        // The same endpoint again: the same row, with the keys it was given last.
        let again = NewPushSubscription {
            p256dh: "BPnew",
            ..new("https://push.example/a")
        };
        let Subscribed::Existing(same) = store.add_push_subscription(&acme.id, again, 2).unwrap()
        else {
            panic!("the same endpoint is the same subscription");
        };
        assert_eq!(
            (same.id.as_str(), same.p256dh.as_str()),
            (first.id.as_str(), "BPnew")
        );

        assert!(matches!(
            store
                .add_push_subscription(&acme.id, new("https://push.example/b"), 2)
                .unwrap(),
            Subscribed::Added(_)
        ));
        assert_eq!(
            store
                .add_push_subscription(&acme.id, new("https://push.example/c"), 2)
                .unwrap(),
            Subscribed::LimitReached { max: 2 }
        );
        // At the limit, a known endpoint still re-subscribes.
        assert!(matches!(
            store
                .add_push_subscription(&acme.id, new("https://push.example/b"), 2)
                .unwrap(),
            Subscribed::Existing(_)
        ));
        // Another tenant has its own count and may subscribe the same endpoint.
        assert!(matches!(
            store
                .add_push_subscription(&other.id, new("https://push.example/a"), 2)
                .unwrap(),
            Subscribed::Added(_)
        ));

        let listed = store.list_push_subscriptions(&acme.id).unwrap();
        assert_eq!(listed.len(), 2);
        assert_eq!(listed[0].id, first.id);

        // Another tenant cannot delete it; its own tenant can, once.
        assert!(!store
            .delete_push_subscription(&other.id, &first.id)
            .unwrap());
        assert!(store.delete_push_subscription(&acme.id, &first.id).unwrap());
        assert!(!store.delete_push_subscription(&acme.id, &first.id).unwrap());
        assert_eq!(store.list_push_subscriptions(&acme.id).unwrap().len(), 1);
        assert_eq!(store.list_push_subscriptions(&other.id).unwrap().len(), 1);
    }
}
