//! One lane per push service (an endpoint's origin), so that a service that is slow, dead
//! or failing holds up only its own pushes: at most [`MAX_IN_FLIGHT_PER_SERVICE`] of its
//! deliveries run at once, at most [`MAX_PARKED_PER_SERVICE`] more wait for one of them
//! (and [`MAX_PARKED`] across services), and after a failure the service rests: its
//! `Retry-After` (else [`RETRY_AFTER`]), doubled at each failure in a row up to
//! [`REST_MAX`], during which nothing is sent to it. An answer ends the rest. A lane with
//! nothing running, nothing waiting and no rest is forgotten.
//!
//! No I/O here: the sender asks [`Lanes::admit`] what to do with a push and tells
//! [`Lanes::finished`] how a delivery went.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use tokio::time::Instant;

use super::delivery::Verdict;
use super::outgoing::Outgoing;

/// Deliveries to one push service at once.
pub const MAX_IN_FLIGHT_PER_SERVICE: usize = 4;
/// Pushes waiting for a delivery slot of their service; more are dropped.
pub const MAX_PARKED_PER_SERVICE: usize = 32;
/// Pushes waiting for their service's slot, across services; more are dropped.
pub const MAX_PARKED: usize = 256;
/// A failing service's first rest when it names no `Retry-After`.
pub const RETRY_AFTER: Duration = Duration::from_secs(10);
/// The longest rest of a service that keeps failing.
pub const REST_MAX: Duration = Duration::from_secs(600);

/// Lanes that may be kept before forgotten ones are looked for.
const LANES_BEFORE_SWEEP: usize = 64;

#[derive(Debug, Default)]
struct Lane {
    in_flight: usize,
    parked: VecDeque<Outgoing>,
    /// Failures in a row.
    failures: u32,
    resting_until: Option<Instant>,
}

impl Lane {
    fn resting(&self, now: Instant) -> Option<Instant> {
        self.resting_until.filter(|until| *until > now)
    }

    fn forgettable(&self, now: Instant) -> bool {
        self.in_flight == 0 && self.parked.is_empty() && self.resting(now).is_none()
    }
}

/// What to do with a push now.
#[derive(Debug)]
pub enum Admitted {
    /// Deliver it: a slot of its service is taken (given back by [`Lanes::finished`]).
    Send(Outgoing),
    /// It waits for a slot of its service.
    Parked,
    /// Its service rests until then.
    Resting(Outgoing, Instant),
    /// Too many pushes wait already.
    Full(Outgoing),
}

/// What follows a finished delivery.
#[derive(Debug, Default)]
pub struct Next {
    /// The service's next waiting push, to deliver on the slot just freed.
    pub send: Option<Outgoing>,
    /// When the service rests after this delivery failed, until when.
    pub resting_until: Option<Instant>,
    /// Pushes that were waiting for the service, which now rests.
    pub waiting: Vec<Outgoing>,
}

#[derive(Debug, Default)]
pub struct Lanes {
    by_service: HashMap<String, Lane>,
    parked: usize,
}

impl Lanes {
    /// Takes a push for `service`.
    pub fn admit(&mut self, service: &str, outgoing: Outgoing, now: Instant) -> Admitted {
        if self.by_service.len() >= LANES_BEFORE_SWEEP {
            self.by_service.retain(|_, lane| !lane.forgettable(now));
        }
        let lane = self.by_service.entry(service.to_owned()).or_default();
        if let Some(until) = lane.resting(now) {
            return Admitted::Resting(outgoing, until);
        }
        if lane.in_flight < MAX_IN_FLIGHT_PER_SERVICE {
            lane.in_flight += 1;
            return Admitted::Send(outgoing);
        }
        if lane.parked.len() >= MAX_PARKED_PER_SERVICE || self.parked >= MAX_PARKED {
            return Admitted::Full(outgoing);
        }
        lane.parked.push_back(outgoing);
        self.parked += 1;
        Admitted::Parked
    }

    /// A delivery to `service` ended with `verdict`.
    pub fn finished(&mut self, service: &str, verdict: Verdict, now: Instant) -> Next {
        let Some(lane) = self.by_service.get_mut(service) else {
            return Next::default();
        };
        let mut next = Next::default();
        match verdict {
            Verdict::Answered => {
                lane.failures = 0;
                lane.resting_until = None;
            }
            // Deliveries that ran side by side fail together: one failure, one rest.
            Verdict::Failing { .. } if lane.resting(now).is_some() => {
                next.resting_until = lane.resting_until;
            }
            Verdict::Failing { retry_after } => {
                lane.failures = lane.failures.saturating_add(1);
                let doubling = 2u32.saturating_pow(lane.failures - 1);
                let rest = retry_after
                    .unwrap_or(RETRY_AFTER)
                    .saturating_mul(doubling)
                    .min(REST_MAX);
                lane.resting_until = Some(now + rest);
                next.resting_until = lane.resting_until;
            }
        }
        if lane.resting(now).is_some() {
            lane.in_flight -= 1;
            self.parked -= lane.parked.len();
            next.waiting = lane.parked.drain(..).collect();
        } else if let Some(waiting) = lane.parked.pop_front() {
            self.parked -= 1;
            next.send = Some(waiting);
        } else {
            lane.in_flight -= 1;
        }
        if lane.forgettable(now) {
            self.by_service.remove(service);
        }
        next
    }

