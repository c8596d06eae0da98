//! Placement on both databases: boxes spread over equal nodes, filters by runtime and
//! labels, nothing left of a refused placement, and concurrent placers never crowd a node.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::cluster_tests::{registration, LONG};
use crate::tests::new_box;
use crate::{Admission, NodeUsage, Placement, Store, StoreError, CREATE_OP};

/// A node that offers the sandbox runtime, with `labels` besides.
pub(crate) fn sandbox_node(store: &Store, name: &str, labels: &[(&str, &str)]) -> String {
    let mut registration = registration(name, "boot-1");
    registration
        .labels
        .insert(crate::runtime_label("sandbox"), "ready".into());
    for (key, value) in labels {
        registration.labels.insert((*key).into(), (*value).into());
    }
    store.register_node(&registration, LONG).unwrap().node.id
}

pub(crate) fn placement<'a>(labels: &'a BTreeMap<String, String>) -> Placement<'a> {
    Placement {
        runtime: "sandbox",
        node_labels: labels,
        sample: 3,
    }
}

conformance! {
    fn placement_spreads_boxes_and_queues_each_ones_create_in_the_same_transaction(db) {
        let store = db.open();
        let nodes: Vec<String> = ["n1", "n2", "n3"].iter().map(|n| sandbox_node(&store, n, &[])).collect();
        // A node without the runtime never gets a box.
        store.register_node(&registration("no-sandbox", "boot-1"), LONG).unwrap();
        let tenant = store.create_tenant("placed").unwrap();
        let none = BTreeMap::new();
        let mut per_node: BTreeMap<String, usize> = BTreeMap::new();
        for i in 0..30 {
            let placed = store
                .place_box(&new_box(&tenant.id, &format!("b{i}")), Admission::UNCHECKED, &placement(&none))
                .unwrap();
            let node = placed.record.node_id.clone().unwrap();
            let op = store.op(placed.op_id).unwrap().unwrap();
            assert_eq!((op.kind.as_str(), &op.node_id, &op.box_id), (CREATE_OP, &node, &placed.record.id));
            assert_eq!(store.get_box(&placed.record.id).unwrap().unwrap().node_id, Some(node.clone()));
            *per_node.entry(node).or_default() += 1;
        }
        assert_eq!(per_node.keys().cloned().collect::<Vec<_>>(), {
            let mut sorted = nodes.clone();
            sorted.sort();
            sorted
        });
        // Every box has an open create op: equal nodes take turns.
        assert!(per_node.values().all(|&n| n == 10), "{per_node:?}");
    }

    fn placement_honours_node_labels_and_says_when_nothing_fits(db) {
        let store = db.open();
        let gpu = sandbox_node(&store, "gpu", &[("gpu", "yes")]);
        sandbox_node(&store, "plain", &[]);
        let tenant = store.create_tenant("labelled").unwrap();
        let wants_gpu = BTreeMap::from([("gpu".to_owned(), "yes".to_owned())]);
        for i in 0..4 {
            let placed = store
                .place_box(&new_box(&tenant.id, &format!("g{i}")), Admission::UNCHECKED, &placement(&wants_gpu))
                .unwrap();
            assert_eq!(placed.record.node_id.as_deref(), Some(gpu.as_str()));
        }
        let wants_tpu = BTreeMap::from([("tpu".to_owned(), "yes".to_owned())]);
        let refused = store.place_box(&new_box(&tenant.id, "t"), Admission::UNCHECKED, &placement(&wants_tpu));
        assert!(matches!(refused, Err(StoreError::NoNode { .. })), "{refused:?}");
        // Nothing of a refused placement is left behind.
        assert!(store.get_box_by_name(&tenant.id, "t").unwrap().is_none());
        // A node whose lease ran out takes nothing.
        store.renew_node_lease(&gpu, "boot-1", Duration::ZERO, NodeUsage::default()).unwrap();
        let refused = store.place_box(&new_box(&tenant.id, "late"), Admission::UNCHECKED, &placement(&wants_gpu));
        assert!(matches!(refused, Err(StoreError::NoNode { .. })), "{refused:?}");
    }

    fn sleeping_boxes_spread_although_one_node_reports_less_use(db) {
        let store = db.open();
        let nodes: Vec<String> = ["n1", "n2", "n3"].iter().map(|n| sandbox_node(&store, n, &[])).collect();
        // n1 last said it used 1 CPU of 8, the others 3 (nodes of one host sampling its load
        // at different moments say such things).
        for (node, cpus) in nodes.iter().zip([1.0, 3.0, 3.0]) {
            store.renew_node_lease(node, "boot-1", LONG, NodeUsage { cpus, memory_mib: 0 }).unwrap();
        }
        let tenant = store.create_tenant("sleepers").unwrap();
        let none = BTreeMap::new();
        let mut per_node: BTreeMap<String, usize> = BTreeMap::new();
        for i in 0..30 {
            let placed = store
                .place_box(&new_box(&tenant.id, &format!("s{i}")), Admission::UNCHECKED, &placement(&none))
                .unwrap();
            let node = placed.record.node_id.clone().unwrap();
            // The node makes the box, which then sleeps: no op holds its limits any more.
            store.claim_ops(&node, "boot-1", 16).unwrap();
            store.finish_op(placed.op_id, "boot-1", Ok(&serde_json::json!({}))).unwrap();
            *per_node.entry(node).or_default() += 1;
        }
        // Each sleeping box counts half its 1.5 CPUs: the less used node takes about 2 more
        // boxes per CPU it has spare, not all of them.
        let counts: Vec<usize> = nodes.iter().map(|n| per_node.get(n).copied().unwrap_or(0)).collect();
        assert!(counts.iter().all(|&n| (7..=14).contains(&n)), "{counts:?}");
        assert!(counts[0] > counts[1] && counts[0] > counts[2], "{counts:?}");
    }

    fn concurrent_placements_never_crowd_one_node(db) {
        let store = Arc::new(db.open());
        for name in ["n1", "n2", "n3"] {
            sandbox_node(&store, name, &[]);
        }
        let tenant = store.create_tenant("crowd").unwrap();
        let nodes: Vec<String> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..5)
                .map(|t| {
                    let (store, tenant) = (store.clone(), tenant.id.clone());
                    scope.spawn(move || {
                        let none = BTreeMap::new();
                        (0..6)
                            .map(|i| {
                                store
                                    .place_box(&new_box(&tenant, &format!("c{t}-{i}")), Admission::UNCHECKED, &placement(&none))
                                    .unwrap()
                                    .record
                                    .node_id
                                    .unwrap()
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles.into_iter().flat_map(|h| h.join().unwrap()).collect()
        });
        let mut per_node: BTreeMap<&str, usize> = BTreeMap::new();
        for node in &nodes {
            *per_node.entry(node).or_default() += 1;
        }
        assert_eq!(nodes.len(), 30);
        assert!(per_node.values().all(|&n| n <= 14), "{per_node:?}");
    }
}
