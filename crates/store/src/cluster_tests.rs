//! The cluster's records on both databases: leases with fencing terms, nodes and their
//! boots, and the op queue (one open op per box, claims never shared, a gone node's work
//! failed with the reason).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use crate::tests::new_box;
use crate::{NodeRegistration, NodeUsage, OpState, Store, StoreError};

pub(crate) const LONG: Duration = Duration::from_secs(3600);

pub(crate) fn registration(name: &str, boot: &str) -> NodeRegistration {
    NodeRegistration {
        name: name.into(),
        address: format!("{name}.internal:7443"),
        boot_id: boot.into(),
        cpus: 8.0,
        memory_mib: 16384,
        labels: BTreeMap::from([("zone".to_owned(), "a".to_owned())]),
    }
}

/// A node with a long lease and `boxes` boxes placed on it; their ids.
fn node_with_boxes(
    store: &Store,
    name: &str,
    boxes: usize,
) -> (String, Vec<berth_protocol::BoxId>) {
    let node = store
        .register_node(&registration(name, "boot-1"), LONG)
        .unwrap()
        .node;
    let tenant = store.create_tenant(&format!("t-{name}")).unwrap();
    let ids = (0..boxes)
        .map(|i| {
            let record = store
                .insert_box(&new_box(&tenant.id, &format!("b{i}")))
                .unwrap();
            store
                .db
                .write(|tx| {
                    tx.execute(
                        "UPDATE boxes SET node_id = ?1 WHERE id = ?2",
                        crate::args![node.id, record.id.as_str()],
                    )
                    .map_err(crate::error::sql("place a box"))
                })
                .unwrap();
            record.id
        })
        .collect();
    (node.id, ids)
}

