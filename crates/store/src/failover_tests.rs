//! Failover on both databases: a lost node is found only after its grace, a moved box is
//! stopped on its new node with a higher volume epoch and its run ended, a move under a lost
//! jobs lease writes nothing, and a box never has two runs open.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::cluster_tests::LONG;
use crate::placement_tests::{placement, sandbox_node};
use crate::tests::new_box;
use crate::{Admission, BoxState, PageLimit, StoreError};

/// Box `web` of a new tenant, placed on a node that offers the sandbox.
fn place_web(store: &crate::Store) -> crate::Placed {
    let tenant = store.create_tenant("acme").unwrap();
    store
        .place_box(
            &new_box(&tenant.id, "web"),
            Admission::UNCHECKED,
            &placement(&BTreeMap::new()),
        )
        .unwrap()
}

conformance! {
    fn a_lost_nodes_box_moves_stopped_with_a_new_epoch_and_its_run_ended(db) {
        let store = db.open();
        let none = BTreeMap::new();
        let a = sandbox_node(&store, "a", &[]);
        let placed = place_web(&store);
        let id = placed.record.id.clone();
        assert_eq!(placed.record.node_id.as_deref(), Some(a.as_str()));
        let started = store.begin_start(&id, placed.record.generation).unwrap();
        store.update_box_state(&id, started, BoxState::Running, None).unwrap();

        // Alive: not lost, whatever the grace.
        assert!(store.lost_nodes(Duration::ZERO).unwrap().is_empty());
        // Its lease runs out: lost once the grace has passed.
        store.register_node(&crate::cluster_tests::registration("a", "boot-1"), Duration::ZERO).unwrap();
        assert!(store.lost_nodes(LONG).unwrap().is_empty(), "lost before its grace");
        let lost = store.lost_nodes(Duration::ZERO).unwrap();
        assert_eq!(lost.len(), 1);
        assert_eq!(lost[0].id, a);

        let b = sandbox_node(&store, "b", &[]);
        let record = store.get_box(&id).unwrap().unwrap();
        let to = store.choose_node(&record, &placement(&none), &a).unwrap();
        assert_eq!(to.as_deref(), Some(b.as_str()));
        assert!(store.move_box(&id, &a, &b, "its node a was lost", None).unwrap());
        let moved = store.get_box(&id).unwrap().unwrap();
        assert_eq!(moved.node_id.as_deref(), Some(b.as_str()));
        assert_eq!(moved.state, BoxState::Stopped);
        assert_eq!(moved.volume_epoch, record.volume_epoch + 1);
        assert_eq!(moved.state_reason.as_deref(), Some("its node a was lost"));
        // Not on a any more: a second move from there changes nothing.
        assert!(!store.move_box(&id, &a, &b, "again", None).unwrap());
        // The move is in the box's log, and it starts again on b (its run on a ended).
        let page = store.read_events(&id, 0, PageLimit { events: 100, bytes: 1 << 20 }).unwrap();
        assert_eq!(page.events.last().unwrap().data["reason"], "its node a was lost");
        store.begin_start(&id, moved.generation).unwrap();
    }

    fn a_box_never_has_two_runs_open(db) {
        let store = db.open();
        let a = sandbox_node(&store, "a", &[]);
        let b = sandbox_node(&store, "b", &[]);
        let placed = place_web(&store);
        let id = placed.record.id.clone();
        let on = placed.record.node_id.clone().unwrap();
        let other = if on == a { &b } else { &a };
        let started = store.begin_start(&id, placed.record.generation).unwrap();
        let running = store.update_box_state(&id, started, BoxState::Running, None).unwrap();
        // Its row moved by hand (not by a failover, which ends the run): the open run on
        // the first node refuses a start on the second.
        store.db.write(|tx| {
            tx.execute(
                "UPDATE boxes SET node_id = ?1, state = 'stopped' WHERE id = ?2",
                crate::args![other.as_str(), id.as_str()],
            )
            .map_err(crate::error::sql("move by hand"))
        }).unwrap();
        let refused = store.begin_start(&id, running).unwrap_err();
        assert!(matches!(refused, StoreError::RunsElsewhere { ref node, .. } if *node == on), "{refused}");
        // And the index refuses a second open run outright.
        let twice = store.db.write(|tx| {
            tx.execute(
                "INSERT INTO box_runs (box_id, node_id, epoch, started_at) VALUES (?1, ?2, 0, 'x')",
                crate::args![id.as_str(), other.as_str()],
            )
            .map_err(crate::error::sql("a second run"))
        });
        assert!(twice.is_err(), "two open runs of one box were stored");
    }

    fn a_move_under_a_lost_jobs_lease_writes_nothing(db) {
        let store = db.open();
        let a = sandbox_node(&store, "a", &[]);
        let b = sandbox_node(&store, "b", &[]);
        let placed = place_web(&store);
        let id = placed.record.id.clone();
        let from = placed.record.node_id.clone().unwrap();
        let to = if from == a { &b } else { &a };
        let old = store.acquire_lease("jobs", "api-a", Duration::ZERO).unwrap().unwrap();
        store.acquire_lease("jobs", "api-b", LONG).unwrap().unwrap();
        let refused = store.move_box(&id, &from, to, "lost", Some(&old.fence())).unwrap_err();
        assert!(matches!(refused, StoreError::LeaseLost { .. }), "{refused}");
        assert_eq!(store.get_box(&id).unwrap().unwrap().node_id.as_deref(), Some(from.as_str()));
    }
}
