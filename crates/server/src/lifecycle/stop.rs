//! `POST /v1/boxes/{ref}/stop`, the reclaimer's last rung, and the daemon's shutdown: the
//! processes die (or the snapshot is deleted), the volume stays.

use std::time::Duration;

use berth_protocol::BoxId;
use berth_store::{BoxRecord, BoxState};

use crate::ctx::{Ctx, STOP_GRACE};
use crate::error::OpError;
use crate::lifecycle::detached::detached;
use crate::lifecycle::transition::{runtime_error, Kind, Step, Transition};

/// Stops the box held by `t` (`sleep::descend` for `POST …/stop`; the idle reclaimer
/// re-checks idleness under the lock, then stops).
pub(super) async fn stop_held(t: &mut Transition<'_>) -> Result<(), OpError> {
    stop_held_as(t, None).await
}

/// Stops the box held by `t` and leaves it `stopped`, or `failed` with `failure` as the
/// reason.
async fn stop_held_as(t: &mut Transition<'_>, failure: Option<&str>) -> Result<(), OpError> {
    let record = t.record().clone();
    let id = &record.id;
    match record.state {
        BoxState::Stopped | BoxState::Deleted => return Ok(()),
        // Before any state change: a box whose runtime is gone stays as it is.
        _ if t.runtime().is_err() => return t.runtime().map(drop),
        BoxState::Running | BoxState::Paused => t.write(BoxState::Stopping, None)?,
        // Nothing to announce: go straight to `stopped` once the runtime is done.
        BoxState::Failed | BoxState::Starting | BoxState::Stopping | BoxState::Snapshotted => {}
    }
    t.live.end_boot();
    t.ctx().egress.end(id);
    let runtime = t.runtime()?;
    let grace = stop_grace(t.ctx(), &record);
    // A stopped box starts cold: it keeps no snapshot.
    let stopped = async {
        runtime.stop(id, grace).await?;
        runtime.discard_snapshot(id).await
    };
    // A failed box stays failed, with the reason it had.
    let on_failure = (record.state != BoxState::Failed).then_some(BoxState::Failed);
    t.run(Step::RuntimeStop, on_failure, stopped)
        .await
        .map_err(|source| runtime_error("stop", id, source))?;
    match failure {
        None => {
            t.write(BoxState::Stopped, None)?;
            tracing::info!(box_id = %id, name = %record.name, "box stopped");
        }
        // Failed with the record of why, like every other way a box comes to be failed.
        Some(reason) => {
            let gave_up = HarnessGaveUp {
                reason: reason.to_owned(),
            };
            t.failed(Step::Harness, &gave_up, Some(BoxState::Failed));
        }
    }
    super::copy::after_sleep(t).await;
    crate::memory::history::at_stop(t).await;
    Ok(())
}

/// How long `record`'s box gets between the runtime's SIGTERM and SIGKILL: [`STOP_GRACE`],
/// plus the time `berth-init` may take to stop its services one after another in reverse
/// dependency order (`berth_protocol::service::stop_budget_s`), so a slow database is not
/// killed mid-flush while its dependents are still stopping. The services are those of its
/// template as the registry has it now (the boot may have started from an older version
/// of the file; the registry keeps no other); a template that is gone adds nothing.
fn stop_grace(ctx: &Ctx, record: &BoxRecord) -> Duration {
    grace_for(ctx.templates.get(&record.template).as_deref())
}

fn grace_for(template: Option<&crate::templates::Template>) -> Duration {
    let services = template.map_or(&[][..], |t| &t.services[..]);
    STOP_GRACE + Duration::from_secs(berth_protocol::service::stop_budget_s(services))
}

/// The harness's reason for giving up, as the cause of a box's failure.
#[derive(Debug, thiserror::Error)]
#[error("{reason}")]
struct HarnessGaveUp {
    reason: String,
}

/// The box's harness gave up (too many exits in a row): its processes are stopped and the
/// box is `failed` with the harness's reason. Its queued messages wait; the next call that
/// needs the box starts it again, with a fresh harness.
pub(super) async fn fail_box(ctx: &Ctx, id: &BoxId, reason: &str) -> Result<(), OpError> {
    let (ctx, task_id, reason) = (ctx.clone(), id.clone(), reason.to_owned());
    detached(id, async move {
        let mut t = Transition::begin(&ctx, &task_id, Kind::Fail).await?;
        if t.record().state != BoxState::Running {
            return Ok(());
        }
        stop_held_as(&mut t, Some(&reason)).await
    })
    .await
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::templates::parse_template;

    #[test]
    fn the_grace_adds_the_longest_chain_of_service_stop_timeouts() {
        assert_eq!(grace_for(None), STOP_GRACE);
        let plain = parse_template(Path::new("/t/plain.toml"), "name = \"plain\"\n").unwrap();
        assert_eq!(grace_for(Some(&plain)), STOP_GRACE);
        let text = "name = \"chain\"\n\
            [[services]]\nname = \"db\"\ncommand = [\"db\"]\nstop_timeout_s = 20\n\
            [[services]]\nname = \"web\"\ncommand = [\"web\"]\nafter = [\"db\"]\n";
        let chain = parse_template(Path::new("/t/chain.toml"), text).unwrap();
        assert_eq!(
            grace_for(Some(&chain)),
            STOP_GRACE + Duration::from_secs(25)
        );
    }
}