conformance! {
    fn a_lease_has_one_holder_and_passes_on_at_a_higher_term(db) {
        let store = db.open();
        let a = store.acquire_lease("scheduler", "api-a", LONG).unwrap().unwrap();
        assert_eq!(a.term, 1);
        assert_eq!(store.acquire_lease("scheduler", "api-b", LONG).unwrap(), None);
        // The holder renews at its own term.
        let again = store.acquire_lease("scheduler", "api-a", LONG).unwrap().unwrap();
        assert_eq!(again.term, 1);
        assert!(store.renew_lease(&a.fence(), "api-a", LONG).unwrap());
        assert!(!store.renew_lease(&a.fence(), "api-b", LONG).unwrap(), "not b's to renew");

        // a's lease runs out (a zero-length renewal is an expiry now): b takes it at term 2.
        assert!(store.renew_lease(&a.fence(), "api-a", Duration::ZERO).unwrap());
        let b = store.acquire_lease("scheduler", "api-b", LONG).unwrap().unwrap();
        assert_eq!((b.holder.as_str(), b.term), ("api-b", 2));
        assert!(!store.renew_lease(&a.fence(), "api-a", LONG).unwrap(), "a lost it");
        assert!(matches!(
            store.check_fence(&a.fence()),
            Err(StoreError::LeaseLost { term: 1, .. })
        ));
        store.check_fence(&b.fence()).unwrap();

        // Released, it goes to the next taker at once, at the next term.
        store.release_lease(&b.fence(), "api-b").unwrap();
        let c = store.acquire_lease("scheduler", "api-c", LONG).unwrap().unwrap();
        assert_eq!(c.term, 3);
        let (stored, now) = store.lease("scheduler").unwrap();
        let stored = stored.unwrap();
        assert_eq!(stored.holder, "api-c");
        assert!(stored.expires_ms > now);
    }

    fn a_node_renews_only_with_its_current_boot(db) {
        let store = db.open();
        let first = store.register_node(&registration("n1", "boot-1"), LONG).unwrap();
        assert_eq!(first.failed_ops, 0);
        assert!(first.node.id.starts_with("node_"));
        assert!(first.node.live);
        store.renew_node_lease(&first.node.id, "boot-1", LONG, NodeUsage::default()).unwrap();
        assert!(matches!(
            store.renew_node_lease(&first.node.id, "boot-0", LONG, NodeUsage::default()),
            Err(StoreError::NodeBootMismatch { .. })
        ));
        assert!(matches!(
            store.renew_node_lease("node_nope", "boot-1", LONG, NodeUsage::default()),
            Err(StoreError::NodeNotFound { .. })
        ));

        // A restart keeps the node's id and names the new boot.
        let second = store.register_node(&registration("n1", "boot-2"), LONG).unwrap();
        assert_eq!(second.node.id, first.node.id);
        assert_eq!(second.node.boot_id, "boot-2");
        assert!(matches!(
            store.renew_node_lease(&first.node.id, "boot-1", LONG, NodeUsage::default()),
            Err(StoreError::NodeBootMismatch { .. })
        ));
        let listed = store.list_nodes().unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].labels["zone"], "a");
        assert_eq!(store.node("n1").unwrap().unwrap().id, first.node.id);
        assert_eq!(store.node(&first.node.id).unwrap().unwrap().name, "n1");
    }

    fn a_box_has_one_open_op_and_a_claim_is_never_shared(db) {
        let store = db.open();
        let (node, boxes) = node_with_boxes(&store, "n1", 3);
        let args = serde_json::json!({"why": "test"});
        let first = store.enqueue_op(&boxes[0], &node, "start", &args).unwrap();
        assert!(matches!(
            store.enqueue_op(&boxes[0], &node, "stop", &args),
            Err(StoreError::OpInProgress { .. })
        ));
        let second = store.enqueue_op(&boxes[1], &node, "start", &args).unwrap();
        let queue = store.op_queue().unwrap();
        assert_eq!((queue.queued, queue.claimed), (2, 0));
        assert!(queue.oldest_queued_ms.unwrap() >= 0);

        let claimed = store.claim_ops(&node, "boot-1", 1).unwrap();
        assert_eq!(claimed.iter().map(|o| o.id).collect::<Vec<_>>(), vec![first]);
        assert_eq!(claimed[0].state, OpState::Claimed);
        assert_eq!(claimed[0].args, args);
        let rest = store.claim_ops(&node, "boot-1", 10).unwrap();
        assert_eq!(rest.iter().map(|o| o.id).collect::<Vec<_>>(), vec![second]);
        assert!(store.claim_ops(&node, "boot-1", 10).unwrap().is_empty());

        // Still open while claimed; finished, the box takes its next op.
        assert!(matches!(
            store.enqueue_op(&boxes[0], &node, "stop", &args),
            Err(StoreError::OpInProgress { .. })
        ));
        assert!(matches!(
            store.finish_op(first, "boot-0", Ok(&serde_json::json!({}))),
            Err(StoreError::OpNotFound { .. })
        ), "another boot may not finish it");
        store.finish_op(first, "boot-1", Ok(&serde_json::json!({"state": "running"}))).unwrap();
        let done = store.op(first).unwrap().unwrap();
        assert_eq!(done.state, OpState::Done);
        assert_eq!(done.result.unwrap()["state"], "running");
        store.finish_op(second, "boot-1", Err("no such template")).unwrap();
        assert_eq!(store.op(second).unwrap().unwrap().error.as_deref(), Some("no such template"));
        store.enqueue_op(&boxes[0], &node, "stop", &args).unwrap();
    }

    fn a_restarted_nodes_unfinished_work_fails_with_the_reason(db) {
        let store = db.open();
        let (node, boxes) = node_with_boxes(&store, "n1", 2);
        let claimed = store.enqueue_op(&boxes[0], &node, "start", &serde_json::json!({})).unwrap();
        store.claim_ops(&node, "boot-1", 10).unwrap();
        let queued = store.enqueue_op(&boxes[1], &node, "start", &serde_json::json!({})).unwrap();
        let again = store.register_node(&registration("n1", "boot-2"), LONG).unwrap();
        assert_eq!(again.failed_ops, 1);
        let failed = store.op(claimed).unwrap().unwrap();
        assert_eq!(failed.state, OpState::Failed);
        assert!(failed.error.unwrap().contains("restarted"));
        // Work queued and not yet claimed is the new boot's.
        assert_eq!(store.op(queued).unwrap().unwrap().state, OpState::Queued);
        assert_eq!(store.claim_ops(&node, "boot-2", 10).unwrap()[0].id, queued);
    }

    fn a_gone_nodes_work_fails_and_no_more_is_queued_for_it(db) {
        let store = db.open();
        let (node, boxes) = node_with_boxes(&store, "n1", 2);
        let op = store.enqueue_op(&boxes[0], &node, "start", &serde_json::json!({})).unwrap();
        // The node stops renewing: a zero-length lease has run out at once.
        store.renew_node_lease(&node, "boot-1", Duration::ZERO, NodeUsage::default()).unwrap();
        assert!(!store.node(&node).unwrap().unwrap().live);
        assert_eq!(store.fail_ops_of_lapsed_nodes().unwrap(), 1);
        let failed = store.op(op).unwrap().unwrap();
        assert_eq!(failed.state, OpState::Failed);
        assert!(failed.error.unwrap().contains("is gone"), "the reason is told");
        assert!(matches!(
            store.enqueue_op(&boxes[1], &node, "start", &serde_json::json!({})),
            Err(StoreError::NodeGone { .. })
        ));
        assert_eq!(store.fail_ops_of_lapsed_nodes().unwrap(), 0, "failed once");
    }

    fn a_node_is_woken_when_work_is_queued_for_it(db) {
        let store = db.open();
        let (node, boxes) = node_with_boxes(&store, "n1", 1);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let mut bell = store.op_bell(&node);
        let within = |what: &'static str| {
            move |_| panic!("the bell did not ring {what} within 60 s")
        };
        let ring = |bell: &mut crate::OpBell, what: &'static str| {
            runtime
                .block_on(async {
                    tokio::time::timeout(Duration::from_secs(60), bell.rung()).await
                })
                .unwrap_or_else(within(what));
        };
        ring(&mut bell, "at once");
        assert!(store.claim_ops(&node, "boot-1", 10).unwrap().is_empty());
        let op = store.enqueue_op(&boxes[0], &node, "start", &serde_json::json!({})).unwrap();
        ring(&mut bell, "for the queued op");
        assert_eq!(store.claim_ops(&node, "boot-1", 10).unwrap()[0].id, op);
    }

    fn concurrent_claimers_each_get_distinct_ops(db) {
        const OPS: usize = 60;
        const CLAIMERS: usize = 4;
        let store = Arc::new(db.open());
        let (node, boxes) = node_with_boxes(&store, "n1", OPS);
        let queued: BTreeSet<u64> = boxes
            .iter()
            .map(|b| store.enqueue_op(b, &node, "start", &serde_json::json!({})).unwrap())
            .collect();
        let claims: Vec<Vec<u64>> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..CLAIMERS)
                .map(|_| {
                    let (store, node) = (store.clone(), node.clone());
                    scope.spawn(move || {
                        let mut mine = Vec::new();
                        loop {
                            let batch = store.claim_ops(&node, "boot-1", 3).unwrap();
                            if batch.is_empty() {
                                return mine;
                            }
                            mine.extend(batch.iter().map(|o| o.id));
                        }
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let all: Vec<u64> = claims.iter().flatten().copied().collect();
        let distinct: BTreeSet<u64> = all.iter().copied().collect();
        assert_eq!(all.len(), OPS, "every op claimed once: {claims:?}");
        assert_eq!(distinct, queued);
    }
}
