//! `berth port url|link|links|unlink`: a box's ports through berth. `url` prints where a
//! port is reached with the API key (never put in the URL); `link` makes a share link that
//! opens the port without the key until it expires or is revoked.

use std::io::Write as _;

use anyhow::Context as _;
use clap::Subcommand;
use http::Method;
use serde::Deserialize;

use crate::args::parse_duration_s;
use crate::client::{path_segment, Client};
use crate::table::table;

#[derive(Debug, Subcommand)]
pub enum PortCommand {
    /// Print the URL of a box's port (it needs your API key in `Authorization: Bearer`),
    /// and its own host name's URL when the daemon has `[ports] base_domain`.
    Url {
        /// The box's name or id.
        name: String,
        /// The port a server listens on inside the box (1-65535).
        #[arg(value_parser = clap::value_parser!(u16).range(1..))]
        port: u16,
        /// Print the daemon's JSON answer (`port`, `url`, `host_url`).
        #[arg(long)]
        json: bool,
    },
    /// Make a share link: a URL that opens the port without an API key until it expires
    /// (--ttl) or is revoked (`berth port unlink`). Anyone with the URL gets in: share it
    /// like a password.
    Link {
        name: String,
        #[arg(value_parser = clap::value_parser!(u16).range(1..))]
        port: u16,
        /// How long the link works: seconds, or 90s, 30m, 2h, 7d (10s to 30d).
        #[arg(long, default_value = "1h", value_parser = parse_duration_s)]
        ttl: u64,
        /// Print the daemon's JSON answer (`id`, `url`, `host_url`, `expires_at`, …).
        #[arg(long)]
        json: bool,
    },
    /// List a box's share links (ID, PORT, STATE, EXPIRES); their URLs are never shown
    /// again.
    Links {
        name: String,
        /// Print the daemon's JSON answer instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Revoke a share link: its URL, and every browser it let in, stop at once.
    Unlink {
        name: String,
        /// The link's id (`pl_…`, from `berth port links`).
        id: String,
        /// Print the revoked link as JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Deserialize)]
struct LinkView {
    id: String,
    port: u16,
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    host_url: Option<String>,
    expires_at: String,
    state: String,
}

#[derive(Debug, Deserialize)]
struct LinkList {
    links: Vec<LinkView>,
}

#[derive(Debug, Deserialize)]
struct Urls {
    url: String,
    #[serde(default)]
    host_url: Option<String>,
}

pub async fn run(client: &Client, command: PortCommand) -> anyhow::Result<u8> {
    let mut out = std::io::stdout().lock();
    match command {
        PortCommand::Url { name, port, json } => {
            let path = format!("/v1/boxes/{}/ports?port={port}", path_segment(&name));
            let raw: serde_json::Value = client
                .json(Method::GET, &path, None::<&()>, "port URLs")
                .await?;
            if json {
                crate::output::json(&mut out, &raw)?;
            } else {
                let urls: Urls = serde_json::from_value(raw).context("bad port URLs")?;
                writeln!(out, "{}", urls.url)?;
                if let Some(host_url) = urls.host_url {
                    writeln!(out, "{host_url}")?;
                }
            }
        }
        PortCommand::Link {
            name,
            port,
            ttl,
            json,
        } => {
            let path = format!("/v1/boxes/{}/ports/{port}/links", path_segment(&name));
            let body = serde_json::json!({ "ttl_s": ttl });
            let raw: serde_json::Value = client
                .json(Method::POST, &path, Some(&body), "a share link")
                .await?;
            if json {
                crate::output::json(&mut out, &raw)?;
            } else {
                let link: LinkView = serde_json::from_value(raw).context("bad share link")?;
                writeln!(out, "{}", link.url.unwrap_or_default())?;
                if let Some(host_url) = link.host_url {
                    writeln!(out, "{host_url}")?;
                }
                let mut err = std::io::stderr().lock();
                writeln!(
                    err,
                    "link {} expires {} (revoke: berth port unlink {name} {})",
                    link.id, link.expires_at, link.id
                )?;
            }
        }
        PortCommand::Links { name, json } => {
            let path = format!("/v1/boxes/{}/links", path_segment(&name));
            let raw: serde_json::Value = client
                .json(Method::GET, &path, None::<&()>, "share links")
                .await?;
            if json {
                crate::output::json(&mut out, &raw)?;
            } else {
                let list: LinkList = serde_json::from_value(raw).context("bad share links")?;
                out.write_all(link_table(&list.links).as_bytes())?;
            }
        }
        PortCommand::Unlink { name, id, json } => {
            let path = format!(
                "/v1/boxes/{}/links/{}",
                path_segment(&name),
                path_segment(&id)
            );
            let raw: serde_json::Value = client
                .json(Method::DELETE, &path, None::<&()>, "a revoked link")
                .await?;
            if json {
                crate::output::json(&mut out, &raw)?;
            } else {
                writeln!(out, "link {id} revoked")?;
            }
        }
    }
    out.flush().context("writing to stdout")?;
    Ok(0)
}

fn link_table(links: &[LinkView]) -> String {
    let rows: Vec<Vec<String>> = links
        .iter()
        .map(|l| {
            vec![
                l.id.clone(),
                l.port.to_string(),
                l.state.clone(),
                l.expires_at.clone(),
            ]
        })
        .collect();
    table(&["ID", "PORT", "STATE", "EXPIRES"], &rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    fn parse(argv: &[&str]) -> Result<PortCommand, clap::Error> {
        let mut full = vec!["berth", "port"];
        full.extend_from_slice(argv);
        match crate::Cli::try_parse_from(full)?.command {
            crate::Command::Port(command) => Ok(command),
            other => panic!("not port: {other:?}"),
        }
    }

    #[test]
    fn ttls_take_units_and_ports_are_numbers() {
        match parse(&["link", "web", "8000", "--ttl", "2h"]).unwrap() {
            PortCommand::Link { ttl, port, .. } => assert_eq!((ttl, port), (7200, 8000)),
            other => panic!("{other:?}"),
        }
        match parse(&["link", "web", "8000"]).unwrap() {
            PortCommand::Link { ttl, .. } => assert_eq!(ttl, 3600),
            other => panic!("{other:?}"),
        }
        assert!(parse(&["link", "web", "8000", "--ttl", "soon"]).is_err());
        assert!(parse(&["url", "web", "70000"]).is_err());
    }

    #[test]
    fn the_table_has_no_urls() {
        let list: LinkList = serde_json::from_value(serde_json::json!({"links": [
            {"id": "pl_1", "box_id": "bx_1", "port": 8000, "created_at": "t0",
             "expires_at": "t1", "revoked_at": null, "state": "live"}
        ]}))
        .unwrap();
        assert_eq!(
            link_table(&list.links),
            "ID     PORT   STATE   EXPIRES\npl_1   8000   live    t1\n"
        );
    }
}