    /// Lanes kept (running, waiting or resting).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.by_service.len()
    }
}

#[cfg(test)]
mod tests {
    use berth_protocol::TenantId;
    use berth_store::push_subscriptions::PushSubscription;

    use super::*;

    fn push(n: usize) -> Outgoing {
        let subscription = PushSubscription {
            id: format!("ps_{n:016x}"),
            tenant_id: TenantId::from_random([0; 20]),
            endpoint: "https://fcm.googleapis.com/x".into(),
            p256dh: String::new(),
            auth: String::new(),
            created_at: time::OffsetDateTime::UNIX_EPOCH,
        };
        Outgoing::new(subscription, Vec::new())
    }

    #[test]
    fn a_service_runs_a_few_deliveries_and_parks_a_bounded_number() {
        let (mut lanes, now) = (Lanes::default(), Instant::now());
        let mut sent = 0;
        let mut parked = 0;
        let mut full = 0;
        for n in 0..100 {
            match lanes.admit("https://a:443", push(n), now) {
                Admitted::Send(_) => sent += 1,
                Admitted::Parked => parked += 1,
                Admitted::Full(_) => full += 1,
                Admitted::Resting(..) => panic!("not failing"),
            }
        }
        assert_eq!(
            (sent, parked, full),
            (
                MAX_IN_FLIGHT_PER_SERVICE,
                MAX_PARKED_PER_SERVICE,
                100 - MAX_IN_FLIGHT_PER_SERVICE - MAX_PARKED_PER_SERVICE
            )
        );
        // Another service is not held up by the first one's queue.
        assert!(matches!(
            lanes.admit("https://b:443", push(0), now),
            Admitted::Send(_)
        ));
        // A finished delivery hands its slot to the next waiting push, in order.
        let next = lanes.finished("https://a:443", Verdict::Answered, now);
        let first_parked = format!("ps_{:016x}", MAX_IN_FLIGHT_PER_SERVICE);
        assert_eq!(next.send.unwrap().subscription.id, first_parked);
    }

    #[test]
    fn parked_pushes_are_bounded_across_services() {
        let (mut lanes, now) = (Lanes::default(), Instant::now());
        let per_service = MAX_IN_FLIGHT_PER_SERVICE + MAX_PARKED_PER_SERVICE;
        let services = MAX_PARKED / MAX_PARKED_PER_SERVICE + 2;
        let mut parked = 0;
        for service in 0..services {
            for n in 0..per_service {
                if let Admitted::Parked = lanes.admit(&format!("s{service}"), push(n), now) {
                    parked += 1;
                }
            }
        }
        assert_eq!(parked, MAX_PARKED);
    }

    #[test]
    fn a_failing_service_rests_longer_each_time_and_an_answer_ends_it() {
        let (mut lanes, now) = (Lanes::default(), Instant::now());
        let service = "https://dead:443";
        let mut rests = Vec::new();
        for n in 0..10 {
            let Admitted::Send(_) = lanes.admit(service, push(n), now) else {
                panic!("a rested service takes pushes again");
            };
            let next = lanes.finished(service, Verdict::Failing { retry_after: None }, now);
            let until = next.resting_until.unwrap();
            rests.push(until - now);
            // While it rests, its pushes wait for the end of the rest.
            match lanes.admit(service, push(n), now) {
                Admitted::Resting(_, at) => assert_eq!(at, until),
                other => panic!("{other:?}"),
            }
            // Later: the rest is over (the next failure starts from a clean clock).
            lanes.by_service.get_mut(service).unwrap().resting_until = Some(now);
        }
        assert_eq!(rests[0], RETRY_AFTER);
        assert_eq!(rests[1], RETRY_AFTER * 2);
        assert_eq!(*rests.last().unwrap(), REST_MAX);
        // An answer: no rest, and the lane is forgotten once idle.
        let Admitted::Send(_) = lanes.admit(service, push(0), now) else {
            panic!("rest over");
        };
        let next = lanes.finished(service, Verdict::Answered, now);
        assert!(next.resting_until.is_none() && next.send.is_none());
        assert_eq!(lanes.len(), 0);
    }

    #[test]
    fn a_failure_hands_back_the_waiting_pushes_and_the_service_retry_after_counts() {
        let (mut lanes, now) = (Lanes::default(), Instant::now());
        let service = "https://busy:443";
        for n in 0..MAX_IN_FLIGHT_PER_SERVICE + 3 {
            lanes.admit(service, push(n), now);
        }
        let retry_after = Some(Duration::from_secs(2));
        let next = lanes.finished(service, Verdict::Failing { retry_after }, now);
        assert_eq!(next.resting_until, Some(now + Duration::from_secs(2)));
        assert_eq!(next.waiting.len(), 3);
        assert!(next.send.is_none());
        // The others in flight fail too: the same rest, not a longer one.
        for _ in 1..MAX_IN_FLIGHT_PER_SERVICE {
            let next = lanes.finished(service, Verdict::Failing { retry_after: None }, now);
            assert_eq!(next.resting_until, Some(now + Duration::from_secs(2)));
            assert!(next.waiting.is_empty() && next.send.is_none());
        }
        assert_eq!(lanes.parked, 0);
        assert_eq!(lanes.by_service[service].in_flight, 0);
    }
}
