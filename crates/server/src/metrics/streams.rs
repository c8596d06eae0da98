//! Long-lived streams per tenant, from the daemon's stream slots
//! ([`crate::admission::streams`]): how close each tenant is to its
//! `[server] max_streams_per_tenant`.

use berth_protocol::TenantId;

use super::exposition::{Exposition, Kind};
use crate::admission::Slots;

/// `berth_streams_open{tenant}`: one series per tenant holding a stream now (a tenant the
/// store knows: a slot is taken only after authentication); a tenant holding none has no
/// series. `berth_streams_limit` is the per-tenant budget.
pub(super) fn write(out: &mut Exposition, streams: &Slots<TenantId>) {
    let mut held = streams.held();
    held.sort();
    out.family(
        "berth_streams_open",
        Kind::Gauge,
        "Long-lived streams open (process output, streaming execs, event streams, file watches, terminals, port connections), by tenant id.",
    );
    for (tenant, count) in held {
        let count = u64::try_from(count).unwrap_or(u64::MAX);
        out.sample("berth_streams_open", &[("tenant", tenant.as_str())], count);
    }
    out.family(
        "berth_streams_limit",
        Kind::Gauge,
        "Long-lived streams one tenant may hold at once ([server] max_streams_per_tenant).",
    );
    let each = u64::try_from(streams.limits().each).unwrap_or(u64::MAX);
    out.sample("berth_streams_limit", &[], each);
}
