//! Watching a directory in a box. A watch is watching, not work: like the event stream,
//! it does not keep the box awake (a box that goes to sleep ends its watches).

use berth_protocol::BoxId;
use berth_runtime::guest_client::WatchStream;

use crate::ctx::Ctx;
use crate::error::OpError;
use crate::ops::files::{guest_call, FileTarget};

pub async fn watch(ctx: &Ctx, id: &BoxId, target: &FileTarget) -> Result<WatchStream, OpError> {
    guest_call(
        ctx,
        id,
        target.query()?,
        |c, q| async move { c.watch(&q).await },
    )
    .await
}
