//! Sandbox: `wait_exit` waits on a pidfd of the container's init (no `runc state` polling)
//! and tells a stop and a box that shut itself down (clean) from an init killed from the
//! host (a crash naming the signal). (qemu's own test is in tests/qemu.rs.)

use std::time::{Duration, Instant};

use berth_runtime::{BoxExit, Limits, RuntimeError, RuntimeStatus};

use crate::common::{self, Fixture};
use crate::GRACE;

/// Far below the default `wait_exit`'s poll interval ([`berth_runtime::EXIT_POLL`]): the
/// pidfd wakes the waiter as the init exits.
const PROMPT: Duration = Duration::from_secs(1);

pub async fn wait_exit_tells_a_stop_a_shutdown_and_a_kill_apart(fx: &Fixture) {
    let sandbox = fx.sandbox().expect("a sandbox check");
    let spec = fx.spec(Limits::default());
    // Never started: nothing runs, so it has ended, cleanly.
    assert_eq!(
        fx.runtime.wait_exit(&spec.id).await.unwrap(),
        BoxExit::Clean
    );

    fx.runtime.start(&spec).await.expect("start");
    let waiter = wait_exit_task(fx, &spec.id);
    fx.runtime.stop(&spec.id, GRACE).await.expect("stop");
    assert_eq!(ended(waiter).await, BoxExit::Clean, "a stop");

    // berth-init ends itself, asked through its API (nobody on the host stopped it).
    let spec = common::next_boot(&spec);
    let client = fx.runtime.start(&spec).await.expect("start again").client;
    let waiter = wait_exit_task(fx, &spec.id);
    client.shutdown().await.expect("shutdown");
    assert_eq!(
        ended(waiter).await,
        BoxExit::Clean,
        "a shutdown from inside"
    );
    common::wait_until(|| async {
        fx.runtime.status(&spec.id).await.unwrap() == RuntimeStatus::Stopped
    })
    .await;

    // Killed from the host.
    let spec = common::next_boot(&spec);
    fx.runtime.start(&spec).await.expect("start a third time");
    let waiter = wait_exit_task(fx, &spec.id);
    let pid = sandbox.init_pid(&spec.id).await.unwrap().expect("a pid");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let t0 = Instant::now();
    let exit = ended(waiter).await;
    let noticed = t0.elapsed();
    eprintln!("noticed the kill after {noticed:?}: {exit:?}");
    assert_eq!(
        exit,
        BoxExit::Crashed("berth-init was killed by signal 9 (SIGKILL)".into())
    );
    assert!(
        noticed < PROMPT,
        "the kill was noticed only after {noticed:?}"
    );
    // Asked again (a late caller), it says the same.
    assert_eq!(fx.runtime.wait_exit(&spec.id).await.unwrap(), exit);
    assert_eq!(
        fx.runtime.status(&spec.id).await.unwrap(),
        RuntimeStatus::Stopped
    );
    assert_eq!(fx.traces_left(&spec.id), Vec::<String>::new());
    // The next boot starts afresh: a stop of it is clean again.
    let spec = common::next_boot(&spec);
    fx.runtime.start(&spec).await.expect("start after a kill");
    let waiter = wait_exit_task(fx, &spec.id);
    fx.runtime.stop(&spec.id, GRACE).await.expect("stop");
    assert_eq!(ended(waiter).await, BoxExit::Clean, "a stop after a crash");
}

fn wait_exit_task(
    fx: &Fixture,
    id: &berth_protocol::BoxId,
) -> tokio::task::JoinHandle<Result<BoxExit, RuntimeError>> {
    let (rt, id) = (fx.runtime.clone(), id.clone());
    tokio::spawn(async move { rt.wait_exit(&id).await })
}

async fn ended(waiter: tokio::task::JoinHandle<Result<BoxExit, RuntimeError>>) -> BoxExit {
    tokio::time::timeout(Duration::from_secs(15), waiter)
        .await
        .expect("wait_exit did not see the end")
        .unwrap()
        .expect("wait_exit")
}
