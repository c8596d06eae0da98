//! `berth webhook add|ls|rm|test|deliveries`: where the daemon tells another system of your
//! boxes' events (docs/webhooks.md). The signing secret is printed once, at `add`.

use std::io::Write as _;

use anyhow::Context as _;
use clap::Subcommand;
use http::Method;
use serde::Deserialize;

use crate::client::{path_segment, Client};
use crate::table::table;

#[derive(Debug, Subcommand)]
pub enum WebhookCommand {
    /// Add a webhook: events of your boxes are POSTed to URL, signed (Standard Webhooks).
    /// Prints its id and its signing secret, which is never shown again.
    Add {
        /// Where to POST: https:// and not a private address, unless the daemon's
        /// berth.toml `[webhooks] allow_endpoints` lists its origin.
        url: String,
        /// An event to send (repeat it, or separate with commas): box.state_changed,
        /// box.failed, turn.completed, wakeup.fired, process.exited.
        #[arg(
            long = "event",
            value_name = "NAME",
            value_delimiter = ',',
            required = true
        )]
        events: Vec<String>,
        /// A note of your own.
        #[arg(long, default_value = "")]
        description: String,
        /// Print the daemon's JSON answer (with the secret) instead of two lines.
        #[arg(long)]
        json: bool,
    },
    /// List your webhooks as a table (ID, URL, EVENTS).
    #[command(visible_alias = "list")]
    Ls {
        /// Print the daemon's raw JSON answer instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Delete a webhook and its deliveries.
    #[command(visible_alias = "delete")]
    Rm {
        /// The webhook's id (wh_…).
        id: String,
    },
    /// Send a webhook.test event now and print how its first attempt went.
    Test {
        /// The webhook's id (wh_…).
        id: String,
        /// Print the delivery as JSON.
        #[arg(long)]
        json: bool,
    },
    /// List a webhook's deliveries, newest first, with their last attempts.
    Deliveries {
        /// The webhook's id (wh_…).
        id: String,
        /// How many (at most 500).
        #[arg(long, default_value_t = 50)]
        limit: u32,
        /// Print the daemon's raw JSON answer instead of a table.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Deserialize)]
struct WebhookView {
    id: String,
    url: String,
    events: Vec<String>,
}

#[derive(Debug, Deserialize)]
struct WebhookList {
    webhooks: Vec<WebhookView>,
}

#[derive(Debug, Deserialize)]
struct DeliveryView {
    id: String,
    event: String,
    state: String,
    attempts: u32,
    #[serde(default)]
    last_status: Option<u16>,
    #[serde(default)]
    last_error: Option<String>,
    created_at: String,
}

#[derive(Debug, Deserialize)]
struct DeliveryList {
    deliveries: Vec<DeliveryView>,
}

pub async fn run(client: &Client, command: WebhookCommand) -> anyhow::Result<u8> {
    let mut out = std::io::stdout().lock();
    let mut code = 0;
    match command {
        WebhookCommand::Add {
            url,
            events,
            description,
            json,
        } => {
            let body =
                serde_json::json!({"url": url, "events": events, "description": description});
            let raw: serde_json::Value = client
                .json(Method::POST, "/v1/webhooks", Some(&body), "a webhook")
                .await?;
            if json {
                crate::output::json(&mut out, &raw)?;
            } else {
                let field = |name: &str| raw[name].as_str().unwrap_or_default().to_owned();
                writeln!(out, "webhook {} added for {}", field("id"), field("url"))?;
                writeln!(out, "signing secret (shown only now): {}", field("secret"))?;
            }
        }
        WebhookCommand::Ls { json: true } => {
            let raw: serde_json::Value = client
                .json(Method::GET, "/v1/webhooks", None::<&()>, "a webhook list")
                .await?;
            crate::output::json(&mut out, &raw)?;
        }
        WebhookCommand::Ls { json: false } => {
            let list: WebhookList = client
                .json(Method::GET, "/v1/webhooks", None::<&()>, "a webhook list")
                .await?;
            let rows: Vec<Vec<String>> = list
                .webhooks
                .iter()
                .map(|w| vec![w.id.clone(), w.url.clone(), w.events.join(",")])
                .collect();
            out.write_all(table(&["ID", "URL", "EVENTS"], &rows).as_bytes())?;
        }
        WebhookCommand::Rm { id } => {
            let path = format!("/v1/webhooks/{}", path_segment(&id));
            client
                .no_content(Method::DELETE, &path, None::<&()>)
                .await?;
            writeln!(out, "webhook {id} deleted")?;
        }
        WebhookCommand::Test { id, json } => {
            let path = format!("/v1/webhooks/{}/test", path_segment(&id));
            let raw: serde_json::Value = client
                .json(Method::POST, &path, None::<&()>, "a delivery")
                .await?;
            let delivery: DeliveryView =
                serde_json::from_value(raw.clone()).context("bad delivery from the daemon")?;
            if json {
                crate::output::json(&mut out, &raw)?;
            } else {
                writeln!(out, "{}", outcome(&delivery))?;
            }
            if delivery.state != "delivered" {
                code = 1;
            }
        }
        WebhookCommand::Deliveries { id, limit, json } => {
            let path = format!(
                "/v1/webhooks/{}/deliveries?limit={limit}",
                path_segment(&id)
            );
            let raw: serde_json::Value = client
                .json(Method::GET, &path, None::<&()>, "a delivery list")
                .await?;
            if json {
                crate::output::json(&mut out, &raw)?;
            } else {
                let list: DeliveryList =
                    serde_json::from_value(raw).context("bad delivery list from the daemon")?;
                out.write_all(delivery_table(&list.deliveries).as_bytes())?;
            }
        }
    }
    out.flush().context("writing to stdout")?;
    Ok(code)
}

/// One line on how a delivery's last attempt went.
fn outcome(d: &DeliveryView) -> String {
    match (d.state.as_str(), d.attempts) {
        ("delivered", _) => format!(
            "delivered {} ({}): the receiver answered {}",
            d.id,
            d.event,
            d.last_status.map_or("2xx".to_owned(), |s| s.to_string())
        ),
        (_, 0) => format!("{} not attempted yet: see `berth webhook deliveries`", d.id),
        _ => format!(
            "{} not delivered ({}): {}",
            d.id,
            d.state,
            d.last_error.as_deref().unwrap_or("no answer")
        ),
    }
}

fn delivery_table(deliveries: &[DeliveryView]) -> String {
    let rows: Vec<Vec<String>> = deliveries
        .iter()
        .map(|d| {
            vec![
                d.id.clone(),
                d.event.clone(),
                d.state.clone(),
                d.attempts.to_string(),
                d.last_status.map(|s| s.to_string()).unwrap_or_default(),
                d.last_error.clone().unwrap_or_default(),
                d.created_at.clone(),
            ]
        })
        .collect();
    table(
        &[
            "ID", "EVENT", "STATE", "ATTEMPTS", "STATUS", "ERROR", "CREATED",
        ],
        &rows,
    )
}
