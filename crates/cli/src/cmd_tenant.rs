//! `berth tenant create|update|ls` (admin key needed), `berth tenant show` and `berth tenant
//! key add|ls|rm|rotate` (the admin for any tenant, a tenant for its own).

use std::io::Write as _;
use std::str::FromStr;

use anyhow::Context as _;
use clap::{Args, Subcommand};
use http::Method;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use berth_server::api::tenants::WEB_SESSIONS_ENDED;

use crate::client::{path_segment, Client};
use crate::table::table;

#[derive(Debug, Subcommand)]
pub enum TenantCommand {
    /// Create a tenant and print its id and its API key. The key is shown only this once
    /// (berth keeps only its hash); a tenant's key sees only that tenant's boxes.
    Create {
        /// The tenant's name.
        name: String,
        #[command(flatten)]
        quota: QuotaArgs,
        /// Print the daemon's raw JSON answer.
        #[arg(long)]
        json: bool,
    },
    /// Change a tenant's quota: each limit given is set (`none` removes it), the others
    /// stay. A limit below what the tenant uses refuses only what would take more.
    Update {
        /// The tenant's name or id.
        tenant: String,
        #[command(flatten)]
        quota: QuotaArgs,
        /// Print the daemon's raw JSON answer.
        #[arg(long)]
        json: bool,
    },
    /// List tenants with their usage and quota (USED/MAX; `-` is no limit).
    #[command(visible_alias = "list")]
    Ls {
        /// Print the daemon's raw JSON answer instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Show one tenant's usage and quota (the admin for any tenant, a tenant for its own).
    Show {
        /// The tenant's name or id.
        tenant: String,
        /// Print the daemon's raw JSON answer instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// A tenant's API keys: several per tenant, listable, revocable and rotatable.
    #[command(subcommand)]
    Key(KeyCommand),
}

#[derive(Debug, Subcommand)]
pub enum KeyCommand {
    /// Add an API key and print it (shown only this once).
    Add {
        /// The tenant's name or id.
        tenant: String,
        /// An admin key (admin key needed).
        #[arg(long)]
        admin: bool,
        /// Print the daemon's raw JSON answer.
        #[arg(long)]
        json: bool,
    },
    /// List a tenant's keys (ID, PREFIX, ADMIN, CREATED, LAST USED); never the keys.
    #[command(visible_alias = "list")]
    Ls {
        /// The tenant's name or id.
        tenant: String,
        /// Print the daemon's raw JSON answer instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Revoke a key: the next request made with it is refused, and the browsers it signed
    /// in to the web app are signed out (with any of the tenant's signed in before berth
    /// recorded which key signed a browser in); says how many.
    #[command(visible_alias = "delete")]
    Rm {
        /// The tenant's name or id.
        tenant: String,
        /// The key's id (`key_…`, from `berth tenant key ls`).
        key_id: String,
        /// Print `{"revoked": KEY_ID, "web_sessions_ended": N}` instead of a sentence.
        #[arg(long)]
        json: bool,
    },
    /// Add a key like KEY_ID (admin or not) and print it; the old key keeps working until
    /// `berth tenant key rm` (or --revoke-old, which signs out its browsers as rm does),
    /// so clients can move over first.
    Rotate {
        /// The tenant's name or id.
        tenant: String,
        /// The key to replace.
        key_id: String,
        /// Revoke the old key right after the new one is made.
        #[arg(long)]
        revoke_old: bool,
        /// Print the daemon's JSON answer for the new key, with `"revoked_old"` (and
        /// `"web_sessions_ended"` when revoked), instead of text.
        #[arg(long)]
        json: bool,
    },
}

/// A limit on the command line: a number, or `none` for no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Limit(Option<u64>);

impl FromStr for Limit {
    type Err = String;
    fn from_str(s: &str) -> Result<Limit, String> {
        match s {
            "none" => Ok(Limit(None)),
            _ => s
                .parse()
                .map(|n| Limit(Some(n)))
                .map_err(|_| format!("{s:?} is not a whole number or `none`")),
        }
    }
}

/// A tenant's limits; absent ones are left as they are.
#[derive(Debug, Args, Serialize)]
pub struct QuotaArgs {
    /// Boxes in any state (a number, or `none`).
    #[arg(long, value_name = "N")]
    #[serde(skip_serializing_if = "Option::is_none")]
    max_boxes: Option<Limit>,
    /// Boxes running (or starting, paused, stopping) at once.
    #[arg(long, value_name = "N")]
    #[serde(skip_serializing_if = "Option::is_none")]
    max_running: Option<Limit>,
    /// The sum of its boxes' memory limits, in MiB.
    #[arg(long, value_name = "MIB")]
    #[serde(skip_serializing_if = "Option::is_none")]
    max_memory_mib: Option<Limit>,
    /// The sum of its boxes' volume sizes, in MiB.
    #[arg(long, value_name = "MIB")]
    #[serde(skip_serializing_if = "Option::is_none")]
    max_disk_mib: Option<Limit>,
}

#[derive(Debug, Serialize)]
struct CreateBody<'a> {
    name: &'a str,
    #[serde(flatten)]
    quota: &'a QuotaArgs,
}

#[derive(Debug, Serialize)]
struct AddKeyBody {
    admin: bool,
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
    #[serde(default)]
    quota: Counts,
    #[serde(default)]
    usage: Counts,
}

/// Quota and usage share their shape (`max_boxes` ↔ `boxes`, …).
#[derive(Debug, Default, Deserialize)]
struct Counts {
    #[serde(default, alias = "max_boxes")]
    boxes: Option<u64>,
    #[serde(default, alias = "max_running")]
    running: Option<u64>,
    #[serde(default, alias = "max_memory_mib")]
    memory_mib: Option<u64>,
    #[serde(default, alias = "max_disk_mib")]
    disk_mib: Option<u64>,
}

#[derive(Debug, Deserialize)]
struct TenantList {
    tenants: Vec<TenantView>,
}

#[derive(Debug, Deserialize)]
struct KeyView {
    id: String,
    prefix: Option<String>,
    admin: bool,
    created_at: String,
    last_used_at: Option<String>,
}

#[derive(Debug, Deserialize)]
struct KeyList {
    keys: Vec<KeyView>,
}

#[derive(Debug, Deserialize)]
struct NewKey {
    key: KeyView,
    api_key: String,
}

pub async fn run(client: &Client, command: TenantCommand) -> anyhow::Result<u8> {
    let mut out = std::io::stdout().lock();
    match command {
        TenantCommand::Create { name, quota, json } => {
            let body = CreateBody {
                name: &name,
                quota: &quota,
            };
            let raw = client
                .json(Method::POST, "/v1/tenants", Some(&body), "a new tenant")
                .await?;
            print(&mut out, raw, json, "a tenant", created_text)?;
        }
        TenantCommand::Update {
            tenant,
            quota,
            json,
        } => {
            let path = format!("/v1/tenants/{}", path_segment(&tenant));
            let raw = client
                .json(Method::PATCH, &path, Some(&quota), "a tenant")
                .await?;
            print(&mut out, raw, json, "a tenant", |view: &TenantView| {
                tenant_table(std::slice::from_ref(view))
            })?;
        }
        TenantCommand::Show { tenant, json } => {
            let path = format!("/v1/tenants/{}", path_segment(&tenant));
            let raw = client
                .json(Method::GET, &path, None::<&()>, "a tenant")
                .await?;
            print(&mut out, raw, json, "a tenant", |view: &TenantView| {
                tenant_table(std::slice::from_ref(view))
            })?;
        }
        TenantCommand::Ls { json } => {
            let raw = client
                .json(Method::GET, "/v1/tenants", None::<&()>, "a tenant list")
                .await?;
            print(&mut out, raw, json, "a tenant list", |list: &TenantList| {
                tenant_table(&list.tenants)
            })?;
        }
        TenantCommand::Key(command) => run_key(client, &mut out, command).await?,
    }
    out.flush().context("writing to stdout")?;
    Ok(0)
}

async fn run_key(
    client: &Client,
    out: &mut impl std::io::Write,
    command: KeyCommand,
) -> anyhow::Result<()> {
    let keys_path = |tenant: &str| format!("/v1/tenants/{}/keys", path_segment(tenant));
    match command {
        KeyCommand::Add {
            tenant,
            admin,
            json,
        } => {
            let raw = client
                .json(
                    Method::POST,
                    &keys_path(&tenant),
                    Some(&AddKeyBody { admin }),
                    "a new key",
                )
                .await?;
            print(out, raw, json, "a key", new_key_text)?;
        }
        KeyCommand::Ls { tenant, json } => {
            let raw = client
                .json(Method::GET, &keys_path(&tenant), None::<&()>, "a key list")
                .await?;
            print(out, raw, json, "a key list", |list: &KeyList| {
                key_table(&list.keys)
            })?;
        }
        KeyCommand::Rm {
            tenant,
            key_id,
            json,
        } => {
            let ended = revoke(client, &keys_path(&tenant), &key_id).await?;
            if json {
                let mut answer = serde_json::json!({ "revoked": key_id });
                if let Some(ended) = ended {
                    answer["web_sessions_ended"] = ended.into();
                }
                crate::output::json(out, &answer)?;
            } else {
                writeln!(out, "{}", revoked_text(&key_id, ended))?;
            }
        }
        KeyCommand::Rotate {
            tenant,
            key_id,
            revoke_old,
            json,
        } => {
            let list: KeyList = client
                .json(Method::GET, &keys_path(&tenant), None::<&()>, "a key list")
                .await?;
            let old = list
                .keys
                .iter()
                .find(|k| k.id == key_id)
                .with_context(|| format!("tenant {tenant} has no key {key_id}"))?;
            let mut raw: serde_json::Value = client
                .json(
                    Method::POST,
                    &keys_path(&tenant),
                    Some(&AddKeyBody { admin: old.admin }),
                    "a new key",
                )
                .await?;
            if json {
                if revoke_old {
                    let ended = revoke(client, &keys_path(&tenant), &key_id).await?;
                    if let Some(ended) = ended {
                        raw["web_sessions_ended"] = ended.into();
                    }
                }
                raw["revoked_old"] = serde_json::Value::Bool(revoke_old);
                return crate::output::json(out, &raw);
            }
            let new: NewKey =
                serde_json::from_value(raw).context("the daemon's answer is not a new key")?;
            out.write_all(new_key_text(&new).as_bytes())?;
            if revoke_old {
                let ended = revoke(client, &keys_path(&tenant), &key_id).await?;
                writeln!(out, "{}", revoked_text(&key_id, ended))?;
            } else {
                writeln!(
                    out,
                    "key {key_id} still works: revoke it with `berth tenant key rm {tenant} {key_id}`"
                )?;
            }
        }
    }
    Ok(())
}

/// Writes the daemon's answer: as it came (pretty JSON) with `--json`, else `text` of it.
fn print<T: DeserializeOwned>(
    out: &mut impl std::io::Write,
    raw: serde_json::Value,
    json: bool,
    what: &str,
    text: impl FnOnce(&T) -> String,
) -> anyhow::Result<()> {
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(&raw)?)?;
    } else {
        let value: T = serde_json::from_value(raw)
            .with_context(|| format!("the daemon's answer is not {what}"))?;
        out.write_all(text(&value).as_bytes())?;
    }
    Ok(())
}

