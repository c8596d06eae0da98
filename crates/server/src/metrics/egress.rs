//! The egress gateway's traffic and refusals, counted from its audit records: every
//! decision the gateway makes is one [`AuditRecord`] (a deny at once, an allow when its
//! connection ends, with its byte counts), so a sink in front of the audit log sees them
//! all. Bytes of an open connection are counted when it closes.
//!
//! `reason` is the gateway's own vocabulary (`berth_egress::gateway::DenyReason::code`:
//! `not_allowed`, `forbidden_address:loopback`, …), never something a box chose; past
//! [`MAX_REASONS`] distinct codes the rest are counted as `other`, so a new code in the
//! gateway can never grow the series without bound.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use berth_egress::gateway::{AuditError, AuditRecord, AuditSink, Verdict};

use super::exposition::{Exposition, Kind};

/// Distinct deny reasons kept as their own series (the gateway has about 25).
pub const MAX_REASONS: usize = 64;

#[derive(Debug, Default)]
pub struct EgressCounters {
    /// Bytes boxes sent upstream.
    sent: AtomicU64,
    /// Bytes upstream sent back to boxes.
    received: AtomicU64,
    allowed: AtomicU64,
    denials: Mutex<BTreeMap<String, u64>>,
}

impl EgressCounters {
    fn count(&self, record: &AuditRecord) {
        self.sent.fetch_add(record.bytes_up, Ordering::Relaxed);
        self.received
            .fetch_add(record.bytes_down, Ordering::Relaxed);
        match record.decision {
            Verdict::Allow => {
                self.allowed.fetch_add(1, Ordering::Relaxed);
            }
            Verdict::Deny => {
                let reason = record.reason.as_deref().unwrap_or("unknown");
                let mut denials = self.denials.lock().unwrap_or_else(|p| p.into_inner());
                let key = if denials.contains_key(reason) || denials.len() < MAX_REASONS {
                    reason
                } else {
                    "other"
                };
                *denials.entry(key.to_owned()).or_default() += 1;
            }
        }
    }

    pub(super) fn write(&self, out: &mut Exposition) {
        out.family(
            "berth_egress_sent_bytes_total",
            Kind::Counter,
            "Bytes boxes sent through the egress gateway (counted when each connection ends).",
        );
        out.sample(
            "berth_egress_sent_bytes_total",
            &[],
            self.sent.load(Ordering::Relaxed),
        );
        out.family(
            "berth_egress_received_bytes_total",
            Kind::Counter,
            "Bytes boxes received through the egress gateway (counted when each connection ends).",
        );
        out.sample(
            "berth_egress_received_bytes_total",
            &[],
            self.received.load(Ordering::Relaxed),
        );
        out.family(
            "berth_egress_allowed_total",
            Kind::Counter,
            "Connections the egress gateway allowed (counted when each ends).",
        );
        out.sample(
            "berth_egress_allowed_total",
            &[],
            self.allowed.load(Ordering::Relaxed),
        );
        out.family(
            "berth_egress_denials_total",
            Kind::Counter,
            "Connections the egress gateway refused, by the audit log's reason.",
        );
        let denials = self
            .denials
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        for (reason, count) in &denials {
            out.sample("berth_egress_denials_total", &[("reason", reason)], *count);
        }
    }
}

/// The gateway's audit sink: counts each record, then hands it to the audit log.
pub struct CountingSink {
    pub counters: Arc<EgressCounters>,
    pub inner: Arc<dyn AuditSink>,
}

impl AuditSink for CountingSink {
    fn record(&self, record: &AuditRecord) -> Result<(), AuditError> {
        self.counters.count(record);
        self.inner.record(record)
    }
}

#[cfg(test)]
mod tests {
    use berth_egress::gateway::MemorySink;
    use berth_protocol::BoxId;

    use super::*;

    fn record(decision: Verdict, reason: Option<&str>, up: u64, down: u64) -> AuditRecord {
        AuditRecord {
            box_id: BoxId::from_random([7; 20]),
            time: "2024-01-01T00:00:00Z".into(),
            target: Some("api.example.test".into()),
            port: Some(443),
            via: None,
            resolved: None,
            decision,
            reason: reason.map(str::to_owned),
            refused: Vec::new(),
            bytes_up: up,
            bytes_down: down,
            duration_ms: 1,
            intercept: false,
            credential: None,
            withheld: None,
            closed: None,
        }
    }

    #[test]
    fn records_are_counted_and_passed_on() {
        let counters = Arc::new(EgressCounters::default());
        let log = Arc::new(MemorySink::new());
        let sink = CountingSink {
            counters: counters.clone(),
            inner: log.clone(),
        };
        sink.record(&record(Verdict::Allow, None, 100, 5000))
            .unwrap();
        sink.record(&record(Verdict::Deny, Some("not_allowed"), 0, 0))
            .unwrap();
        sink.record(&record(Verdict::Deny, Some("not_allowed"), 0, 0))
            .unwrap();
        sink.record(&record(
            Verdict::Deny,
            Some("forbidden_address:loopback"),
            0,
            0,
        ))
        .unwrap();
        assert_eq!(log.records().len(), 4);
        let mut out = Exposition::default();
        counters.write(&mut out);
        let text = out.finish();
        for line in [
            "berth_egress_sent_bytes_total 100",
            "berth_egress_received_bytes_total 5000",
            "berth_egress_allowed_total 1",
            r#"berth_egress_denials_total{reason="forbidden_address:loopback"} 1"#,
            r#"berth_egress_denials_total{reason="not_allowed"} 2"#,
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
    }

    #[test]
    fn reasons_past_the_cap_are_other() {
        let counters = EgressCounters::default();
        for i in 0..MAX_REASONS + 10 {
            counters.count(&record(Verdict::Deny, Some(&format!("r{i}")), 0, 0));
        }
        counters.count(&record(Verdict::Deny, Some("r0"), 0, 0));
        let denials = counters.denials.lock().unwrap();
        assert_eq!(denials.len(), MAX_REASONS + 1);
        assert_eq!(denials["other"], 10);
        assert_eq!(denials["r0"], 2, "a known reason keeps counting");
    }
}
