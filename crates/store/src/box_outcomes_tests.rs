//! A box's failure record and last boot: kept, shown in the event log, and cleared by the
//! next state change.

use crate::tests::new_box;
use crate::{
    BootPhase, BoxState, LastBoot, PageLimit, PhaseSource, TransitionFailure, BOOT_EVENT,
    STATE_EVENT,
};

fn failure(step: &str) -> TransitionFailure {
    TransitionFailure {
        transition: "start".into(),
        step: step.into(),
        cause: "the runtime could not start the box: no kernel".into(),
        hint: "fix the cause, then start the box again".into(),
    }
}

const ALL: PageLimit = PageLimit {
    events: 100,
    bytes: 1 << 20,
};

conformance! {
    fn a_failed_state_change_keeps_its_failure_until_the_next_change(db) {
        let store = db.open();
        let tenant = store.create_tenant("acme").unwrap();
        let record = store.insert_box(&new_box(&tenant.id, "alice")).unwrap();
        assert_eq!(record.failure, None);
        let starting = store.begin_start(&record.id, record.generation).unwrap();
        let failed = store
            .fail_box_state(
                &record.id,
                starting,
                BoxState::Failed,
                &failure("runtime_start"),
            )
            .unwrap();
        let got = store.get_box(&record.id).unwrap().unwrap();
        assert_eq!(got.state, BoxState::Failed);
        assert_eq!(got.generation, failed);
        assert_eq!(got.failure, Some(failure("runtime_start")));
        assert_eq!(
            got.state_reason.as_deref(),
            Some(failure("x").cause.as_str())
        );
        // The state event carries it too.
        let page = store.read_events(&record.id, 0, ALL).unwrap();
        let last = page.events.last().unwrap();
        assert_eq!(last.kind, STATE_EVENT);
        assert_eq!(last.data["state"], "failed");
        assert_eq!(last.data["failure"]["step"], "runtime_start");
        assert_eq!(last.data["failure"]["hint"], failure("x").hint);
        // A stale generation changes nothing.
        assert!(store
            .fail_box_state(&record.id, starting, BoxState::Stopped, &failure("plan"))
            .is_err());
        // The next state change clears it.
        store.begin_start(&record.id, failed).unwrap();
        let got = store.get_box(&record.id).unwrap().unwrap();
        assert_eq!(got.failure, None);
        assert_eq!(got.state_reason, None);
    }

    fn a_failure_without_a_state_change_is_kept_as_it_is(db) {
        let store = db.open();
        let tenant = store.create_tenant("acme").unwrap();
        let record = store.insert_box(&new_box(&tenant.id, "alice")).unwrap();
        let mut paused = failure("runtime_pause");
        paused.transition = "pause".into();
        store.record_failure(&record.id, &paused).unwrap();
        let got = store.get_box(&record.id).unwrap().unwrap();
        assert_eq!(got.failure, Some(paused));
        assert_eq!(got.state, BoxState::Stopped);
        assert_eq!(got.generation, record.generation, "not a state change");
        let gone = berth_protocol::BoxId::from_random([9; 20]);
        assert!(store.record_failure(&gone, &failure("plan")).is_err());
    }

    fn a_boot_is_kept_on_the_box_and_logged_as_an_event(db) {
        let store = db.open();
        let tenant = store.create_tenant("acme").unwrap();
        let record = store.insert_box(&new_box(&tenant.id, "alice")).unwrap();
        let boot = LastBoot {
            began_at_ms: Some(1_700_000_000_123),
            total_micros: 41_500,
            restored: false,
            phases: vec![
                BootPhase {
                    name: "plan".into(),
                    micros: 120,
                    source: PhaseSource::Daemon,
                },
                BootPhase {
                    name: "runc_create".into(),
                    micros: 30_000,
                    source: PhaseSource::Runtime,
                },
            ],
        };
        store.record_boot(&record.id, "tok", &boot).unwrap();
        assert_eq!(
            store.boot_token(&record.id).unwrap().as_deref(),
            Some("tok")
        );
        let got = store.get_box(&record.id).unwrap().unwrap();
        assert_eq!(got.last_boot, Some(boot.clone()));
        assert_eq!(got.generation, record.generation, "not a state change");
        let page = store.read_events(&record.id, 0, ALL).unwrap();
        let last = page.events.last().unwrap();
        assert_eq!(last.kind, BOOT_EVENT);
        assert_eq!(last.data["total_micros"], 41_500);
        assert_eq!(last.data["began_at_ms"], 1_700_000_000_123_u64);
        assert_eq!(last.data["phases"][1]["name"], "runc_create");
        assert_eq!(last.data["phases"][1]["source"], "runtime");
        // A state change keeps the last boot: it says how the box last started.
        store.begin_start(&record.id, record.generation).unwrap();
        let got = store.get_box(&record.id).unwrap().unwrap();
        assert_eq!(got.last_boot, Some(boot));
    }
}

#[test]
fn a_boot_recorded_before_its_start_time_was_kept_reads_without_it() {
    let old = r#"{"total_micros":5,"restored":false,"phases":[]}"#;
    let boot: LastBoot = crate::box_outcomes::parse_column(Some(old.to_owned())).unwrap();
    assert_eq!((boot.began_at_ms, boot.total_micros), (None, 5));
}
