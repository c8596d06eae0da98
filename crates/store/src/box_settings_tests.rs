//! Changes to a box's record, on both databases.

use std::collections::BTreeMap;

use crate::tests::new_box;
use crate::{
    BoxChange, BoxLimits, BoxRecord, BoxState, NewBox, QuotaChange, QuotaLimit, Store, StoreError,
};

const NO_TEMPLATE_DISK: &dyn Fn(&str) -> u64 = &|_| 1000;

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Moves a new box to `running`, as a start does.
fn run(store: &Store, record: &BoxRecord) {
    let generation = store
        .update_box_state(&record.id, record.generation, BoxState::Starting, None)
        .unwrap();
    store
        .update_box_state(&record.id, generation, BoxState::Running, None)
        .unwrap();
}

conformance! {
    fn labels_and_env_are_kept_from_creation_and_replaced_whole(db) {
        let id = {
            let store = db.open();
            let tenant = store.create_tenant("acme").unwrap();
            let record = store
                .insert_box(&NewBox {
                    labels: map(&[("team", "red"), ("tier", "1")]),
                    env: map(&[("GREETING", "hello world")]),
                    ..new_box(&tenant.id, "a")
                })
                .unwrap();
            let changed = store
                .update_box(
                    &record.id,
                    &BoxChange {
                        labels: Some(map(&[("team", "blue")])),
                        sleep: Some(crate::SleepSettings {
                            pause_after_s: 5,
                            snapshot_after_s: 0,
                            stop_after_s: 42,
                            auto_resume: false,
                        }),
                        ..BoxChange::default()
                    },
                    NO_TEMPLATE_DISK,
                )
                .unwrap();
            assert_eq!(changed.labels, map(&[("team", "blue")]));
            assert_eq!(changed.env, map(&[("GREETING", "hello world")]));
            assert_eq!(changed.stop_after_s, 42);
            assert_eq!((changed.pause_after_s, changed.auto_resume), (5, false));
            // Settings are not lifecycle state: the generation stays.
            assert_eq!(changed.generation, record.generation);
            record.id
        };
        // Durable across a reopen.
        let store = db.open();
        let record = store.get_box(&id).unwrap().unwrap();
        assert_eq!(record.labels, map(&[("team", "blue")]));
        assert_eq!(record.env, map(&[("GREETING", "hello world")]));
        assert_eq!(record.stop_after_s, 42);
    }

    fn limits_of_a_stopped_box_change_at_once_and_of_a_running_one_at_its_next_start(db) {
        let store = db.open();
        let tenant = store.create_tenant("acme").unwrap();
        let record = store.insert_box(&new_box(&tenant.id, "a")).unwrap();
        let small = BoxLimits {
            memory_mib: 256,
            pids: 64,
            cpus: 0.5,
        };
        let change = |limits| BoxChange {
            limits: Some(limits),
            ..BoxChange::default()
        };
        let stopped = store
            .update_box(&record.id, &change(small), NO_TEMPLATE_DISK)
            .unwrap();
        assert_eq!((stopped.limits(), stopped.pending_limits), (small, None));

        run(&store, &record);
        let big = BoxLimits {
            memory_mib: 2048,
            pids: 512,
            cpus: 2.0,
        };
        let running = store
            .update_box(&record.id, &change(big), NO_TEMPLATE_DISK)
            .unwrap();
        assert_eq!(running.limits(), small, "the running boot keeps its limits");
        assert_eq!(running.pending_limits, Some(big));
        assert_eq!(running.next_limits(), big);
        // Asking for the running boot's limits again: nothing is pending.
        let back = store
            .update_box(&record.id, &change(small), NO_TEMPLATE_DISK)
            .unwrap();
        assert_eq!((back.limits(), back.pending_limits), (small, None));
        store
            .update_box(&record.id, &change(big), NO_TEMPLATE_DISK)
            .unwrap();

        let started = store.apply_pending_limits(&record.id).unwrap();
        assert_eq!((started.limits(), started.pending_limits), (big, None));
        // Nothing pending: applying again changes nothing.
        assert_eq!(store.apply_pending_limits(&record.id).unwrap(), started);
    }

    fn raising_memory_or_disk_past_the_quota_is_refused_and_changes_nothing(db) {
        let store = db.open();
        let tenant = store.create_tenant("acme").unwrap();
        store
            .set_quota(
                &tenant.id,
                &QuotaChange {
                    max_memory_mib: Some(Some(1000)),
                    max_disk_mib: Some(Some(3000)),
                    ..QuotaChange::default()
                },
            )
            .unwrap();
        let record = store.insert_box(&new_box(&tenant.id, "a")).unwrap();
        run(&store, &record);
        let limits = |memory_mib| BoxLimits {
            memory_mib,
            ..record.limits()
        };
        let err = store
            .update_box(
                &record.id,
                &BoxChange {
                    limits: Some(limits(1001)),
                    labels: Some(map(&[("x", "y")])),
                    ..BoxChange::default()
                },
                NO_TEMPLATE_DISK,
            )
            .unwrap_err();
        match err {
            StoreError::QuotaExceeded(e) => assert_eq!(
                (e.which, e.usage, e.requested),
                (QuotaLimit::MaxMemoryMib, 512, 489)
            ),
            other => panic!("expected quota_exceeded, got {other:?}"),
        }
        let unchanged = store.get_box(&record.id).unwrap().unwrap();
        assert_eq!(
            (unchanged.pending_limits, unchanged.labels.len()),
            (None, 0)
        );

        // A pending raise counts against the quota at once.
        store
            .update_box(
                &record.id,
                &BoxChange {
                    limits: Some(limits(900)),
                    ..BoxChange::default()
                },
                NO_TEMPLATE_DISK,
            )
            .unwrap();
        let (_, usage) = store.quota_usage(&tenant.id, NO_TEMPLATE_DISK).unwrap();
        assert_eq!(usage.memory_mib, 900);

        // The disk: 1000 (the template's) to 3000 fits, 3001 does not.
        let disk = |disk_mib| BoxChange {
            disk_mib: Some(disk_mib),
            ..BoxChange::default()
        };
        let err = store
            .update_box(&record.id, &disk(3001), NO_TEMPLATE_DISK)
            .unwrap_err();
        assert!(matches!(err, StoreError::QuotaExceeded(e) if e.which == QuotaLimit::MaxDiskMib));
        let grown = store
            .update_box(&record.id, &disk(3000), NO_TEMPLATE_DISK)
            .unwrap();
        assert_eq!(grown.disk_mib, Some(3000));
    }

    fn changing_a_missing_box_is_box_not_found(db) {
        let store = db.open();
        let tenant = store.create_tenant("acme").unwrap();
        let record = store.insert_box(&new_box(&tenant.id, "a")).unwrap();
        assert!(store.delete_box(&record.id).unwrap());
        let err = store
            .update_box(&record.id, &BoxChange::default(), NO_TEMPLATE_DISK)
            .unwrap_err();
        assert!(matches!(err, StoreError::BoxNotFound { .. }), "{err:?}");
    }
}
