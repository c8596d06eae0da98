//! Listing the tenant's sandboxes: `GET /v2/sandboxes` (running and paused, filtered and
//! paged) and the older `GET /sandboxes` (running ones, filtered, one page).
//!
//! Pages are ordered by start time (newest first unless `order=asc`), ties by sandbox id.
//! `nextToken` is the position of the next page's first sandbox (`<started_at_ms>.<id>`),
//! so a page stays right when sandboxes come and go between the calls. A tenant has few
//! sandboxes: they are filtered and ordered here rather than in SQL.

use std::cmp::Ordering;

use berth_protocol::TenantId;
use berth_store::{BoxRecord, E2bSandbox};
use serde::Deserialize;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use crate::ctx::Ctx;
use crate::e2b::error::E2bError;
use crate::e2b::metadata;
use crate::e2b::view::state;
use crate::e2b::wire::SandboxState;

/// The most sandboxes on one page, and the default.
pub const MAX_LIMIT: u32 = 100;

/// `GET /v2/sandboxes`'s query (and `GET /sandboxes`'s, which takes `metadata` only).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ListQuery {
    #[serde(default)]
    pub metadata: Option<String>,
    /// Comma-separated `running`, `paused`.
    #[serde(default)]
    pub state: Option<String>,
    /// `asc` or `desc` (default).
    #[serde(default)]
    pub order: Option<String>,
    /// RFC 3339.
    #[serde(default)]
    pub started_after: Option<String>,
    #[serde(default)]
    pub template: Option<String>,
    #[serde(default)]
    pub next_token: Option<String>,
    #[serde(default)]
    pub limit: Option<u32>,
}

/// One page.
#[derive(Debug)]
pub struct Page {
    pub sandboxes: Vec<(BoxRecord, E2bSandbox)>,
    /// Where the next page starts; `None` on the last page.
    pub next_token: Option<String>,
    /// How many running sandboxes match the filters (before paging), when running ones
    /// were asked for.
    pub total_running: Option<usize>,
}

/// The page `query` asks for.
pub fn list(ctx: &Ctx, tenant: &TenantId, query: &ListQuery) -> Result<Page, E2bError> {
    let bad = |param, rule| E2bError::InvalidQuery { param, rule };
    let filter = metadata::parse_filter(query.metadata.as_deref().unwrap_or(""))?;
    let states = states(query.state.as_deref())?;
    let descending = match query.order.as_deref() {
        None | Some("desc") => true,
        Some("asc") => false,
        Some(_) => return Err(bad("order", "asc or desc")),
    };
    let started_after_ms = query
        .started_after
        .as_deref()
        .map(|t| {
            OffsetDateTime::parse(t, &Rfc3339)
                .map(|t| (t.unix_timestamp_nanos() / 1_000_000) as i64)
                .map_err(|_| bad("startedAfter", "an RFC 3339 time"))
        })
        .transpose()?;
    let limit = query.limit.unwrap_or(MAX_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(bad("limit", "between 1 and 100"));
    }
    let start = query
        .next_token
        .as_deref()
        .map(|token| {
            parse_token(token).ok_or_else(|| bad("nextToken", "a token from x-next-token"))
        })
        .transpose()?;

    let mut boxes = ctx.store.list_boxes(tenant)?;
    boxes.sort_by(|a, b| a.id.as_str().cmp(b.id.as_str()));
    let mut matching: Vec<(BoxRecord, E2bSandbox)> = ctx
        .store
        .list_e2b_sandboxes(tenant)?
        .into_iter()
        .filter(|row| metadata::matches(&row.metadata, &filter))
        .filter(|row| started_after_ms.is_none_or(|after| row.started_at_ms >= after))
        .filter(|row| {
            query
                .template
                .as_ref()
                .is_none_or(|t| &row.template_id == t)
        })
        .filter_map(|row| {
            let at = boxes
                .binary_search_by(|b| b.id.as_str().cmp(row.box_id.as_str()))
                .ok()?;
            Some((boxes[at].clone(), row))
        })
        .filter(|(record, _)| states.contains(&state(record)))
        .collect();
    let total_running = states.contains(&SandboxState::Running).then(|| {
        matching
            .iter()
            .filter(|(record, _)| state(record) == SandboxState::Running)
            .count()
    });
    let order = |a: &E2bSandbox, b: &E2bSandbox| {
        let ascending = position(a).cmp(&position(b));
        if descending {
            ascending.reverse()
        } else {
            ascending
        }
    };
    matching.sort_by(|(_, a), (_, b)| order(a, b));
    if let Some(start) = &start {
        matching.retain(|(_, row)| {
            let from = position(row).cmp(&(start.0, start.1.as_str()));
            from == Ordering::Equal || (from == Ordering::Less) == descending
        });
    }
    let rest = matching.split_off(matching.len().min(limit as usize));
    let next_token = rest.first().map(|(_, row)| token(row));
    Ok(Page {
        sandboxes: matching,
        next_token,
        total_running,
    })
}

/// The `state` filter; absent: both.
fn states(param: Option<&str>) -> Result<Vec<SandboxState>, E2bError> {
    let Some(param) = param else {
        return Ok(vec![SandboxState::Running, SandboxState::Paused]);
    };
    param
        .split(',')
        .map(|s| {
            SandboxState::parse(s.trim()).ok_or(E2bError::InvalidQuery {
                param: "state",
                rule: "a comma-separated list of running and paused",
            })
        })
        .collect()
}

fn position(row: &E2bSandbox) -> (i64, &str) {
    (row.started_at_ms, row.sandbox_id.as_str())
}

fn token(row: &E2bSandbox) -> String {
    format!("{}.{}", row.started_at_ms, row.sandbox_id)
}

fn parse_token(token: &str) -> Option<(i64, String)> {
    let (at, id) = token.split_once('.')?;
    let valid_id = !id.is_empty()
        && id.len() <= 63
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    valid_id.then_some(())?;
    Some((at.parse().ok()?, id.to_owned()))
}
