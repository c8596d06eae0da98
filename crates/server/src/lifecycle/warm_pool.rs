//! Warm pools: a template with `warm = N` has N boxes kept booted with no user data, and
//! creating a box from it claims one instead of booting (`ops/box_create.rs` asks
//! [`claim`]).
//!
//! Pool boxes are ordinary boxes of a reserved tenant (`berth_store::WARM_POOL_TENANT`)
//! that no key, session or admin call can name: every tenant-scoped query leaves them out,
//! so they are never listed, never found by id or name, and count against nobody's quota.
//! They boot and stop through the normal lifecycle (so a daemon restart reattaches the
//! running ones, and shutdown stops them with every other box); the idle reclaimer skips
//! them (`BoxRecord::in_warm_pool`).
//!
//! One task per daemon ([`spawn`]) looks every [`FILL_EVERY`]: it boots pool boxes up to
//! each template's `warm` (waking stopped ones first: a restart after a clean shutdown
//! reuses them), deletes the extra ones when `warm` went down or the template went away or
//! changed since they booted, deletes failed ones, and backs off per template while its
//! boots keep failing. A template with credential rules boots its pool boxes with stand-in
//! secrets of the pool's tenant (random, nobody's), so the box has its CA and placeholders.
//!
//! A claim happens under the box's lifecycle lock: the row moves to the caller's tenant
//! (its quota checked in the same transaction), a fresh boot token is handed to berth-init
//! over the channel the pool token authenticates (the pool token is refused from then on),
//! and the box's egress is served again with the caller's secrets. No boot on the request
//! path; the pool task boots the replacement.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use berth_protocol::{BoxId, TenantId};
use berth_runtime::{error_chain, BootToken, IdMap};
use berth_store::{
    warm_pool_tenant, Admission, BoxRecord, BoxState, Claim, NewBox, WARM_POOL_TENANT,
};
use tokio::task::JoinHandle;

use crate::ctx::Ctx;
use crate::error::OpError;
use crate::lifecycle::transition::{Kind, Step, Transition};
use crate::ops::box_create::{create_box, CreateBox};
use crate::ops::box_disk;
use crate::secrets::SecretValue;
use crate::templates::Template;
use crate::validate::LimitsInput;

/// How often the pool task compares each pool with its template.
pub const FILL_EVERY: Duration = Duration::from_secs(1);
/// The longest wait between boots of a template whose pool boxes keep failing.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// Keeps every template's pool full until the task is aborted or the daemon shuts down.
pub fn spawn(ctx: Ctx) -> JoinHandle<()> {
    tokio::spawn(async move {
        let pool = Pool::default();
        let closing = ctx.boxes.closing();
        let mut tick = tokio::time::interval(FILL_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if *closing.borrow() {
                return;
            }
            if let Err(e) = pool.fill(&ctx).await {
                tracing::error!(error = %error_chain(&e), "warm pool: cannot read the pool");
            }
        }
    })
}

/// What the pool task has in flight.
#[derive(Default, Clone)]
struct Pool {
    inner: Arc<Mutex<InFlight>>,
    /// Held by a look at the pools and by the making of a new pool box up to its entry in
    /// `handling`: a look never sees a row that is being made as one to boot or delete.
    gate: Arc<tokio::sync::Mutex<()>>,
}

#[derive(Default)]
struct InFlight {
    /// Pool boxes with a boot or a delete under way: left alone until it is done.
    handling: HashSet<BoxId>,
    /// Per template, boots under way (new boxes included, before they have a row).
    booting: HashMap<String, usize>,
    /// Per template, boots that failed in a row, and when the last one did.
    failures: HashMap<String, (u32, Instant)>,
    /// The template each pool box booted from (by this daemon): one booted before a reload
    /// that changed it is replaced, so a claim never gets an older policy than a boot would.
    booted_with: HashMap<BoxId, Arc<Template>>,
}

