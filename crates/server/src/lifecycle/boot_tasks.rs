//! What runs beside a box's boot while it runs: the watch that notices it ending on its own,
//! and the pumps talking to its agent. Every way a boot comes to be run by this daemon (a
//! start or restore, a reattach after a restart, a warm-pool claim, a snapshot that failed)
//! starts them here.

use std::sync::Arc;

use berth_protocol::BoxId;
use berth_runtime::Runtime;

use crate::boxes::Live;
use crate::ctx::Ctx;
use crate::lifecycle::ExitWatch;

/// Starts the exit watch of boot `live.boot` and the pumps talking to `live.client`
/// (delivery only when the boot runs a `harness`); any earlier ones stop as they are
/// replaced. Nothing starts without a client.
pub(crate) fn start(
    ctx: &Ctx,
    id: &BoxId,
    live: &mut Live,
    runtime: Arc<dyn Runtime>,
    harness: bool,
) {
    let Some(client) = live.client.clone() else {
        return;
    };
    live.exit_watch = Some(ExitWatch::start(ctx, id, runtime, live.boot));
    live.pumps = Some(crate::pumps::start(ctx, id, client, live.boot, harness));
}
