//! `berth node`: run this machine as a node of a cluster (its boxes, runtimes, egress and
//! volumes; no public API), and `berth node ls`: the cluster's nodes.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;
use berth_server::cluster::role::NodeConfig;
use berth_server::cluster::role::RoleConfig;
use clap::{Args, Subcommand};

use crate::client::Client;

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
#[command(after_help = "\
A node registers itself in the shared database (--store), renews a lease every 2 s (a \
node silent for 10 s is taken for gone: its queued work fails with that reason), and does \
the work API replicas queue for its boxes. It answers API replicas only, over mutual TLS \
with certificates of the cluster's CA: on its first start it joins with a one-time token \
(`berth cluster token`), sends a certificate request to --join and keeps the certificate \
in <data dir>/cluster/. See docs/cluster.md.")]
pub struct NodeArgs {
    #[command(subcommand)]
    pub command: Option<NodeCommand>,
    #[command(flatten)]
    pub run: NodeRunArgs,
}

#[derive(Debug, Subcommand)]
pub enum NodeCommand {
    /// List the cluster's nodes: address, lease age, boxes, free CPU and memory, state.
    Ls {
        /// Print the API's JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Empty a node for maintenance: it takes no new boxes, and each of its boxes moves to
    /// another node once asleep and copied (needs `[storage] url`; docs/durable.md).
    Drain {
        /// The node's name or id (`berth node ls`).
        node: String,
        /// Stop its running boxes now (each is copied, then moved) instead of at their next
        /// sleep.
        #[arg(long)]
        now: bool,
        /// Print the node as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Take a dead node's boxes to other nodes now, from their copies, without waiting for
    /// the failover (refused while the node's lease runs: drain a live node instead).
    Expunge {
        /// The node's name or id (`berth node ls`).
        node: String,
        /// Print the node as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// `berth node drain|expunge`: the call, and the node as it is after it.
pub async fn operate(
    client: &Client,
    node: &str,
    action: &str,
    body: serde_json::Value,
    json: bool,
) -> anyhow::Result<()> {
    let path = format!("/v1/nodes/{}/{action}", crate::client::path_segment(node));
    let view: serde_json::Value = client
        .json(http::Method::POST, &path, Some(&body), "the node")
        .await?;
    if json {
        return crate::output::json(&mut std::io::stdout().lock(), &view);
    }
    let boxes = view["boxes"].as_u64().unwrap_or(0);
    match action {
        "drain" => println!(
            "{node} is draining: {boxes} boxes to move (each once asleep and copied; `berth node ls` shows how many are left)"
        ),
        _ => println!("{node} expunged: its boxes start on other nodes from their copies ({boxes} left on it)"),
    }
    Ok(())
}

#[derive(Debug, Args)]
pub struct NodeRunArgs {
    /// The cluster's database: postgres://USER@HOST:PORT/DB (the password from
    /// $BERTH_STORE_PASSWORD, $PGPASSWORD or [store] password_file, never the URL).
    #[arg(long, value_name = "URL")]
    pub store: Option<String>,
    /// Where API replicas reach this node (mutual TLS).
    #[arg(long, value_name = "ADDR", default_value = "0.0.0.0:7443")]
    pub listen: SocketAddr,
    /// The address API replicas dial, host:port [default: --listen, which must then not
    /// be a wildcard address].
    #[arg(long, value_name = "HOST:PORT")]
    pub advertise: Option<String>,
    /// A plain-HTTP address that answers GET /v1/health only (for an orchestrator's probe).
    #[arg(long, value_name = "ADDR")]
    pub status_listen: Option<SocketAddr>,
    /// The node's name, unique in the cluster [default: this machine's host name].
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// A label boxes can ask for (`--label node/KEY=VALUE` on a box); repeat for more.
    #[arg(long = "label", value_name = "KEY=VALUE")]
    pub labels: Vec<String>,
    /// An API replica's URL to join through on the first start.
    #[arg(long, value_name = "URL")]
    pub join: Option<String>,
    /// A file holding the one-time join token (`berth cluster token`).
    #[arg(long, value_name = "FILE")]
    pub join_token_file: Option<PathBuf>,
    /// The cluster CA's certificate (ca.crt): checked against what --join answers.
    #[arg(long, value_name = "FILE")]
    pub cluster_ca: Option<PathBuf>,
    /// The OCI runtime that runs the boxes: runc, crun or runsc.
    #[arg(long, value_name = "RUNTIME", default_value = "runc")]
    pub oci_runtime: String,
    /// The runtime of boxes created without `--runtime` must work here.
    #[arg(long, value_name = "R", default_value = "sandbox", value_parser = ["sandbox", "qemu", "firecracker"])]
    pub runtime: String,
    /// The host config file [default: <data dir>/berth.toml when it exists].
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    #[arg(long, value_name = "FORMAT", value_enum, default_value_t = crate::logging::LogFormat::Text)]
    pub log_format: crate::logging::LogFormat,
}

/// `berth node ls`.
pub async fn list(client: &Client, json: bool) -> anyhow::Result<()> {
    let list: serde_json::Value = client
        .json(http::Method::GET, "/v1/nodes", None::<&()>, "the node list")
        .await?;
    let nodes = list["nodes"].as_array().cloned().unwrap_or_default();
    if json {
        crate::output::json(&mut std::io::stdout().lock(), &list)?;
        return Ok(());
    }
    if nodes.is_empty() {
        println!("no nodes: this is a single host (`berth node` adds machines; docs/cluster.md)");
        return Ok(());
    }
    let mut rows = Vec::new();
    for n in &nodes {
        let state = match (n["live"].as_bool(), n["state"].as_str()) {
            (Some(false), _) => "gone".to_owned(),
            (_, Some(state)) => state.to_owned(),
            _ => "?".to_owned(),
        };
        rows.push(vec![
            n["name"].as_str().unwrap_or("").to_owned(),
            n["address"].as_str().unwrap_or("").to_owned(),
            state,
            format!(
                "{:.1}s ago",
                n["lease_age_ms"].as_i64().unwrap_or(0) as f64 / 1000.0
            ),
            n["boxes"].to_string(),
            format!(
                "{:.1}/{}",
                n["free_cpus"].as_f64().unwrap_or(0.0),
                n["cpus"].as_f64().unwrap_or(0.0)
            ),
            format!(
                "{}/{} MiB",
                n["free_memory_mib"].as_u64().unwrap_or(0),
                n["memory_mib"].as_u64().unwrap_or(0)
            ),
        ]);
    }
    let header = [
        "NAME",
        "ADDRESS",
        "STATE",
        "LEASE",
        "BOXES",
        "FREE CPU",
        "FREE MEMORY",
    ];
    print!("{}", crate::table::table(&header, &rows));
    Ok(())
}

/// `berth node`: runs the node until SIGINT or SIGTERM.
pub fn run(args: NodeRunArgs, data_dir: PathBuf) -> anyhow::Result<()> {
    crate::cmd_up::run_daemon(args.log_format, serve(args, data_dir))
}

async fn serve(args: NodeRunArgs, data_dir: PathBuf) -> anyhow::Result<()> {
    let shutdown =
        crate::cmd_up::shutdown_signal().context("installing the SIGINT/SIGTERM handlers")?;
    let host =
        crate::cmd_up::host_config(args.config.as_deref(), args.store.as_deref(), &data_dir)?;
    if host.store.url.is_none() {
        anyhow::bail!("a node needs the cluster's database: --store postgres://USER@HOST:PORT/DB (or [store] url in berth.toml)");
    }
    host.store.location(&data_dir)?;
    let name = match &args.name {
        Some(name) => name.clone(),
        None => crate::cmd_up::host_name()?,
    };
    let advertise = match &args.advertise {
        Some(advertise) => advertise.clone(),
        None if args.listen.ip().is_unspecified() => anyhow::bail!(
            "--listen {} is every address: say which one API replicas dial with --advertise HOST:PORT",
            args.listen
        ),
        None => args.listen.to_string(),
    };
    let labels = parse_labels(&args.labels)?;
    let tls = node_tls(&args, &data_dir, &name).await?;
    let runtimes =
        crate::cmd_up::probe_runtimes(&data_dir, &args.oci_runtime, &args.runtime, false).await?;
    let config = berth_server::ServerConfig {
        data_dir: data_dir.clone(),
        listen: args.listen,
        runtimes,
        idle_check: berth_server::config::DEFAULT_IDLE_CHECK,
        host,
        tls: None,
        public_url: None,
        role: RoleConfig::Node {
            node: NodeConfig {
                name,
                advertise,
                labels,
            },
            tls,
            status_listen: args.status_listen,
        },
    };
    let server = berth_server::Server::bind(config)
        .await
        .context("starting the node")?;
    server
        .serve(shutdown)
        .await
        .context("serving API replicas")?;
    tracing::info!("berth node stopped");
    Ok(())
}

fn parse_labels(raw: &[String]) -> anyhow::Result<BTreeMap<String, String>> {
    raw.iter()
        .map(|label| {
            let (key, value) = label
                .split_once('=')
                .with_context(|| format!("--label {label:?} is not KEY=VALUE"))?;
            anyhow::ensure!(!key.is_empty(), "--label {label:?} has an empty key");
            Ok((key.to_owned(), value.to_owned()))
        })
        .collect()
}

/// The node's TLS: its certificate from an earlier join, else a join now.
async fn node_tls(
    args: &NodeRunArgs,
    data_dir: &Path,
    name: &str,
) -> anyhow::Result<Arc<rustls::ServerConfig>> {
    use berth_server::cluster::join;
    let dir = data_dir.join(join::CLUSTER_DIR);
    let identity = match join::NodeIdentity::load_or_none(&dir)? {
        Some(identity) => identity,
        None => {
            let (Some(url), Some(token_file)) = (&args.join, &args.join_token_file) else {
                anyhow::bail!(
                    "this node has no certificate in {} yet: join with --join URL --join-token-file FILE (`berth cluster token` makes one)",
                    dir.display()
                );
            };
            let token = std::fs::read_to_string(token_file)
                .with_context(|| format!("reading the join token from {}", token_file.display()))?;
            let (key_pem, csr_pem) = join::make_csr(name)?;
            let request = join::JoinRequest {
                token: token.trim().to_owned(),
                node_name: name.to_owned(),
                csr_pem,
            };
            let target = crate::target::Target::anonymous(url)?;
            let answer: join::JoinResponse = Client::new(target)
                .json(
                    http::Method::POST,
                    "/v1/cluster/join",
                    Some(&request),
                    "the join answer",
                )
                .await
                .context("joining the cluster")?;
            if let Some(ca) = &args.cluster_ca {
                let expected = std::fs::read_to_string(ca)
                    .with_context(|| format!("reading {}", ca.display()))?;
                anyhow::ensure!(
                    expected.trim() == answer.ca_pem.trim(),
                    "{url} answered with a CA other than {}: not joining",
                    ca.display()
                );
            }
            join::NodeIdentity::save(&dir, &key_pem, &answer.cert_pem, &answer.ca_pem)?;
            tracing::info!(node = %name, dir = %dir.display(), "joined the cluster");
            join::NodeIdentity::load_or_none(&dir)?
                .context("the certificate just saved cannot be read back")?
        }
    };
    Ok(Arc::new(berth_server::cluster::mtls::node_server_config(
        &identity,
    )?))
}