impl Pool {
    fn lock(&self) -> std::sync::MutexGuard<'_, InFlight> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// One look at every pool: starts the boots and deletes it needs (each in a task).
    async fn fill(&self, ctx: &Ctx) -> Result<(), OpError> {
        let _gate = self.gate.lock().await;
        let registry = ctx.templates.current();
        let runtime = ctx.runtimes.default_name().to_owned();
        let boxes = ctx.store.list_boxes(&warm_pool_tenant())?;
        let mut state = self.lock();
        state
            .booted_with
            .retain(|id, _| boxes.iter().any(|r| &r.id == id));
        let mut by_template: HashMap<&str, Vec<&BoxRecord>> = HashMap::new();
        for record in &boxes {
            if state.handling.contains(&record.id) {
                continue;
            }
            let current = registry.get(&record.template);
            let stale = match (state.booted_with.get(&record.id), current) {
                (Some(booted), Some(current)) => **booted != **current,
                _ => false,
            };
            let kept = current.is_some_and(|t| pooled(t, &runtime) > 0)
                && record.runtime == runtime
                && record.state != BoxState::Failed
                && !stale;
            if kept {
                by_template
                    .entry(&record.template)
                    .or_default()
                    .push(record);
            } else {
                self.retire(ctx, &mut state, record);
            }
        }
        for template in registry.list() {
            let warm = pooled(&template, &runtime);
            if warm == 0 {
                continue;
            }
            let mine = by_template
                .remove(template.name.as_str())
                .unwrap_or_default();
            let (up, down): (Vec<_>, Vec<_>) = mine
                .into_iter()
                .partition(|r| matches!(r.state, BoxState::Running | BoxState::Starting));
            let mut live = up.len() + state.booting.get(&template.name).copied().unwrap_or(0);
            for extra in up.iter().take(live.saturating_sub(warm)) {
                self.retire(ctx, &mut state, extra);
                live -= 1;
            }
            let waiting = backing_off(&state, &template.name);
            for stopped in down {
                if live < warm && !waiting {
                    self.boot(ctx, &mut state, &template, Some(stopped.id.clone()));
                    live += 1;
                } else if live >= warm {
                    self.retire(ctx, &mut state, stopped);
                }
            }
            while live < warm && !waiting {
                self.boot(ctx, &mut state, &template, None);
                live += 1;
            }
        }
        Ok(())
    }

    /// Boots pool box `id` of `template` (a new one when `None`) in a task of its own.
    fn boot(&self, ctx: &Ctx, state: &mut InFlight, template: &Arc<Template>, id: Option<BoxId>) {
        *state.booting.entry(template.name.clone()).or_default() += 1;
        if let Some(id) = &id {
            state.handling.insert(id.clone());
        }
        let (ctx, pool, template) = (ctx.clone(), self.clone(), template.clone());
        tokio::spawn(async move {
            let name = template.name.clone();
            let made = match id {
                Some(id) => Ok(id),
                None => pool.make(&ctx, &name).await,
            };
            let booted = match &made {
                Ok(id) => start_pool_box(&ctx, &template, id).await,
                Err(_) => Ok(()),
            };
            let mut state = pool.lock();
            if let Some(n) = state.booting.get_mut(&name) {
                *n = n.saturating_sub(1);
            }
            if let Ok(id) = &made {
                state.handling.remove(id);
            }
            match made.and_then(|id| booted.map(|()| id)) {
                Ok(id) => {
                    tracing::info!(box_id = %id, template = name, "warm pool: a pool box is ready");
                    state.failures.remove(&name);
                    state.booted_with.insert(id, template);
                }
                Err(e) => {
                    tracing::warn!(template = name, error = %error_chain(&e), "warm pool: a pool box did not boot");
                    let failed = state.failures.entry(name).or_insert((0, Instant::now()));
                    *failed = (failed.0.saturating_add(1), Instant::now());
                }
            }
        });
    }

    /// Deletes a pool box nobody needs (no user data is on it) in a task of its own.
    fn retire(&self, ctx: &Ctx, state: &mut InFlight, record: &BoxRecord) {
        if !state.handling.insert(record.id.clone()) {
            return;
        }
        let (ctx, pool, id) = (ctx.clone(), self.clone(), record.id.clone());
        tracing::info!(box_id = %id, template = %record.template, state = %record.state, "warm pool: deleting a pool box nobody needs");
        tokio::spawn(async move {
            if let Err(e) = retire_pool_box(&ctx, &id).await {
                tracing::error!(box_id = %id, error = %error_chain(&e), "warm pool: cannot delete a pool box");
            }
            pool.lock().handling.remove(&id);
        });
    }
}

impl Pool {
    /// A new pool box of `template`, stopped, already in `handling`.
    async fn make(&self, ctx: &Ctx, template: &str) -> Result<BoxId, OpError> {
        let _gate = self.gate.lock().await;
        let id = create_pool_box(ctx, template).await?;
        self.lock().handling.insert(id.clone());
        Ok(id)
    }
}

/// Boots pool box `id` of `template`, unless the daemon is shutting down: its shutdown
/// stops every box once, and this one must not start after that.
async fn start_pool_box(ctx: &Ctx, template: &Template, id: &BoxId) -> Result<(), OpError> {
    if *ctx.boxes.closing().borrow() {
        return Ok(());
    }
    stand_in_secrets(ctx, template)?;
    super::wake::ensure_running(ctx, id, super::wake::Waker::Caller)
        .await
        .map(drop)
}

