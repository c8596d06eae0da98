//! The jobs that must run once in a cluster (the wakeup scheduler, E2B sandboxes'
//! lifetimes, webhook deliveries, the chunk store's garbage collection, failing the ops of
//! gone nodes) and the lease that says who runs them. On one host they simply run. On API replicas each replica tries for the
//! lease `jobs` every [`RENEW_EVERY`]; the holder runs the jobs, and a replica that loses
//! it (it could not renew in time) stops them. Every write a job makes that another
//! holder could also make checks the holder's term in its own transaction
//! ([`Jobs::fence`]): a replica that stalled past its lease and wakes believing it still
//! leads writes nothing.

use berth_store::Lease;
use tokio::task::JoinHandle;

use crate::cluster::role::{LEASE_TTL, RENEW_EVERY};
use crate::ctx::Ctx;
use berth_runtime::error_chain;

/// The lease's name in the `leases` table.
pub const JOBS_LEASE: &str = "jobs";

/// The singleton jobs, started together.
fn start_jobs(ctx: &Ctx) -> Vec<JoinHandle<()>> {
    let mut jobs = vec![
        crate::lifecycle::wakeups::spawn(ctx.clone()),
        crate::e2b::lifetime::spawn(ctx.clone()),
        crate::webhooks::worker::spawn(ctx.clone()),
    ];
    // The chunk store's garbage collection, once for all the cluster's copies.
    jobs.extend(ctx.durable.as_ref().map(|durable| durable.spawn_gc()));
    // Boxes of lost nodes start elsewhere from their copies (a cluster's API tier only).
    if ctx.role.api().is_some() && ctx.durable.is_some() {
        jobs.push(crate::cluster::failover::spawn(ctx.clone()));
    }
    jobs
}

/// On one host: the jobs, for the daemon's life.
pub fn spawn_single(ctx: &Ctx) -> Vec<JoinHandle<()>> {
    start_jobs(ctx)
}

/// On an API replica: contends for the lease, runs the jobs while it holds it, and fails
/// the ops of nodes that went silent.
pub fn spawn_api(ctx: Ctx, replica: String) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut running: Vec<JoinHandle<()>> = Vec::new();
        let mut held: Option<Lease> = None;
        let mut tick = tokio::time::interval(RENEW_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let now_held = take_or_renew(&ctx, &replica, held.as_ref()).await;
            match (&held, &now_held) {
                (None, Some(lease)) => {
                    tracing::info!(
                        lease = JOBS_LEASE,
                        term = lease.term,
                        "took the jobs lease: running the cluster's jobs"
                    );
                    ctx.jobs.hold(lease.fence());
                    running = start_jobs(&ctx);
                }
                (Some(lease), None) => {
                    tracing::warn!(
                        lease = JOBS_LEASE,
                        term = lease.term,
                        "lost the jobs lease: stopping the cluster's jobs"
                    );
                    for job in running.drain(..) {
                        job.abort();
                    }
                }
                _ => {}
            }
            held = now_held;
            if held.is_some() {
                fail_ops_of_gone_nodes(&ctx).await;
            }
        }
    })
}

/// The lease after this round: taken, renewed, or `None` (another holds it, or the
/// database did not answer in time).
async fn take_or_renew(ctx: &Ctx, replica: &str, held: Option<&Lease>) -> Option<Lease> {
    let store = ctx.store.clone();
    let (replica, held) = (replica.to_owned(), held.cloned());
    let attempt = tokio::task::spawn_blocking(move || match &held {
        Some(lease) => store
            .renew_lease(&lease.fence(), &replica, LEASE_TTL)
            .map(|renewed| renewed.then(|| lease.clone())),
        None => store.acquire_lease(JOBS_LEASE, &replica, LEASE_TTL),
    });
    // Renewing takes well under a renewal period, or the lease is as good as lost.
    match tokio::time::timeout(RENEW_EVERY, attempt).await {
        Ok(Ok(Ok(lease))) => {
            ctx.metrics.lease_renewed(lease.is_some());
            lease
        }
        Ok(Ok(Err(e))) => {
            ctx.metrics.lease_renewed(false);
            tracing::warn!(error = %error_chain(&e), "cannot take or renew the jobs lease");
            None
        }
        Ok(Err(_)) | Err(_) => {
            ctx.metrics.lease_renewed(false);
            tracing::warn!("the database did not answer for the jobs lease in time");
            None
        }
    }
}

async fn fail_ops_of_gone_nodes(ctx: &Ctx) {
    let store = ctx.store.clone();
    match tokio::task::spawn_blocking(move || store.fail_ops_of_lapsed_nodes()).await {
        Ok(Ok(0)) => {}
        Ok(Ok(failed)) => tracing::warn!(failed, "failed the ops of nodes whose lease ran out"),
        Ok(Err(e)) => tracing::warn!(error = %error_chain(&e), "cannot fail the ops of gone nodes"),
        Err(e) => tracing::error!(error = %e, "failing the ops of gone nodes panicked"),
    }
}
