//! `berth tenant create NAME`: a tenant and its API key (admin key needed).

use std::io::Write as _;

use anyhow::Context as _;
use clap::Subcommand;
use http::Method;
use serde::{Deserialize, Serialize};

use crate::client::Client;

#[derive(Debug, Subcommand)]
pub enum TenantCommand {
    /// Create a tenant and print its id and its API key. The key is shown only this once
    /// (berth keeps only its hash); a tenant's key sees only that tenant's boxes.
    Create {
        /// The tenant's name.
        name: String,
        /// Print the daemon's raw JSON answer.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Serialize)]
struct CreateBody<'a> {
    name: &'a str,
}

#[derive(Debug, Deserialize)]
struct Created {
    tenant: TenantView,
    api_key: String,
}

#[derive(Debug, Deserialize)]
struct TenantView {
    id: String,
    name: String,
}

pub async fn run(client: &Client, command: TenantCommand) -> anyhow::Result<u8> {
    let mut out = std::io::stdout().lock();
    match command {
        TenantCommand::Create { name, json } => {
            let body = CreateBody { name: &name };
            let raw: serde_json::Value = client
                .json(Method::POST, "/v1/tenants", Some(&body), "a new tenant")
                .await?;
            if json {
                writeln!(out, "{}", serde_json::to_string_pretty(&raw)?)?;
            } else {
                let created: Created =
                    serde_json::from_value(raw).context("the daemon's answer is not a tenant")?;
                out.write_all(created_text(&created).as_bytes())?;
            }
        }
    }
    out.flush().context("writing to stdout")?;
    Ok(0)
}

fn created_text(created: &Created) -> String {
    format!(
        "tenant {} ({})\napi key (shown only this once): {}\n",
        created.tenant.name, created.tenant.id, created.api_key
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_is_printed_with_the_id() {
        let created: Created = serde_json::from_value(serde_json::json!({
            "tenant":{"id":"tn_1","name":"acme"},"api_key":"berth_k"
        }))
        .unwrap();
        assert_eq!(
            created_text(&created),
            "tenant acme (tn_1)\napi key (shown only this once): berth_k\n"
        );
    }
}