/// Gives the pool's tenant a stand-in value (random, nobody's secret) for each secret the
/// template's credential rules name, so its boxes boot with the rules' CA and placeholders
/// in place; a claim serves the channel again with the claiming tenant's real secrets.
fn stand_in_secrets(ctx: &Ctx, template: &Template) -> Result<(), OpError> {
    let pool = warm_pool_tenant();
    for rule in &template.egress.credentials {
        if ctx.secrets.reveal(&pool, &rule.name)?.is_some() {
            continue;
        }
        let mut random = [0u8; 24];
        getrandom::fill(&mut random).map_err(OpError::Random)?;
        let value = berth_basics::hex(&random);
        ctx.secrets.set(
            &pool,
            &rule.name,
            &SecretValue::new(format!("warm-pool-{value}")),
        )?;
    }
    Ok(())
}

/// A new pool box of `template` (stopped).
async fn create_pool_box(ctx: &Ctx, template: &str) -> Result<BoxId, OpError> {
    let mut random = [0u8; 8];
    getrandom::fill(&mut random).map_err(OpError::Random)?;
    let suffix = berth_basics::hex(&random);
    let request = CreateBox {
        name: format!("warm-{suffix}"),
        template: Some(template.to_owned()),
        limits: LimitsInput::default(),
        sleep: Default::default(),
        egress: None,
        runtime: None,
        disk_mib: None,
        labels: Default::default(),
        env: Default::default(),
    };
    Ok(create_box(ctx, &warm_pool_tenant(), request).await?.id)
}

/// Stops pool box `id` under its lifecycle lock if it is still one (a claim may have taken
/// it since the pool was read), then deletes it: stopped, no claim can take it.
async fn retire_pool_box(ctx: &Ctx, id: &BoxId) -> Result<(), OpError> {
    {
        let mut t = match Transition::begin(ctx, id, Kind::Stop).await {
            Ok(t) => t,
            Err(OpError::BoxNotFound { .. }) => return Ok(()),
            Err(e) => return Err(e),
        };
        if !t.record().in_warm_pool() {
            return Ok(());
        }
        super::stop::stop_held(&mut t).await?;
    }
    crate::ops::box_delete::delete_box(ctx, id).await
}

/// The pool size the template asks for on `runtime` (0: no pool). A template whose base
/// cannot run there, or that is unavailable, has none.
fn pooled(template: &Template, runtime: &str) -> usize {
    let fits = template.unavailable.is_none()
        && crate::runtimes::runs_base(runtime, template.base.is_image());
    if fits {
        template.warm
    } else {
        0
    }
}

/// Whether boots of `template` wait: each failure in a row doubles the wait, up to
/// [`MAX_BACKOFF`].
fn backing_off(state: &InFlight, template: &str) -> bool {
    state.failures.get(template).is_some_and(|(count, last)| {
        let wait = Duration::from_secs(1u64 << (*count).min(6)).min(MAX_BACKOFF);
        last.elapsed() < wait
    })
}

/// A running pool box of the new box's template, moved to its tenant as the new box, when
/// the request fits one: the template's pool on the daemon's default runtime, the
/// template's limits and volume size, the template's egress policy, no env of its own
/// (each of those is fixed at boot). `None`: the caller creates the box as usual (also
/// when the tenant's quota has no room for one more running box, or the name is taken:
/// the usual path says so, or makes the box stopped).
pub(super) async fn claim(ctx: &Ctx, new: &NewBox, template: &Template) -> Option<BoxRecord> {
    let fits = new.tenant_id.as_str() != WARM_POOL_TENANT
        && pooled(template, ctx.runtimes.default_name()) > 0
        && new.runtime == ctx.runtimes.default_name()
        && new.egress.is_none()
        && new.env.is_empty()
        && new.disk_mib.is_none()
        && new.memory_mib == template.limits.memory_mib
        && new.pids == template.limits.pids
        && new.cpus == template.limits.cpus;
    if !fits {
        return None;
    }
    let ready = match ctx.store.list_boxes(&warm_pool_tenant()) {
        Ok(boxes) => boxes,
        Err(e) => {
            tracing::error!(error = %error_chain(&e), "warm pool: cannot read the pool");
            return None;
        }
    };
    let candidates = ready.into_iter().filter(|r| {
        r.template == new.template && r.runtime == new.runtime && r.state == BoxState::Running
    });
    let owner = Owner {
        tenant: new.tenant_id.clone(),
        name: new.name.clone(),
        labels: new.labels.clone(),
        sleep: new.sleep,
    };
    for candidate in candidates {
        // In a task of its own (a client that hangs up cannot cut a claim half-way), in
        // the request's span.
        let (task_ctx, id, owner) = (ctx.clone(), candidate.id.clone(), owner.clone());
        let claim = async move { claim_locked(&task_ctx, &id, &owner).await };
        match tokio::spawn(tracing::Instrument::in_current_span(claim)).await {
            Ok(Ok(Some(record))) => return Some(record),
            Ok(Ok(None)) => {}
            Ok(Err(e)) => {
                tracing::warn!(box_id = %candidate.id, error = %error_chain(&e), "warm pool: cannot claim a pool box")
            }
            Err(e) => {
                tracing::error!(box_id = %candidate.id, error = %e, "warm pool: a claim panicked")
            }
        }
    }
    None
}

