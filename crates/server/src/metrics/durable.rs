//! Durable copies of boxes' volumes: copies taken and failed, bytes uploaded, restores, and
//! the chunk store's size, chunk count and last garbage collection (as of the newest GC or
//! usage reading this process made; all 0 without `[storage] url`).

use std::sync::atomic::{AtomicU64, Ordering};

use super::exposition::{Exposition, Kind};

#[derive(Debug, Default)]
pub struct DurableMetrics {
    copies_ok: AtomicU64,
    copies_failed: AtomicU64,
    bytes_uploaded: AtomicU64,
    restores: AtomicU64,
    store_bytes: AtomicU64,
    store_chunks: AtomicU64,
    last_gc_unix: AtomicU64,
}

impl DurableMetrics {
    pub fn copied(&self, bytes_uploaded: u64) {
        self.copies_ok.fetch_add(1, Ordering::Relaxed);
        self.bytes_uploaded
            .fetch_add(bytes_uploaded, Ordering::Relaxed);
    }

    pub fn copy_failed(&self) {
        self.copies_failed.fetch_add(1, Ordering::Relaxed);
    }

    pub fn restored(&self) {
        self.restores.fetch_add(1, Ordering::Relaxed);
    }

    /// The chunk store's size as last read.
    pub fn store_usage(&self, bytes: u64, chunks: u64) {
        self.store_bytes.store(bytes, Ordering::Relaxed);
        self.store_chunks.store(chunks, Ordering::Relaxed);
    }

    pub fn collected(&self, at_unix: u64) {
        self.last_gc_unix.store(at_unix, Ordering::Relaxed);
    }

    pub(super) fn write(&self, out: &mut Exposition) {
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        out.family(
            "berth_durable_copies_total",
            Kind::Counter,
            "Durable copies of box volumes this process uploaded, by outcome (a failed one is retried).",
        );
        out.sample(
            "berth_durable_copies_total",
            &[("outcome", "ok")],
            load(&self.copies_ok),
        );
        out.sample(
            "berth_durable_copies_total",
            &[("outcome", "failed")],
            load(&self.copies_failed),
        );
        for (name, help, value) in [
            (
                "berth_durable_uploaded_bytes_total",
                "Compressed chunk bytes this process uploaded to the chunk store.",
                &self.bytes_uploaded,
            ),
            (
                "berth_volume_restores_total",
                "Box volumes this process restored from a durable copy.",
                &self.restores,
            ),
        ] {
            out.family(name, Kind::Counter, help);
            out.sample(name, &[], load(value));
        }
        for (name, help, value) in [
            (
                "berth_chunk_store_bytes",
                "Bytes the chunk store holds in chunks, as of its last reading.",
                &self.store_bytes,
            ),
            (
                "berth_chunk_store_chunks",
                "Chunks the chunk store holds, as of its last reading.",
                &self.store_chunks,
            ),
            (
                "berth_chunk_store_last_gc_timestamp_seconds",
                "When this process last collected the chunk store's garbage (Unix time; 0: never).",
                &self.last_gc_unix,
            ),
        ] {
            out.family(name, Kind::Gauge, help);
            out.sample(name, &[], load(value));
        }
    }
}
