//! What makes a daemon a node: it registers itself (address, this boot's id, capacity,
//! labels, the runtimes that work here), renews its lease every [`RENEW_EVERY`], and does
//! the ops queued for it, woken by the database's notification (and now and then without
//! one: a notification is a hint, the table is the truth).
//!
//! A node that cannot renew for a whole [`LEASE_TTL`] has lost the database: its lease has
//! run out, the API tier takes it for gone and fails its ops, so it claims none until it
//! renews again, and says so in its log and its health answer. With durable copies on, it
//! also stops every box it runs (it fences itself): the API tier moves them to other nodes
//! once the lease has been out a grace period longer. When it renews again it reconciles,
//! dropping what it held of boxes that moved. A node whose row names
//! another boot (a second process with its name) stops for good.

use std::time::{Duration, Instant};

use berth_store::{NodeRegistration, NodeUsage, Op, Store, StoreError};

use crate::cluster::op;
use crate::cluster::remote::OpFailure;
use crate::cluster::role::{NodeConfig, NodeSelf, LEASE_TTL, RENEW_EVERY};
use crate::ctx::Ctx;
use crate::error::ServerError;
use crate::runtimes::Runtimes;
use berth_runtime::error_chain;

/// How many ops a node takes at a time.
const CLAIM_BATCH: u32 = 16;
/// How often a node looks at its queue without a notification.
const CLAIM_EVERY: Duration = Duration::from_secs(1);

/// Registers this node for a new boot: what its earlier boot claimed and left is failed.
pub fn register(
    store: &Store,
    runtimes: &Runtimes,
    config: &NodeConfig,
) -> Result<NodeSelf, ServerError> {
    let mut labels = config.labels.clone();
    for runtime in runtimes.ready() {
        labels.insert(berth_store::runtime_label(runtime.name()), "ready".into());
    }
    let boot_id = hex_id().map_err(ServerError::Store)?;
    let registration = NodeRegistration {
        name: config.name.clone(),
        address: config.advertise.clone(),
        boot_id: boot_id.clone(),
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()) as f64,
        memory_mib: meminfo().0,
        labels,
    };
    let registered = store.register_node(&registration, LEASE_TTL)?;
    tracing::info!(
        node = %config.name,
        node_id = %registered.node.id,
        boot_id = %boot_id,
        address = %config.advertise,
        failed_ops = registered.failed_ops,
        "node registered"
    );
    Ok(NodeSelf::new(
        registered.node.id,
        config.name.clone(),
        boot_id,
    ))
}

fn hex_id() -> Result<String, StoreError> {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).map_err(StoreError::Random)?;
    Ok(berth_basics::hex(&bytes))
}

/// Runs the lease renewal and the op loop until aborted.
pub fn spawn(ctx: Ctx) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        // Aborted with the agent (a daemon dropped in-process, as a crash would end it):
        // a node whose agent is gone must stop renewing its lease.
        let _renewing = Renewing(tokio::spawn(renew_loop(ctx.clone())));
        claim_loop(ctx).await;
    })
}

/// The lease renewal's task, aborted when dropped.
struct Renewing(tokio::task::JoinHandle<()>);

