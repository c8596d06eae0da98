//! Share links to a box's port (`/v1/boxes/{ref}/ports/{port}/links`), and checking the
//! access a link or its cookie gives.

use berth_protocol::TenantId;
use berth_store::{BoxRecord, NewLinkSession, NewPortLink, PortLink};

use crate::ctx::Ctx;
use crate::error::{LinkRefusal, OpError};
use crate::ops::box_find::find_box;

/// A link lives from 10 seconds (a link opened at once) to 30 days.
pub const TTL_S_RANGE: std::ops::RangeInclusive<u64> = 10..=30 * 86_400;
/// Live links one box may have at once.
pub const MAX_LIVE_PER_BOX: usize = 100;
/// A cookie a link opens lives at most this long (and never past its link): a browser
/// that keeps it is asked to open the link again after a day.
pub const SESSION_MAX_S: i64 = 86_400;

/// Makes a link to `port` of the tenant's box `reference`.
pub fn create(
    ctx: &Ctx,
    tenant: &TenantId,
    reference: &str,
    port: u16,
    ttl_s: u64,
) -> Result<(BoxRecord, NewPortLink), OpError> {
    let (min, max) = (*TTL_S_RANGE.start(), *TTL_S_RANGE.end());
    crate::validate::range("ttl_s", ttl_s as f64, min as f64, max as f64)?;
    let record = find_box(ctx, tenant, reference)?;
    let ttl = time::Duration::seconds(ttl_s as i64);
    let link = ctx
        .store
        .create_port_link(tenant, &record.id, port, ttl, MAX_LIVE_PER_BOX)?;
    Ok((record, link))
}

pub fn list(
    ctx: &Ctx,
    tenant: &TenantId,
    reference: &str,
    port: Option<u16>,
) -> Result<Vec<PortLink>, OpError> {
    let record = find_box(ctx, tenant, reference)?;
    Ok(ctx.store.list_port_links(tenant, &record.id, port)?)
}

/// Revokes a link of the box (of `port`, when given: a link of another port is "no such
/// link").
pub fn revoke(
    ctx: &Ctx,
    tenant: &TenantId,
    reference: &str,
    port: Option<u16>,
    link_id: &str,
) -> Result<PortLink, OpError> {
    let record = find_box(ctx, tenant, reference)?;
    if port.is_some()
        && !ctx
            .store
            .list_port_links(tenant, &record.id, port)?
            .iter()
            .any(|l| l.id == link_id)
    {
        return Err(OpError::PortLinkNotFound {
            link_id: link_id.to_owned(),
        });
    }
    Ok(ctx.store.revoke_port_link(tenant, &record.id, link_id)?)
}

/// The box a link's holder asks for: found in the link's tenant, and only when it is the
/// link's box and port.
pub fn box_of_link(
    ctx: &Ctx,
    link: &PortLink,
    reference: &str,
    port: u16,
) -> Result<BoxRecord, OpError> {
    let elsewhere = || OpError::LinkRefused(LinkRefusal::Elsewhere);
    let record = find_box(ctx, &link.tenant_id, reference).map_err(|e| match e {
        OpError::BoxNotFound { .. } => elsewhere(),
        other => other,
    })?;
    if record.id != link.box_id || port != link.port {
        return Err(elsewhere());
    }
    Ok(record)
}

/// Checks a link's token and opens a session (the cookie's token) with it.
pub fn open(ctx: &Ctx, token: &str) -> Result<(PortLink, NewLinkSession), OpError> {
    let link = ctx
        .store
        .port_link_by_token(token)?
        .ok_or(OpError::LinkRefused(LinkRefusal::Unknown))?;
    live(&link)?;
    let session = ctx
        .store
        .open_link_session(&link.id, time::Duration::seconds(SESSION_MAX_S))?
        // Revoked or expired between the two reads.
        .ok_or(OpError::LinkRefused(LinkRefusal::Revoked))?;
    Ok((link, session))
}

/// The link of a cookie's session token, while both are live.
pub fn by_session(ctx: &Ctx, token: &str) -> Result<PortLink, OpError> {
    ctx.store
        .port_link_by_session(token)?
        .ok_or(OpError::LinkRefused(LinkRefusal::SessionEnded))
}

fn live(link: &PortLink) -> Result<(), OpError> {
    if link.revoked_at.is_some() {
        Err(OpError::LinkRefused(LinkRefusal::Revoked))
    } else if !link.is_live(time::OffsetDateTime::now_utc()) {
        Err(OpError::LinkRefused(LinkRefusal::Expired))
    } else {
        Ok(())
    }
}
