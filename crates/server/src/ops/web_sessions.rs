//! Web sessions and pairing (`/v1/web/…`): making a pairing code, signing a browser in with
//! one or with an API key, listing and revoking sessions.

use berth_protocol::TenantId;
use berth_store::{NewPairing, NewWebSession, Principal, WebSession};

use crate::ctx::Ctx;
use crate::error::OpError;
use crate::ops::tenant_choice::TenantChoiceError;

/// A pairing code lives from 10 seconds to an hour; 10 minutes unless asked.
pub const TTL_S_RANGE: std::ops::RangeInclusive<u64> = 10..=3_600;
pub const DEFAULT_TTL_S: u64 = 600;
/// A device name is cut to this many characters.
pub const MAX_DEVICE_CHARS: usize = 64;

/// Why a pairing was not made (the handler maps these; the store's failures are `Op`).
#[derive(Debug, thiserror::Error)]
pub enum PairError {
    /// Only the admin names another tenant.
    #[error("only an admin key may pair a browser for another tenant")]
    OtherTenant,
    #[error(transparent)]
    Op(#[from] OpError),
}

/// A pairing code for the caller's tenant, or (admin) for `tenant`.
pub fn pair(
    ctx: &Ctx,
    who: &Principal,
    tenant: Option<&str>,
    ttl_s: Option<u64>,
) -> Result<NewPairing, PairError> {
    let ttl_s = ttl_s.unwrap_or(DEFAULT_TTL_S);
    let (min, max) = (*TTL_S_RANGE.start(), *TTL_S_RANGE.end());
    crate::validate::range("ttl_s", ttl_s as f64, min as f64, max as f64)?;
    let tenant = match crate::ops::tenant_choice::chosen(ctx, who, tenant) {
        Ok(tenant) => tenant,
        Err(TenantChoiceError::OtherTenant) => return Err(PairError::OtherTenant),
        Err(TenantChoiceError::Op(e)) => return Err(e.into()),
    };
    let ttl = time::Duration::seconds(ttl_s as i64);
    Ok(ctx
        .store
        .create_pairing(&tenant, ttl)
        .map_err(OpError::from)?)
}

/// Signs a browser in with a pairing code; `None`: unknown, used or expired.
pub fn sign_in_with_code(
    ctx: &Ctx,
    code: &str,
    device: &str,
) -> Result<Option<NewWebSession>, OpError> {
    Ok(ctx.store.pair_web_session(code, device)?)
}

/// Signs a browser in with an API key (an admin key signs in as its tenant, not as admin);
/// the session ends when that key is revoked. `None`: no such key (or revoked meanwhile).
pub fn sign_in_with_key(
    ctx: &Ctx,
    key: &str,
    device: &str,
) -> Result<Option<NewWebSession>, OpError> {
    let Some(principal) = ctx.store.authenticate(key)? else {
        return Ok(None);
    };
    let Some(key_id) = principal.api_key_id.as_deref() else {
        return Ok(None);
    };
    Ok(ctx
        .store
        .open_web_session(&principal.tenant_id, key_id, device)?)
}

/// The session a cookie names, as it is now.
pub fn current(ctx: &Ctx, tenant: &TenantId, id: &str) -> Result<Option<WebSession>, OpError> {
    Ok(ctx
        .store
        .list_web_sessions(tenant)?
        .into_iter()
        .find(|s| s.id == id))
}

pub fn list(ctx: &Ctx, tenant: &TenantId) -> Result<Vec<WebSession>, OpError> {
    Ok(ctx.store.list_web_sessions(tenant)?)
}

/// Ends the tenant's session `id` at once; `false`: no such session.
pub fn revoke(ctx: &Ctx, tenant: &TenantId, id: &str) -> Result<bool, OpError> {
    Ok(ctx.store.revoke_web_session(tenant, id)?)
}

/// The device's name: what the person typed, else a short reading of the `User-Agent`
/// ("Chrome on Android"), else the agent string itself; printable, at most
/// [`MAX_DEVICE_CHARS`] characters.
pub fn device_name(given: Option<&str>, user_agent: Option<&str>) -> String {
    let given = given.map(str::trim).filter(|d| !d.is_empty());
    let name = match (given, user_agent) {
        (Some(given), _) => given.to_owned(),
        (None, Some(agent)) => from_user_agent(agent),
        (None, None) => String::new(),
    };
    let name: String = name
        .chars()
        .filter(|c| !c.is_control())
        .take(MAX_DEVICE_CHARS)
        .collect();
    let name = name.trim();
    if name.is_empty() {
        "unknown device".into()
    } else {
        name.to_owned()
    }
}

fn from_user_agent(agent: &str) -> String {
    // Order matters: Edge says Chrome and Safari too, Chrome says Safari, Android says Linux.
    const BROWSERS: &[(&str, &str)] = &[
        ("Edg/", "Edge"),
        ("Firefox/", "Firefox"),
        ("FxiOS/", "Firefox"),
        ("CriOS/", "Chrome"),
        ("Chrome/", "Chrome"),
        ("Safari/", "Safari"),
    ];
    const SYSTEMS: &[(&str, &str)] = &[
        ("iPhone", "iPhone"),
        ("iPad", "iPad"),
        ("Android", "Android"),
        ("Mac OS X", "macOS"),
        ("Windows", "Windows"),
        ("CrOS", "ChromeOS"),
        ("Linux", "Linux"),
    ];
    let find = |table: &[(&str, &'static str)]| {
        table
            .iter()
            .find(|(token, _)| agent.contains(token))
            .map(|(_, name)| *name)
    };
    match (find(BROWSERS), find(SYSTEMS)) {
        (Some(browser), Some(system)) => format!("{browser} on {system}"),
        (Some(name), None) | (None, Some(name)) => name.to_owned(),
        (None, None) => agent.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_names_are_short_and_readable() {
        let android = "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Mobile Safari/537.36";
        assert_eq!(device_name(None, Some(android)), "Chrome on Android");
        let iphone = "Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.0 Mobile/15E148 Safari/604.1";
        assert_eq!(device_name(None, Some(iphone)), "Safari on iPhone");
        assert_eq!(device_name(Some("  my phone "), Some(android)), "my phone");
        assert_eq!(device_name(Some(""), None), "unknown device");
        assert_eq!(device_name(None, Some("curl/8.5.0")), "curl/8.5.0");
        let long = "x".repeat(300);
        assert_eq!(device_name(Some(&long), None).chars().count(), 64);
        assert_eq!(device_name(Some("a\u{1b}[2Jb"), None), "a[2Jb");
        assert_eq!(
            device_name(Some(&"é".repeat(100)), None).chars().count(),
            64
        );
    }
}