impl Drop for Renewing {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn node(ctx: &Ctx) -> &NodeSelf {
    ctx.role.node().expect("the node agent runs on a node")
}

async fn renew_loop(ctx: Ctx) {
    let mut last_renewed = Instant::now();
    let mut tick = tokio::time::interval(RENEW_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let (store, me) = (ctx.store.clone(), node(&ctx));
        let (id, boot) = (me.id.clone(), me.boot_id.clone());
        let usage = usage();
        // Off the workers, and bounded: a database that does not answer is a lost one.
        let renewal = tokio::time::timeout(
            LEASE_TTL,
            tokio::task::spawn_blocking(move || {
                store.renew_node_lease(&id, &boot, LEASE_TTL, usage)
            }),
        )
        .await;
        let outcome = match renewal {
            Ok(Ok(Ok(()))) => Ok(()),
            Ok(Ok(Err(e @ StoreError::NodeBootMismatch { .. }))) => {
                me.set_fenced(true);
                tracing::error!(node = %me.name, error = %error_chain(&e), "another process registered this node's name: this one takes no more ops; stop it");
                return;
            }
            Ok(Ok(Err(e))) => Err(error_chain(&e)),
            Ok(Err(join)) => Err(join.to_string()),
            Err(_) => Err("the database did not answer".to_owned()),
        };
        match outcome {
            Ok(()) => {
                last_renewed = Instant::now();
                ctx.metrics.lease_renewed(true);
                if me.set_fenced(false) {
                    tracing::warn!(node = %me.name, "lease renewed again: taking ops");
                    // Its boxes were stopped; some may live on other nodes now.
                    let ctx = ctx.clone();
                    tokio::spawn(async move {
                        if let Err(e) = crate::ops::reconcile::reconcile_boxes(&ctx).await {
                            tracing::warn!(error = %error_chain(&e), "cannot reconcile the node's boxes after its lease came back");
                        }
                    });
                }
            }
            Err(reason) => {
                ctx.metrics.lease_renewed(false);
                let silent = last_renewed.elapsed();
                if silent >= LEASE_TTL && me.set_fenced(true) {
                    tracing::error!(node = %me.name, %reason, silent_s = silent.as_secs(), "lost the database: the lease ran out, taking no ops until it is renewed");
                    // With durable copies its boxes start on other nodes: stop them here.
                    if ctx.durable.is_some() {
                        tokio::spawn(fence_boxes(ctx.clone()));
                    }
                } else {
                    tracing::warn!(node = %me.name, %reason, "cannot renew the lease");
                }
            }
        }
    }
}

/// A node whose lease ran out stops every box it runs: the API tier moves them to other
/// nodes once the lease has been out for a grace period (`cluster::failover`), and a box
/// must never run in two places. Straight through the runtimes: the lifecycle writes each
/// change to the database, which is what this node lost. A transition under way (stuck on
/// the database, which answers within seconds or fails) is waited for a little, then not.
async fn fence_boxes(ctx: Ctx) {
    for runtime in ctx.runtimes.ready() {
        let ids = match runtime.list().await {
            Ok(ids) => ids,
            Err(e) => {
                tracing::error!(runtime = runtime.name(), error = %error_chain(&e), "fence: cannot list the runtime's boxes");
                continue;
            }
        };
        for id in ids {
            let lock = ctx.boxes.slot(&id).lifecycle.clone().lock_owned();
            match tokio::time::timeout(FENCE_LOCK_WAIT, lock).await {
                Ok(mut live) => live.end_boot(),
                Err(_) => {
                    tracing::warn!(box_id = %id, "fence: a transition holds the box; stopping it anyway")
                }
            }
            ctx.egress.end(&id);
            match runtime.stop(&id, crate::ctx::STOP_GRACE).await {
                Ok(()) => tracing::warn!(box_id = %id, "fence: box stopped"),
                Err(e) => {
                    tracing::error!(box_id = %id, error = %error_chain(&e), "fence: cannot stop the box")
                }
            }
        }
    }
}

/// How long the fence waits for a box's transition under way.
const FENCE_LOCK_WAIT: Duration = Duration::from_secs(3);

async fn claim_loop(ctx: Ctx) {
    let me = node(&ctx);
    let mut bell = ctx.store.op_bell(&me.id);
    loop {
        tokio::select! {
            () = bell.rung() => {}
            () = tokio::time::sleep(CLAIM_EVERY) => {}
        }
        if me.fenced() {
            continue;
        }
        let (store, id, boot) = (ctx.store.clone(), me.id.clone(), me.boot_id.clone());
        let claimed =
            tokio::task::spawn_blocking(move || store.claim_ops(&id, &boot, CLAIM_BATCH)).await;
        let ops = match claimed {
            Ok(Ok(ops)) => ops,
            Ok(Err(e)) => {
                tracing::warn!(error = %error_chain(&e), "cannot claim ops");
                continue;
            }
            Err(e) => {
                tracing::error!(error = %e, "claiming ops panicked");
                continue;
            }
        };
        for op in ops {
            tokio::spawn(run_op(ctx.clone(), op));
        }
    }
}

/// Does one op and records how it ended.
async fn run_op(ctx: Ctx, claimed: Op) {
    let span = tracing::info_span!("op", op_id = claimed.id, kind = %claimed.kind, box_id = %claimed.box_id);
    let work = async {
        let failure = match op::execute(&ctx, &claimed).await {
            Ok(()) => {
                tracing::info!("op done");
                None
            }
            Err(e) => {
                tracing::info!(error = %error_chain(&e), "op failed");
                Some(serde_json::to_string(&failure_of(e)).expect("a failure serialises"))
            }
        };
        let done = serde_json::json!({});
        let outcome = match &failure {
            None => Ok(&done),
            Some(failure) => Err(failure.as_str()),
        };
        if let Err(e) = ctx
            .store
            .finish_op(claimed.id, &node(&ctx).boot_id, outcome)
        {
            tracing::warn!(error = %error_chain(&e), "cannot record how the op ended");
        }
        op::wake_if_messages_wait(&ctx, &claimed);
    };
    tracing::Instrument::instrument(work, span).await;
}

/// What this machine uses: the load average over a minute, and memory not available.
fn usage() -> NodeUsage {
    let cpus = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0);
    let (total, available) = meminfo();
    NodeUsage {
        cpus,
        memory_mib: total.saturating_sub(available),
    }
}

/// `MemTotal` and `MemAvailable` in MiB.
fn meminfo() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let field = |name: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| {
                rest.trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<u64>()
                    .ok()
            })
            .map_or(0, |kib| kib / 1024)
    };
    (field("MemTotal:"), field("MemAvailable:"))
}

/// How an op failed, as this node's API would have answered the call.
fn failure_of(e: crate::error::OpError) -> OpFailure {
    let e = crate::api::error::ApiError::Op(e);
    let (status, code) = e.status_and_code();
    OpFailure {
        status: status.as_u16(),
        code,
        message: e.message(status),
    }
}
