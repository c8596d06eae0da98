//! A box's durable copies: recorded only forward, read back with the box, and a restore
//! kept as an event.

use crate::tests::new_box;
use crate::{DurableCopy, PageLimit, VolumeRestored, VOLUME_RESTORED_EVENT};

fn copy(generation: u64) -> DurableCopy {
    DurableCopy {
        generation,
        taken_at: "2026-12-04T10:00:00Z".into(),
        image_bytes: 1 << 30,
        stored_bytes: 4 << 20,
    }
}

conformance! {
    fn a_durable_copy_is_recorded_only_forward(db) {
        let store = db.open();
        let tenant = store.create_tenant("acme").unwrap();
        let record = store.insert_box(&new_box(&tenant.id, "alice")).unwrap();
        assert_eq!(record.durable, None);
        assert_eq!(record.volume_epoch, 0);
        assert!(store.record_durable_copy(&record.id, 0, &copy(2)).unwrap());
        // An upload that finishes late cannot put its older copy back, nor write one twice.
        assert!(!store.record_durable_copy(&record.id, 0, &copy(1)).unwrap());
        assert!(!store.record_durable_copy(&record.id, 0, &copy(2)).unwrap());
        let got = store.get_box(&record.id).unwrap().unwrap();
        assert_eq!(got.durable, Some(copy(2)));
        assert!(store.record_durable_copy(&record.id, 0, &copy(3)).unwrap());
        // A copy of an older epoch's image is never recorded.
        assert!(!store.record_durable_copy(&record.id, 1, &copy(9)).unwrap());
        let listed = store.list_boxes(&tenant.id).unwrap();
        assert_eq!(listed[0].durable, Some(copy(3)));
    }

    fn a_restore_is_an_event_saying_what_it_lost(db) {
        let store = db.open();
        let tenant = store.create_tenant("acme").unwrap();
        let record = store.insert_box(&new_box(&tenant.id, "alice")).unwrap();
        let restored = VolumeRestored {
            generation: 3,
            taken_at: "2026-12-04T10:00:00Z".into(),
            reason: "copy".into(),
            lost_s: 42,
        };
        let seq = store.record_volume_restored(&record.id, &restored).unwrap();
        let limit = PageLimit { events: 100, bytes: 1 << 20 };
        let page = store.read_events(&record.id, seq - 1, limit).unwrap();
        assert_eq!(page.events[0].kind, VOLUME_RESTORED_EVENT);
        assert_eq!(page.events[0].data["lost_s"], 42);
        assert_eq!(page.events[0].data["reason"], "copy");
    }
}