/// Revokes the key; how many browser sessions that ended (`None`: a daemon from before
/// it said).
async fn revoke(client: &Client, keys_path: &str, key_id: &str) -> anyhow::Result<Option<u64>> {
    let path = format!("{keys_path}/{}", path_segment(key_id));
    let response = client
        .send(
            Method::DELETE,
            &path,
            "application/json",
            None,
            None,
            crate::client::empty(),
        )
        .await?;
    Ok(response
        .headers()
        .get(WEB_SESSIONS_ENDED)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok()))
}

/// What `rm` and `rotate --revoke-old` say of a revoked key.
fn revoked_text(key_id: &str, ended: Option<u64>) -> String {
    match ended {
        None => format!("key {key_id} revoked"),
        Some(0) => format!("key {key_id} revoked; it had signed in no browser"),
        Some(n) => format!(
            "key {key_id} revoked; {n} web session{} ended (browsers signed in with it, and \
             any of the tenant's signed in before berth recorded which key signed a browser \
             in: they sign in again)",
            if n == 1 { "" } else { "s" }
        ),
    }
}

fn created_text(created: &Created) -> String {
    format!(
        "tenant {} ({})\napi key (shown only this once): {}\n",
        created.tenant.name, created.tenant.id, created.api_key
    )
}

