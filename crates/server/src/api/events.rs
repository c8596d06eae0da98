//! `GET /v1/boxes/{ref}/events`: the box's event log as Server-Sent Events (stored events,
//! then live ones), or one JSON page with `wait=false`. Events the reader asked for that
//! were pruned are announced (a page's `gap`, an SSE `gap` event), never skipped silently.
//! The stream is pulled: the next page is read only once the client has taken the last
//! one, so a slow reader costs at most about a page of memory.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use berth_store::{EventGap, EventPage, EventRecord};
use futures_util::stream::{self, Stream, StreamExt};
use http::HeaderMap;
use serde::{Deserialize, Serialize};
use time::format_description::well_known::Rfc3339;

use crate::api::auth::Caller;
use crate::api::error::ApiError;
use crate::api::extract::ApiQuery;
use crate::ctx::Ctx;
use crate::ops::events_read::{self, EventFeed};
use berth_runtime::error_chain;

/// The type of the event that stands in for pruned events on a stream.
const GAP_EVENT: &str = "gap";

/// A comment line this often keeps proxies from closing an idle stream.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventsQuery {
    #[serde(default)]
    after: Option<u64>,
    #[serde(default = "yes")]
    wait: bool,
}

fn yes() -> bool {
    true
}

/// One event as clients see it (docs/api.md).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct EventView {
    seq: u64,
    #[serde(rename = "type")]
    kind: String,
    #[schema(schema_with = event_data_schema)]
    data: serde_json::Value,
    created_at: String,
}

/// `data`'s schema: any object (a harness's line as it was, or berth's own), in which a
/// replayed `user` line and a `result` name their message.
fn event_data_schema() -> utoipa::openapi::schema::Object {
    use utoipa::openapi::schema::{AdditionalProperties, ObjectBuilder, Type};
    let message_id = ObjectBuilder::new()
        .schema_type(Type::String)
        .description(Some(
            "On a `user` event that replays a message posted to this box, and on the `result` \
             event that ends that message's turn: that message's id \
             (`POST /v1/boxes/{box_ref}/messages` answers it; the client's own `id`, its \
             idempotency key, when it chose one). Absent on other events, and where the box's \
             berth-init predates it (or, on `user`, its harness acknowledges on write): match \
             by text then.",
        ));
    ObjectBuilder::new()
        .schema_type(Type::Object)
        .description(Some(
            "The event's body: a harness's line as it was, or berth's own (docs/api.md, \"Events\").",
        ))
        .property(berth_protocol::harness::REPLAY_MESSAGE_ID, message_id)
        .additional_properties(Some(AdditionalProperties::FreeForm(true)))
        .build()
}

impl From<EventRecord> for EventView {
    fn from(e: EventRecord) -> Self {
        EventView {
            seq: e.seq,
            kind: e.kind,
            data: e.data,
            created_at: e.created_at.format(&Rfc3339).unwrap_or_default(),
        }
    }
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
struct EventPageView {
    events: Vec<EventView>,
    /// Pass as `after` for the next page.
    next_after: u64,
    /// More events are stored after this page: ask again at once.
    more: bool,
    /// Present when events after `after` were pruned (past the box's event retention):
    /// they are gone, and this page starts after them.
    #[serde(skip_serializing_if = "Option::is_none")]
    gap: Option<GapView>,
}

/// Seqs `first..=last` were pruned before this reader read them.
#[derive(Debug, Serialize, utoipa::ToSchema)]
struct GapView {
    first: u64,
    last: u64,
}

impl From<EventGap> for GapView {
    fn from(gap: EventGap) -> Self {
        GapView {
            first: gap.first,
            last: gap.last,
        }
    }
}

#[utoipa::path(get, path = "/v1/boxes/{box_ref}/events", tag = "events", summary = "Events as Server-Sent Events (resumable), or a JSON page with wait=false", params(("box_ref" = String, Path, description = "box id (`bx_…`) or name"), ("after" = Option<u64>, Query, description = "resume after this seq (Last-Event-ID wins)"), ("wait" = Option<bool>, Query, description = "false: one JSON page instead of a stream"), ("Last-Event-ID" = Option<String>, Header, description = "resume after this seq")), responses((status = 200, description = "text/event-stream of events (and a `gap` event where pruned events were skipped), or a page of at most 1000 events and 4 MiB of event data", content((EventPageView = "application/json"), (EventView = "text/event-stream"))), (status = 400, description = "invalid request", body = berth_protocol::ErrorBody), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 404, description = "no such box", body = berth_protocol::ErrorBody), (status = 429, description = "the tenant holds `[server] max_streams_per_tenant` streams already (`too_many_requests`); retry after `Retry-After` seconds, or read pages with wait=false", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn events(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path(box_ref): Path<String>,
    headers: HeaderMap,
    ApiQuery(q): ApiQuery<EventsQuery>,
) -> Result<Response, ApiError> {
    let after = resume_after(&headers, q.after)?;
    if !q.wait {
        let page = events_read::read_page(&ctx, &who.tenant_id, &box_ref, after)?;
        let view = EventPageView {
            next_after: events_read::next_after(&page, after),
            more: page.more,
            gap: page.gap.map(GapView::from),
            events: page.events.into_iter().map(EventView::from).collect(),
        };
        return Ok(Json(view).into_response());
    }
    // Watching is not work: an open stream does not keep the box awake, so a screen that
    // watches many boxes does not pin them all. A reclaim shows on the stream as its
    // `state` events (`stopping`, `stopped`); the stream stays open for the next wake.
    let feed = EventFeed::open(&ctx, &who.tenant_id, &box_ref, after)?;
    // While the stream is open its turns need no push notification.
    let watching = ctx.push.watchers.watch(&who.tenant_id, &feed.id);
    Ok(Sse::new(sse_stream(feed, watching))
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response())
}

