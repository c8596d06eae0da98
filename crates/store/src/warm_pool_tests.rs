//! Warm pools, on both databases: the reserved tenant is nobody's, and a claim moves
//! a running pool box to a tenant under that tenant's quota.

use std::collections::BTreeMap;

use crate::ingress_tests::insert_box;
use crate::{
    warm_pool_tenant, Admission, BoxState, Claim, QuotaChange, QuotaLimit, StoreError,
    WARM_POOL_TENANT,
};

conformance! {
    fn the_pool_tenant_cannot_be_named_and_a_claim_respects_quota_and_names(db) {
        let store = db.open();
        let acme = store.create_tenant("acme").unwrap();
        assert_eq!(store.find_tenant(WARM_POOL_TENANT).unwrap(), None);
        assert_eq!(store.find_tenant("(warm pool)").unwrap(), None);
        let listed = store.list_tenants(&|_| 0).unwrap();
        assert_eq!(listed.len(), 1, "{listed:?}");

        let pooled = insert_box(&store, warm_pool_tenant(), "warm-1");
        let running = |id| {
            let r = store.get_box(id).unwrap().unwrap();
            let g = store.begin_start(id, r.generation).unwrap();
            store
                .update_box_state(id, g, BoxState::Running, None)
                .unwrap()
        };
        let generation = running(&pooled.id);
        assert_eq!(store.list_boxes(&acme.id).unwrap(), []);
        assert_eq!(store.quota_usage(&acme.id, &|_| 0).unwrap().1.boxes, 0);

        let labels = BTreeMap::from([("team".to_owned(), "a".to_owned())]);
        let claim = |name| Claim {
            tenant: &acme.id,
            name,
            labels: &labels,
            sleep: crate::SleepSettings {
                pause_after_s: 10,
                snapshot_after_s: 0,
                stop_after_s: 30,
                auto_resume: true,
            },
            boot_token: "ab",
        };
        insert_box(&store, acme.id.clone(), "taken");
        let refused = store.claim_warm_box(
            &pooled.id,
            generation,
            &claim("taken"),
            Admission::UNCHECKED,
        );
        assert!(
            matches!(refused, Err(StoreError::NameTaken { .. })),
            "{refused:?}"
        );
        store
            .set_quota(
                &acme.id,
                &QuotaChange {
                    max_running: Some(Some(0)),
                    ..Default::default()
                },
            )
            .unwrap();
        let refused = store.claim_warm_box(&pooled.id, generation, &claim("a"), Admission::UNCHECKED);
        assert!(
            matches!(&refused, Err(StoreError::QuotaExceeded(e)) if e.which == QuotaLimit::MaxRunning),
            "{refused:?}"
        );
        store
            .set_quota(
                &acme.id,
                &QuotaChange {
                    max_running: Some(None),
                    ..Default::default()
                },
            )
            .unwrap();
        let claimed = store
            .claim_warm_box(&pooled.id, generation, &claim("a"), Admission::UNCHECKED)
            .unwrap();
        assert_eq!(
            (
                &claimed.tenant_id,
                claimed.name.as_str(),
                &claimed.labels,
                claimed.stop_after_s,
                claimed.pause_after_s,
                claimed.state
            ),
            (&acme.id, "a", &labels, 30, 10, BoxState::Running)
        );
        assert_eq!(store.boot_token(&pooled.id).unwrap().as_deref(), Some("ab"));
        assert_eq!(store.list_boxes(&warm_pool_tenant()).unwrap(), []);
        assert_eq!(store.list_boxes(&acme.id).unwrap().len(), 2);
        // Claimed once: a second claim of the same row finds no pool box.
        let again = store.claim_warm_box(
            &pooled.id,
            claimed.generation,
            &claim("b"),
            Admission::UNCHECKED,
        );
        assert!(
            matches!(again, Err(StoreError::BoxNotFound { .. })),
            "{again:?}"
        );
    }
}
