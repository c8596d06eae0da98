//! A connection to a box's desktop, for the VNC WebSocket (`api/desktop_vnc.rs`): the
//! RFB server its template runs as the `vnc` service (`berth-vnc`, x11vnc on the box's
//! loopback, `templates/desktop.rs`), reached like any port of the box
//! (`ops/port_connect.rs`: the box woken, the port waited for).
//!
//! Connecting is a use of the box, like any call that wakes it; what comes after is not:
//! a person watching its screen is not work. What they type and click is, and the bridge
//! counts it ([`input`]).

use berth_store::{BoxRecord, BoxState};

use crate::ctx::Ctx;
use crate::desktop::names::{DESKTOP_VNC_PORT, VNC_SERVICE};
use crate::error::OpError;
use crate::ops::{box_find, desktop, port_connect};
use crate::ports::dial::AppStream;

/// Refuses a box whose template runs no VNC server, without waking it.
pub fn check(ctx: &Ctx, record: &BoxRecord) -> Result<(), OpError> {
    Ok(desktop::require(ctx, record, VNC_SERVICE)?)
}

/// Connects to the box's VNC server, waking the box and waiting up to `[ports]
/// listen_wait_s` for the server to listen. The box's idle clock starts again when it
/// returns: a viewer gets the box's whole idle timeout from there.
pub async fn connect(ctx: &Ctx, record: &BoxRecord) -> Result<AppStream, OpError> {
    let _busy = ctx.activity.begin(&record.id);
    port_connect::connect(
        ctx,
        &record.id,
        &record.name,
        DESKTOP_VNC_PORT,
        ctx.ports.listen_wait(),
    )
    .await
}

/// A person's input reached the desktop: the box counts as used just now (cheap: call it
/// for each input).
pub fn input(ctx: &Ctx, record: &BoxRecord) {
    ctx.activity.touch(&record.id);
}

/// Wakes a box that fell asleep under its viewer (paused: the connection holds, frozen),
/// so that taking control is never a click into a frozen screen. Reads the box's row:
/// call it for input, not for every event.
pub async fn wake_if_paused(ctx: &Ctx, record: &BoxRecord) {
    let asleep = box_find::reload(ctx, &record.id).map(|r| r.state == BoxState::Paused);
    if let Ok(true) = asleep {
        if let Err(e) = ctx.lifecycle().wake(&record.id).await {
            tracing::info!(box_id = %record.id, error = %berth_runtime::error_chain(&e), "cannot wake the box for its desktop's input");
        }
    }
}
