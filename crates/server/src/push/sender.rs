//! Sending pushes: a bounded queue, and a dispatcher that hands each push to its push
//! service's lane (`lanes.rs`), delivering up to [`MAX_IN_FLIGHT`] at once in all and a
//! few per service, each within its own deadline (`delivery.rs`), so one dead or slow
//! push service delays only its own pushes. A full queue (or a service with too many
//! waiting) drops the push with a warning: a notification is a nicety; memory is not. A
//! push whose service failed, or rests after failing, is tried once more when the rest
//! ends, while at most [`MAX_PENDING_RETRIES`] wait; else it is dropped.

use std::sync::{Arc, Mutex};

use berth_store::Store;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::config::PushHostConfig;
use super::delivery::{Delivery, Verdict};
use super::lanes::{Admitted, Lanes};
use super::outgoing::Outgoing;
use super::vapid::VapidKey;

pub use super::delivery::TIMEOUT;
pub use super::lanes::MAX_IN_FLIGHT_PER_SERVICE;

/// Pushes waiting for the dispatcher; more are dropped.
pub const QUEUE: usize = 256;

/// Deliveries at once, across push services.
pub const MAX_IN_FLIGHT: usize = 32;

/// Pushes waiting to be tried again; past this a failed push is not retried.
pub const MAX_PENDING_RETRIES: usize = 64;

/// The queue's sending end.
#[derive(Debug)]
pub struct Sender {
    queue: mpsc::Sender<Outgoing>,
}

impl Sender {
    /// Queues a push; drops it (logged) when the queue is full.
    pub fn send(&self, outgoing: Outgoing) {
        if let Err(e) = self.queue.try_send(outgoing) {
            let (why, outgoing) = match e {
                mpsc::error::TrySendError::Full(o) => ("the push queue is full", o),
                mpsc::error::TrySendError::Closed(o) => ("the push worker has stopped", o),
            };
            tracing::warn!(subscription = %outgoing.subscription.id, "push dropped: {why}");
        }
    }
}

/// What the worker needs.
pub(crate) struct Worker {
    pub store: Arc<Store>,
    pub vapid: Arc<VapidKey>,
    pub config: Arc<PushHostConfig>,
}

/// What the dispatcher and the deliveries share.
struct Shared {
    delivery: Delivery,
    lanes: Mutex<Lanes>,
    /// Weak: the worker must not keep its own queue open (it ends with the daemon).
    requeue: mpsc::WeakSender<Outgoing>,
    retries: Arc<Semaphore>,
}

impl Worker {
    /// Starts the dispatcher; it ends when the returned sender (and its clones) are
    /// dropped.
    pub fn spawn(self) -> Sender {
        let (queue, mut rx) = mpsc::channel(QUEUE);
        let shared = Arc::new(Shared {
            delivery: Delivery {
                store: self.store,
                vapid: self.vapid,
                config: self.config,
                tls: Arc::new(crate::outbound::tls_config()),
            },
            lanes: Mutex::default(),
            requeue: queue.downgrade(),
            retries: Arc::new(Semaphore::new(MAX_PENDING_RETRIES)),
        });
        let slots = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
        tokio::spawn(async move {
            while let Some(outgoing) = rx.recv().await {
                let service = outgoing.service();
                let admitted = shared.lanes().admit(&service, outgoing, Instant::now());
                match admitted {
                    Admitted::Send(outgoing) => {
                        let slot = slots.clone().acquire_owned().await;
                        let slot = slot.expect("the semaphore is never closed");
                        tokio::spawn(shared.clone().run_lane(service, outgoing, slot));
                    }
                    Admitted::Parked => {}
                    Admitted::Resting(outgoing, until) => shared.retry_at(outgoing, until),
                    Admitted::Full(outgoing) => {
                        tracing::warn!(subscription = %outgoing.subscription.id, %service, "push dropped: too many pushes wait for this push service");
                    }
                }
            }
        });
        Sender { queue }
    }
}

impl Shared {
    fn lanes(&self) -> std::sync::MutexGuard<'_, Lanes> {
        // Never held across an await; a panic while held leaves counts that still bound.
        self.lanes
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Delivers `outgoing`, then the pushes waiting for its service, on one slot.
    async fn run_lane(
        self: Arc<Self>,
        service: String,
        outgoing: Outgoing,
        _slot: OwnedSemaphorePermit,
    ) {
        let mut next = Some(outgoing);
        while let Some(outgoing) = next.take() {
            let verdict = self.delivery.deliver(&outgoing).await;
            let after = self.lanes().finished(&service, verdict, Instant::now());
            if let (Verdict::Failing { .. }, Some(until)) = (verdict, after.resting_until) {
                self.retry_at(outgoing, until);
            }
            for waiting in after.waiting {
                self.retry_at(waiting, after.resting_until.unwrap_or_else(Instant::now));
            }
            next = after.send;
        }
    }

    /// Tries `outgoing` again at `at` (through the queue), unless it was tried again
    /// already or [`MAX_PENDING_RETRIES`] wait.
    fn retry_at(&self, mut outgoing: Outgoing, at: Instant) {
        let id = &outgoing.subscription.id;
        if outgoing.retried {
            tracing::warn!(subscription = %id, "push dropped: its push service still fails after its one retry");
            return;
        }
        let Ok(permit) = self.retries.clone().try_acquire_owned() else {
            tracing::warn!(subscription = %id, "push not retried: too many retries wait");
            return;
        };
        outgoing.retried = true;
        let requeue = self.requeue.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(at).await;
            if let Some(queue) = requeue.upgrade() {
                Sender { queue }.send(outgoing);
            }
            drop(permit);
        });
    }
}
