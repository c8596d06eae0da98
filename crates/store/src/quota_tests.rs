//! Tenant quotas, API keys and id slots, on both databases.

use std::sync::Arc;

use crate::tests::new_box;
use crate::{
    Admission, BoxState, NewBox, QuotaChange, QuotaExceeded, QuotaLimit, Store, StoreError,
};

fn quota_error(result: Result<impl std::fmt::Debug, StoreError>) -> QuotaExceeded {
    match result {
        Err(StoreError::QuotaExceeded(e)) => e,
        other => panic!("expected quota_exceeded, got {other:?}"),
    }
}

conformance! {
    fn boxes_memory_and_disk_are_refused_past_the_quota(db) {
        let store = db.open();
        let tenant = store.create_tenant("acme").unwrap();
        let change = QuotaChange {
            max_boxes: Some(Some(3)),
            max_memory_mib: Some(Some(1000)),
            max_disk_mib: Some(Some(3000)),
            ..QuotaChange::default()
        };
        store.set_quota(&tenant.id, &change).unwrap();
        // Template-sized boxes count their template's size (1000 MiB here).
        let admit = Admission {
            id_slots: u32::MAX,
            template_disk: &|_| 1000,
        };
        store.admit_box(&new_box(&tenant.id, "a"), admit).unwrap();
        let e = quota_error(store.admit_box(&new_box(&tenant.id, "b"), admit));
        assert_eq!(
            (e.which, e.limit, e.usage, e.requested),
            (QuotaLimit::MaxMemoryMib, 1000, 512, 512)
        );
        let small = |name: &str| NewBox {
            memory_mib: 128,
            ..new_box(&tenant.id, name)
        };
        store.admit_box(&small("b"), admit).unwrap();
        let big_disk = NewBox {
            disk_mib: Some(1001),
            ..small("c")
        };
        let e = quota_error(store.admit_box(&big_disk, admit));
        assert_eq!(
            (e.which, e.usage, e.requested),
            (QuotaLimit::MaxDiskMib, 2000, 1001)
        );
        store.admit_box(&small("c"), admit).unwrap();
        let e = quota_error(store.admit_box(&small("d"), admit));
        assert_eq!((e.which, e.limit, e.usage), (QuotaLimit::MaxBoxes, 3, 3));
        assert!(e.to_string().contains("max_boxes is 3"), "{e}");
        // `null` clears a limit.
        store
            .set_quota(
                &tenant.id,
                &QuotaChange {
                    max_boxes: Some(None),
                    ..QuotaChange::default()
                },
            )
            .unwrap();
        let e = quota_error(store.admit_box(&new_box(&tenant.id, "d"), admit));
        assert_eq!(e.which, QuotaLimit::MaxMemoryMib);
        let (quota, usage) = store.quota_usage(&tenant.id, &|_| 1000).unwrap();
        assert_eq!(quota.max_boxes, None);
        assert_eq!(quota.max_disk_mib, Some(3000));
        assert_eq!(
            (usage.boxes, usage.memory_mib, usage.disk_mib),
            (3, 768, 3000)
        );
    }

    fn concurrent_creates_cannot_both_take_the_last_box(db) {
        let store = Arc::new(db.open());
        let tenant = store.create_tenant("acme").unwrap();
        store
            .set_quota(
                &tenant.id,
                &QuotaChange {
                    max_boxes: Some(Some(5)),
                    ..QuotaChange::default()
                },
            )
            .unwrap();
        let threads: Vec<_> = (0..16)
            .map(|i| {
                let (store, tenant) = (store.clone(), tenant.id.clone());
                std::thread::spawn(move || store.insert_box(&new_box(&tenant, &format!("b{i}"))))
            })
            .collect();
        let results: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        let made = results.iter().filter(|r| r.is_ok()).count();
        assert_eq!(made, 5, "{results:?}");
        assert_eq!(store.list_boxes(&tenant.id).unwrap().len(), 5);
    }

    fn starts_are_refused_past_max_running(db) {
        let store = db.open();
        let tenant = store.create_tenant("acme").unwrap();
        store
            .set_quota(
                &tenant.id,
                &QuotaChange {
                    max_running: Some(Some(1)),
                    ..QuotaChange::default()
                },
            )
            .unwrap();
        let a = store.insert_box(&new_box(&tenant.id, "a")).unwrap();
        let b = store.insert_box(&new_box(&tenant.id, "b")).unwrap();
        let ga = store.begin_start(&a.id, a.generation).unwrap();
        let e = quota_error(store.begin_start(&b.id, b.generation));
        assert_eq!((e.which, e.limit, e.usage), (QuotaLimit::MaxRunning, 1, 1));
        assert_eq!(
            store.get_box(&b.id).unwrap().unwrap().state,
            BoxState::Stopped
        );
        let ga = store
            .update_box_state(&a.id, ga, BoxState::Running, None)
            .unwrap();
        store
            .update_box_state(&a.id, ga, BoxState::Stopped, None)
            .unwrap();
        store.begin_start(&b.id, b.generation).unwrap();
    }

    fn a_create_delete_loop_never_runs_out_of_id_slots(db) {
        let store = db.open();
        let tenant = store.create_tenant("acme").unwrap();
        // Three slots only: more creates than slots, each box deleted before the next.
        let admit = Admission {
            id_slots: 3,
            template_disk: &|_| 0,
        };
        let keep = store
            .admit_box(&new_box(&tenant.id, "keep"), admit)
            .unwrap();
        for i in 0..20 {
            let record = store
                .admit_box(&new_box(&tenant.id, &format!("b{i}")), admit)
                .unwrap();
            assert!(record.id_slot < 3 && record.id_slot != keep.id_slot);
            store
                .update_box_state(&record.id, record.generation, BoxState::Deleted, None)
                .unwrap();
        }
        store.admit_box(&new_box(&tenant.id, "x"), admit).unwrap();
        store.admit_box(&new_box(&tenant.id, "y"), admit).unwrap();
        match store.admit_box(&new_box(&tenant.id, "z"), admit) {
            Err(StoreError::NoIdSlot { limit: 3 }) => {}
            other => panic!("expected NoIdSlot, got {other:?}"),
        }
    }

    fn keys_are_listed_revoked_at_once_and_the_last_admin_key_stays(db) {
        let store: Store = db.open();
        let admin = store.ensure_admin_key().unwrap().unwrap();
        let tenant = store.create_tenant("acme").unwrap();
        let first = store.add_api_key(&tenant.id, false).unwrap();
        let second = store.add_api_key(&tenant.id, false).unwrap();
        assert!(first.key.starts_with(first.meta.prefix.as_deref().unwrap()));
        let listed = store.list_api_keys(&tenant.id).unwrap();
        assert_eq!(listed.len(), 2);
        assert!(listed.iter().all(|k| k.last_used_at.is_none()));
        store.authenticate(&first.key).unwrap().unwrap();
        let used = store.list_api_keys(&tenant.id).unwrap();
        let used = used.iter().find(|k| k.id == first.meta.id).unwrap();
        assert!(used.last_used_at.is_some());

        store.revoke_api_key(&tenant.id, &first.meta.id).unwrap();
        assert_eq!(store.authenticate(&first.key).unwrap(), None);
        assert!(store.authenticate(&second.key).unwrap().is_some());
        assert!(matches!(
            store.revoke_api_key(&tenant.id, &first.meta.id),
            Err(StoreError::KeyNotFound { .. })
        ));

        let principal = store.authenticate(&admin).unwrap().unwrap();
        let admin_id = store.list_api_keys(&principal.tenant_id).unwrap()[0]
            .id
            .clone();
        assert!(matches!(
            store.revoke_api_key(&principal.tenant_id, &admin_id),
            Err(StoreError::LastAdminKey { .. })
        ));
        // Rotation: a new admin key first, then the old one goes.
        let rotated = store.add_api_key(&principal.tenant_id, true).unwrap();
        store
            .revoke_api_key(&principal.tenant_id, &admin_id)
            .unwrap();
        assert_eq!(store.authenticate(&admin).unwrap(), None);
        assert!(store.authenticate(&rotated.key).unwrap().unwrap().is_admin);
    }
}