fn new_key_text(new: &NewKey) -> String {
    format!(
        "key {}{}\napi key (shown only this once): {}\n",
        new.key.id,
        if new.key.admin { " (admin)" } else { "" },
        new.api_key
    )
}

/// `used/max`, `-` for no limit.
fn used_of(used: Option<u64>, max: Option<u64>) -> String {
    let max = max.map_or_else(|| "-".to_owned(), |m| m.to_string());
    format!("{}/{max}", used.unwrap_or(0))
}

fn tenant_table(tenants: &[TenantView]) -> String {
    let rows: Vec<Vec<String>> = tenants
        .iter()
        .map(|t| {
            let (u, q) = (&t.usage, &t.quota);
            vec![
                t.name.clone(),
                t.id.clone(),
                used_of(u.boxes, q.boxes),
                used_of(u.running, q.running),
                used_of(u.memory_mib, q.memory_mib),
                used_of(u.disk_mib, q.disk_mib),
            ]
        })
        .collect();
    table(
        &["NAME", "ID", "BOXES", "RUNNING", "MEMORY MIB", "DISK MIB"],
        &rows,
    )
}

fn key_table(keys: &[KeyView]) -> String {
    let rows: Vec<Vec<String>> = keys
        .iter()
        .map(|k| {
            vec![
                k.id.clone(),
                k.prefix.clone().unwrap_or_else(|| "-".into()),
                if k.admin { "yes" } else { "no" }.into(),
                k.created_at.clone(),
                k.last_used_at.clone().unwrap_or_else(|| "never".into()),
            ]
        })
        .collect();
    table(&["ID", "PREFIX", "ADMIN", "CREATED", "LAST USED"], &rows)
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

    #[test]
    fn limits_are_numbers_or_none_and_only_given_ones_are_sent() {
        assert_eq!("12".parse::<Limit>(), Ok(Limit(Some(12))));
        assert_eq!("none".parse::<Limit>(), Ok(Limit(None)));
        assert!("-1".parse::<Limit>().is_err());
        let quota = QuotaArgs {
            max_boxes: Some(Limit(Some(3))),
            max_running: Some(Limit(None)),
            max_memory_mib: None,
            max_disk_mib: None,
        };
        assert_eq!(
            serde_json::to_value(&quota).unwrap(),
            serde_json::json!({"max_boxes": 3, "max_running": null})
        );
        let body = CreateBody {
            name: "acme",
            quota: &quota,
        };
        assert_eq!(
            serde_json::to_value(&body).unwrap(),
            serde_json::json!({"name": "acme", "max_boxes": 3, "max_running": null})
        );
    }

    #[test]
    fn the_tenant_table_shows_used_over_max() {
        let view: TenantView = serde_json::from_value(serde_json::json!({
            "id": "tn_1", "name": "acme",
            "quota": {"max_boxes": 3, "max_running": null, "max_memory_mib": 2048, "max_disk_mib": null},
            "usage": {"boxes": 2, "running": 1, "memory_mib": 1024, "disk_mib": 4096}
        }))
        .unwrap();
        let text = tenant_table(&[view]);
        assert!(
            text.contains("2/3")
                && text.contains("1/-")
                && text.contains("1024/2048")
                && text.contains("4096/-"),
            "{text}"
        );
    }
}
