//! `berth cluster init|token|tokens|revoke-token`: the cluster's certificate authority and
//! the one-time tokens new nodes join with. Run on an API host: these act on the CA's
//! directory and on the store directly, with no daemon in between (the store is found as
//! `berth up` finds it: `--store`, else `[store]` in the host config, else the data dir).

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use berth_server::cluster::ca::{ClusterCa, CA_CERT_FILE, CA_KEY_FILE};
use clap::{Args, Subcommand};
use time::format_description::well_known::Rfc3339;

use crate::table::table;

#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// Make the cluster's certificate authority: DIR/ca.crt and DIR/ca.key (mode 0600).
    /// Refuses when DIR already holds one. Copy DIR to each API host; nodes never need it.
    Init {
        /// Where the CA's files go (created 0700 if missing).
        #[arg(long, value_name = "DIR")]
        dir: PathBuf,
    },
    /// Make a one-time token a new `berth node` joins with: printed alone on stdout, its
    /// expiry on stderr. Only its hash is stored.
    Token {
        /// How many nodes it admits.
        #[arg(long, value_name = "N", default_value_t = 1,
              value_parser = clap::value_parser!(u32).range(1..))]
        uses: u32,
        /// How long it is valid: seconds, or 90s, 30m, 24h, 7d.
        #[arg(long, value_name = "DURATION", default_value = "1h", value_parser = parse_ttl)]
        ttl: Duration,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// List the join tokens not yet used up (ID, USES LEFT, EXPIRES); never their secrets.
    #[command(visible_alias = "token-ls")]
    Tokens {
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Revoke a join token at once: no node joins with it any more.
    RevokeToken {
        /// The token's id: the part before the dot (`berth cluster tokens` lists them).
        id: String,
        #[command(flatten)]
        store: StoreArgs,
    },
}

/// The store, as `berth up` opens it.
#[derive(Debug, Args)]
pub struct StoreArgs {
    /// The database: postgres://USER@HOST:PORT/DB or sqlite:PATH; default: [store] url in
    /// the host config, else <data dir>/berth.db. The password never goes in the URL:
    /// [store] password_file, $BERTH_STORE_PASSWORD or $PGPASSWORD (docs/config.md).
    #[arg(long, value_name = "URL")]
    store: Option<String>,
    /// The host config file ([store] url, password_file); default: <data dir>/berth.toml
    /// when it exists.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
}

impl StoreArgs {
    fn open(&self, data_dir: &Path) -> anyhow::Result<berth_store::Store> {
        let host =
            crate::cmd_up::host_config(self.config.as_deref(), self.store.as_deref(), data_dir)?;
        let location = host.store.location(data_dir)?;
        let store = host
            .store
            .open(&location)
            .with_context(|| format!("opening the store at {}", location.describe().display()))?;
        Ok(store)
    }
}

fn parse_ttl(raw: &str) -> Result<Duration, String> {
    match crate::args::parse_duration_s(raw)? {
        0 => Err("a token valid for no time admits nothing; give a duration like 1h".into()),
        secs => Ok(Duration::from_secs(secs)),
    }
}

fn rfc3339(t: time::OffsetDateTime) -> String {
    t.format(&Rfc3339).unwrap_or_else(|_| t.to_string())
}

pub fn run(command: ClusterCommand, data_dir: &Path) -> anyhow::Result<u8> {
    let mut out = std::io::stdout().lock();
    match command {
        ClusterCommand::Init { dir } => {
            ClusterCa::init(&dir)?;
            writeln!(
                out,
                "made the cluster CA in {dir}: {cert} (every node and API replica trusts it) \
                 and {key} (mode 0600).\n\
                 {key} must stay secret: only API replicas hold it (copy {dir} to each API \
                 host); a node never needs it, and anyone with it can join machines to the \
                 cluster.",
                dir = dir.display(),
                cert = CA_CERT_FILE,
                key = CA_KEY_FILE,
            )?;
        }
        ClusterCommand::Token { uses, ttl, store } => {
            let store = store.open(data_dir)?;
            let token = store.create_join_token(uses, ttl)?;
            let id = token.split_once('.').map_or(token.as_str(), |(id, _)| id);
            let expires = store
                .list_join_tokens()?
                .into_iter()
                .find(|t| t.id == id)
                .map(|t| rfc3339(t.expires_at));
            writeln!(out, "{token}")?;
            let admits = match uses {
                1 => "1 node".to_owned(),
                n => format!("{n} nodes"),
            };
            eprintln!(
                "join token {id} admits {admits} until {} (the store's clock); give it to \
                 `berth node` on the new machine",
                expires.as_deref().unwrap_or("its expiry"),
            );
        }
        ClusterCommand::Tokens { store } => {
            let store = store.open(data_dir)?;
            let rows: Vec<Vec<String>> = store
                .list_join_tokens()?
                .into_iter()
                .map(|t| {
                    let expires = rfc3339(t.expires_at);
                    vec![
                        t.id,
                        t.uses_left.to_string(),
                        if t.expired {
                            format!("{expires} (expired)")
                        } else {
                            expires
                        },
                    ]
                })
                .collect();
            out.write_all(table(&["ID", "USES LEFT", "EXPIRES"], &rows).as_bytes())?;
        }
        ClusterCommand::RevokeToken { id, store } => {
            let store = store.open(data_dir)?;
            if !store.revoke_join_token(&id)? {
                anyhow::bail!(
                    "no join token {id:?} (it was used up, revoked or swept after expiring); \
                     `berth cluster tokens` lists those left"
                );
            }
            writeln!(out, "join token {id} revoked")?;
        }
    }
    out.flush().context("writing to stdout")?;
    Ok(0)
}
