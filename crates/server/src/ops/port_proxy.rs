//! One request to a box's port, through the proxy: the tenant's port connection slot and
//! stream slot, and the box's activity guard, held while it runs, the box woken, a pooled keep-alive connection
//! to the app reused when there is one (else the port dialled, waiting for it to listen),
//! and the exchange (`crate::ports::proxy`).

use axum::extract::Request;
use axum::response::Response;
use berth_protocol::TenantId;
use berth_store::BoxRecord;

use crate::ctx::Ctx;
use crate::error::OpError;
use crate::ops::port_connect;
use crate::ports::pool::AppKey;
use crate::ports::proxy::{self, Failed, Forwarding, ProxyError};

/// Forwards `request` to port `to.port` of `record` (a box of `tenant`) and returns the
/// app's answer, streaming.
pub async fn forward(
    ctx: &Ctx,
    tenant: &TenantId,
    record: &BoxRecord,
    request: Request,
    to: &Forwarding,
) -> Result<Response, OpError> {
    let proxy_error = |e| OpError::PortProxy(Box::new(e));
    let answer_timeout = ctx.ports.answer_timeout();
    let slot = ctx.port_connections.take(tenant)?;
    let stream = ctx.streams.take(tenant)?;
    // A request through the proxy is work: it keeps the box awake while it runs.
    let busy = ctx.activity.begin(&record.id);
    let mut prepared = proxy::prepare(request, to).map_err(proxy_error)?;
    let mut hold: proxy::Hold = Box::new((slot, stream, busy));
    // Wakes (or resumes) the box first: a pooled connection to a paused box would hang.
    let (_, boot) = ctx.lifecycle().wake(&record.id).await?;
    let key = AppKey {
        box_id: record.id.clone(),
        boot,
        port: to.port,
    };
    let reuse = (!prepared.is_upgrade()).then(|| (ctx.app_pool.clone(), key.clone()));
    if let Some(sender) = reuse.as_ref().and_then(|_| ctx.app_pool.take(&key)) {
        match proxy::exchange(
            sender,
            prepared,
            to.port,
            answer_timeout,
            hold,
            reuse.clone(),
        )
        .await
        {
            Ok(response) => return Ok(response),
            Err(Failed::Proxy(e)) => return Err(proxy_error(e)),
            // The pooled connection had closed: nothing was sent; a new one below.
            Err(Failed::NotSent {
                prepared: p,
                hold: h,
            }) => (prepared, hold) = (*p, h),
        }
    }
    let stream = port_connect::connect(
        ctx,
        &record.id,
        &record.name,
        to.port,
        ctx.ports.listen_wait(),
    )
    .await?;
    let sender = proxy::handshake(stream.into_io(), to.port)
        .await
        .map_err(proxy_error)?;
    match proxy::exchange(sender, prepared, to.port, answer_timeout, hold, reuse).await {
        Ok(response) => Ok(response),
        Err(Failed::Proxy(e)) => Err(proxy_error(e)),
        Err(Failed::NotSent { .. }) => Err(proxy_error(ProxyError::Closed { port: to.port })),
    }
}
