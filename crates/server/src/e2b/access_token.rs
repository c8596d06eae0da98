//! A sandbox's tokens from the daemon's key ([`super::access_key`]): the `envdAccessToken`
//! (`X-Access-Token` to the in-sandbox API) and the `trafficAccessToken` (its ports by host
//! name).

use berth_protocol::BoxId;

use super::access_key::Purpose;
use crate::ctx::Ctx;

/// The token of box `id` (`envdAccessToken`).
pub fn for_box(ctx: &Ctx, id: &BoxId) -> String {
    ctx.e2b.tokens().for_box(Purpose::Envd, id)
}

/// Whether `token` (an `X-Access-Token`) is box `id`'s, in constant time.
pub fn check(ctx: &Ctx, id: &BoxId, token: &str) -> bool {
    ctx.e2b.tokens().check(Purpose::Envd, id, token)
}

/// The `trafficAccessToken` of box `id`.
pub fn traffic_for_box(ctx: &Ctx, id: &BoxId) -> String {
    ctx.e2b.tokens().for_box(Purpose::Traffic, id)
}

/// Whether `token` (an `e2b-traffic-access-token`) is box `id`'s, in constant time.
pub fn check_traffic(ctx: &Ctx, id: &BoxId, token: &str) -> bool {
    ctx.e2b.tokens().check(Purpose::Traffic, id, token)
}