/// Where to resume: the `Last-Event-ID` header (what a reconnecting EventSource sends),
/// else `?after=`, else from the start.
fn resume_after(headers: &HeaderMap, after: Option<u64>) -> Result<u64, ApiError> {
    let Some(value) = headers.get("last-event-id") else {
        return Ok(after.unwrap_or(0));
    };
    let malformed = || ApiError::Malformed {
        part: "Last-Event-ID header",
        detail: "expected an event seq (a non-negative integer)".into(),
    };
    let text = value.to_str().map_err(|_| malformed())?.trim();
    if text.is_empty() {
        return Ok(after.unwrap_or(0));
    }
    text.parse::<u64>().map_err(|_| malformed())
}

/// `watching` lives as long as the stream (it drops when the client goes away).
fn sse_stream(
    feed: EventFeed,
    watching: crate::push::watchers::Watching,
) -> impl Stream<Item = Result<Event, Infallible>> {
    stream::unfold((feed, watching), |(mut feed, watching)| async move {
        match feed.next().await {
            Ok(Some(page)) => Some((page, (feed, watching))),
            Ok(None) => None,
            Err(e) => {
                tracing::error!(box_id = %feed.id, error = %error_chain(&e), "event stream ended");
                None
            }
        }
    })
    .flat_map(|page: EventPage| {
        let gap = page.gap.map(gap_event);
        let events = page.events.into_iter().map(sse_event);
        stream::iter(gap.into_iter().chain(events).map(Ok))
    })
}

/// `event: gap`, shaped like any event (so every client's event parser reads it) and
/// standing in for the pruned ones: its seq (and SSE id) is the last pruned seq, so a client
/// that resumes from it has missed nothing more; its data says which seqs are gone.
fn gap_event(gap: EventGap) -> Event {
    sse_event(EventRecord {
        seq: gap.last,
        kind: GAP_EVENT.to_owned(),
        data: serde_json::json!({"first": gap.first, "last": gap.last}),
        created_at: time::OffsetDateTime::now_utc(),
    })
}

fn sse_event(record: EventRecord) -> Event {
    // SSE fields are lines: a type with a line break (a harness's choice) must not break
    // the framing.
    let kind: String = record
        .kind
        .chars()
        .map(|c| if c == '\n' || c == '\r' { ' ' } else { c })
        .collect();
    let seq = record.seq;
    let view = EventView::from(record);
    let data = serde_json::to_string(&view).unwrap_or_else(|_| "{}".into());
    Event::default().id(seq.to_string()).event(kind).data(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_resume_point_comes_from_the_header_then_the_query() {
        let mut headers = HeaderMap::new();
        assert_eq!(resume_after(&headers, None).unwrap(), 0);
        assert_eq!(resume_after(&headers, Some(4)).unwrap(), 4);
        headers.insert("last-event-id", "7".parse().unwrap());
        assert_eq!(resume_after(&headers, Some(4)).unwrap(), 7);
        headers.insert("last-event-id", "x7".parse().unwrap());
        assert!(resume_after(&headers, None).is_err());
        headers.insert("last-event-id", "-1".parse().unwrap());
        assert!(resume_after(&headers, None).is_err());
    }
}
