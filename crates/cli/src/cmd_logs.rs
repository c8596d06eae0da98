//! `berth logs NAME`: a box's stored events, one line each; `-f` follows the live stream.

use std::io::Write as _;

use anyhow::Context as _;
use clap::Args;

use crate::client::Client;
use crate::events::{self, summary, Event, LiveEvents};

/// Width of the summary column.
const SUMMARY_CHARS: usize = 120;
/// `-f` reconnects for as long as it takes (the daemon may be restarting): ~ 30 min.
const FOLLOW_RECONNECTS: u32 = 1000;

#[derive(Debug, Args)]
#[command(after_help = "\
Events the box's retention pruned before they were read show as one `gap` line (with \
--json: {\"type\":\"gap\",\"first\",\"last\"}), so a hole never passes for the whole log.")]
pub struct LogsArgs {
    /// The box's name or id (`bx_…`).
    pub name: String,
    /// Keep following: print new events as they come (reconnects if the daemon restarts).
    #[arg(long, short)]
    pub follow: bool,
    /// Start after this sequence number (default: from the first event).
    #[arg(long, value_name = "SEQ", default_value_t = 0)]
    pub after: u64,
    /// Print each event as the daemon's JSON, one per line.
    #[arg(long)]
    pub json: bool,
}

pub async fn run(client: &Client, args: LogsArgs) -> anyhow::Result<u8> {
    let mut out = std::io::stdout().lock();
    let mut after = args.after;
    loop {
        let page = events::page(client, &args.name, after).await?;
        if let Some(gap) = page.gap {
            writeln!(out, "{}", gap_line(gap, args.json))?;
        }
        for event in &page.events {
            writeln!(out, "{}", line(event, args.json))?;
        }
        if page.events.is_empty() || page.next_after <= after {
            break;
        }
        after = page.next_after;
    }
    out.flush().context("writing to stdout")?;
    if !args.follow {
        return Ok(0);
    }
    let mut live = LiveEvents::new(client, &args.name, after, FOLLOW_RECONNECTS);
    let follow = async {
        loop {
            let event = live
                .next()
                .await
                .with_context(|| format!("following {}'s events", args.name))?;
            writeln!(out, "{}", line(&event, args.json))?;
            out.flush().context("writing to stdout")?;
        }
    };
    tokio::select! {
        result = follow => result,
        _ = tokio::signal::ctrl_c() => Ok(0),
    }
}

/// Where pruned events were: said, so a reader never takes a hole for the whole log.
fn gap_line(gap: events::Gap, json: bool) -> String {
    if json {
        serde_json::json!({"type": "gap", "first": gap.first, "last": gap.last}).to_string()
    } else {
        format!(
            "{:>6} {:<14} events {}-{} were pruned (the box's event retention) before this read",
            "...", "gap", gap.first, gap.last
        )
    }
}

/// `SEQ TYPE summary`, or the event's JSON.
fn line(event: &Event, json: bool) -> String {
    if json {
        serde_json::json!({
            "seq": event.seq,
            "type": event.kind,
            "data": event.data,
            "created_at": event.created_at,
        })
        .to_string()
    } else {
        format!(
            "{:>6} {:<14} {}",
            event.seq,
            event.kind,
            summary(event, SUMMARY_CHARS)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_pruned_stretch_is_said() {
        let gap = events::Gap { first: 3, last: 9 };
        assert!(gap_line(gap, false).contains("events 3-9 were pruned"));
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&gap_line(gap, true)).unwrap(),
            json!({"type":"gap","first":3,"last":9})
        );
        let page: events::EventPage = serde_json::from_value(
            json!({"events":[],"next_after":9,"more":false,"gap":{"first":3,"last":9}}),
        )
        .unwrap();
        assert_eq!(page.gap, Some(gap));
    }

    #[test]
    fn lines_are_aligned_or_json() {
        let event = Event {
            seq: 12,
            kind: "user".into(),
            data: json!({"message":{"content":"hi"}}),
            created_at: "2026-11-29T22:00:00Z".into(),
        };
        assert_eq!(line(&event, false), "    12 user           hi");
        let back: serde_json::Value = serde_json::from_str(&line(&event, true)).unwrap();
        assert_eq!(back["seq"], 12);
        assert_eq!(back["type"], "user");
        assert_eq!(back["data"]["message"]["content"], "hi");
    }
}
