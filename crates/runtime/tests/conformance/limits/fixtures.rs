//! What the limit checks share: whether the box answers, where its cgroup files are as
//! it sees them, a message delivered and its echo seen.

use std::time::Duration;

use berth_protocol::guest::BoxUser;
use berth_protocol::harness::DeliverRequest;
use berth_runtime::GuestClient;

use crate::common::{run, run_ok};

/// Whether `client` answers `echo ok` within `limit`.
pub async fn answers_within(client: &GuestClient, limit: Duration) -> bool {
    tokio::time::timeout(limit, run(client, &["echo", "ok"], BoxUser::User, None))
        .await
        .is_ok_and(|(code, out, _)| code == 0 && out.trim() == "ok")
}

/// The directory holding the box's `pids.max`, as the box sees it: a VM's box cgroup, the
/// sandbox's own cgroup on a v1 host (the pids hierarchy) or a v2 host (the namespace's
/// root).
pub async fn pids_cgroup_dir(client: &GuestClient) -> String {
    let find = "for d in /sys/fs/cgroup/box /sys/fs/cgroup/pids/box /sys/fs/cgroup/pids \
                /sys/fs/cgroup; do \
                if [ -e $d/pids.max ]; then echo $d; exit 0; fi; done; exit 1";
    let dir = run_ok(client, &["sh", "-c", find], BoxUser::User).await;
    dir.trim().to_owned()
}

/// The box's own `box` cgroup in the hierarchy holding `file`, as the box sees it, or its
/// parent when there is none.
pub async fn box_cgroup_file(client: &GuestClient, file: &str) -> String {
    let find = format!(
        "for d in /sys/fs/cgroup/box /sys/fs/cgroup/pids/box /sys/fs/cgroup/memory/box \
         /sys/fs/cgroup/pids /sys/fs/cgroup/memory /sys/fs/cgroup; do \
         if [ -e $d/{file} ]; then echo $d/{file}; exit 0; fi; done; exit 1"
    );
    run_ok(client, &["sh", "-c", &find], BoxUser::Root)
        .await
        .trim()
        .to_owned()
}

/// Delivers one message to a `cat` harness and waits for its echo among the events.
pub async fn deliver_and_see_echoed(client: &GuestClient, id: &str) {
    let content = format!("text of {id}");
    let answer = tokio::time::timeout(
        Duration::from_secs(60),
        client.deliver(&DeliverRequest {
            id: id.to_owned(),
            content: content.clone(),
        }),
    )
    .await
    .unwrap_or_else(|_| panic!("{id} was not delivered within 60 s"))
    .unwrap_or_else(|e| panic!("deliver {id}: {e}"));
    assert!(!answer.duplicate, "{id} was taken for a duplicate");
    let mut events = client.events(0).await.expect("events");
    let seen = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(event) = events.next_frame().await.expect("event stream") {
            if event.data.to_string().contains(&content) {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(seen, Ok(true), "the echo of {id} was not journalled");
}