/// Who a claimed box goes to.
#[derive(Debug, Clone)]
struct Owner {
    tenant: TenantId,
    name: String,
    labels: std::collections::BTreeMap<String, String>,
    sleep: berth_store::SleepSettings,
}

/// Claims pool box `id` for `owner` under its lifecycle lock. `Ok(None)`: it is not
/// claimable (any more), or the owner's quota or name refuse it; the box stays in the pool.
async fn claim_locked(ctx: &Ctx, id: &BoxId, owner: &Owner) -> Result<Option<BoxRecord>, OpError> {
    let mut t = match Transition::begin(ctx, id, Kind::Claim).await {
        Ok(t) => t,
        Err(OpError::BoxNotFound { .. }) => return Ok(None),
        Err(e) => return Err(e),
    };
    let Some(pool_client) = t.live.client.clone() else {
        return Ok(None);
    };
    let record = t.record().clone();
    if !record.in_warm_pool() || record.state != BoxState::Running {
        return Ok(None);
    }
    // The same policy, CA and placeholders the box booted with; the owner's secrets.
    let egress = match ctx.egress.restore(id, ctx.tenant_secrets(&owner.tenant)) {
        Ok(Some(egress)) => egress,
        Ok(None) => return Ok(None),
        Err(e) => {
            tracing::info!(box_id = %id, error = %error_chain(&e), "warm pool: the owner's egress does not fit; booting a box instead");
            return Ok(None);
        }
    };
    let runtime = t.runtime()?;
    let id_map = IdMap::for_slot(record.id_slot).ok_or_else(|| OpError::NoIdRange {
        id: id.clone(),
        slot: record.id_slot,
    })?;
    let admission = Admission {
        id_slots: IdMap::SLOTS,
        template_disk: &|name| box_disk::template_disk_mib(ctx, name),
    };
    let mut random = [0u8; 32];
    getrandom::fill(&mut random).map_err(OpError::Random)?;
    let token = BootToken::from_random(random);
    let claim = Claim {
        tenant: &owner.tenant,
        name: &owner.name,
        labels: &owner.labels,
        sleep: owner.sleep,
        boot_token: token.as_str(),
    };
    // The claim is a write of its own (a new owner, not a state change) at the generation
    // this transition read.
    let claimed = match ctx
        .store
        .claim_warm_box(id, record.generation, &claim, admission)
    {
        Ok(claimed) => claimed,
        Err(e) => {
            tracing::info!(box_id = %id, error = %error_chain(&e), "warm pool: the claim was refused; creating the box as usual");
            return Ok(None);
        }
    };
    t.reload()?;
    // From here the box is the owner's: whatever fails leaves it stopped, as a created box
    // is, with the failure on it, and its next wake boots it cold with a token of its own.
    let handed_over = async {
        pool_client
            .rotate_token(&token)
            .await
            .map_err(HandoverError::Token)?;
        runtime
            .rebind_egress(id, id_map)
            .await
            .map_err(HandoverError::Egress)
    };
    let listener = match handed_over.await {
        Ok(listener) => listener,
        Err(e) => {
            tracing::warn!(box_id = %id, error = %error_chain(&e), "warm pool: the claimed box cannot be handed over; stopping it");
            super::stop::stop_held(&mut t).await?;
            t.failed(Step::Handover, &e, None);
            return t.finish().map(Some);
        }
    };
    let client = runtime.channel(id, &token);
    t.live.egress = Some(ctx.egress.serve(&egress, listener));
    t.live.client = Some(client);
    // The pool boot goes on as the owner's: its tasks start again with the new client.
    let harness = ctx.box_has_harness(&claimed);
    super::boot_tasks::start(ctx, id, &mut t.live, runtime, harness);
    // The idle clock starts at the claim.
    ctx.activity.touch(id);
    tracing::info!(box_id = %id, name = %claimed.name, template = %claimed.template, "box created from the warm pool");
    Ok(Some(claimed))
}

/// Why a claimed pool box could not be handed to its owner.
#[derive(Debug, thiserror::Error)]
enum HandoverError {
    #[error("the box's agent did not take its new boot token")]
    Token(#[source] berth_runtime::GuestError),
    #[error("the box's egress channel could not be bound again")]
    Egress(#[source] berth_runtime::RuntimeError),
}
