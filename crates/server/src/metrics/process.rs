//! The daemon's own process, read from `/proc/self` at each scrape: its version, when it
//! started, its open file descriptors against their limit (every connection, box channel
//! and store connection holds one), and its resident memory. A value `/proc` cannot give
//! (not Linux, or hidden) is left out rather than shown as 0.

use std::time::SystemTime;

use super::exposition::{Exposition, Kind};

pub(super) fn write(out: &mut Exposition, started: SystemTime) {
    out.family(
        "berth_build_info",
        Kind::Gauge,
        "The daemon's version (always 1).",
    );
    out.sample(
        "berth_build_info",
        &[("version", env!("CARGO_PKG_VERSION"))],
        1,
    );
    out.family(
        "berth_process_start_time_seconds",
        Kind::Gauge,
        "When the daemon started, in seconds since the Unix epoch.",
    );
    let since_epoch = started
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    out.sample_f64(
        "berth_process_start_time_seconds",
        &[],
        since_epoch.as_secs_f64(),
    );
    if let Some(fds) = open_fds() {
        out.family(
            "berth_process_open_fds",
            Kind::Gauge,
            "File descriptors the daemon has open.",
        );
        out.sample("berth_process_open_fds", &[], fds);
    }
    if let Some(max) = max_fds() {
        out.family(
            "berth_process_max_fds",
            Kind::Gauge,
            "The daemon's limit of open file descriptors (RLIMIT_NOFILE, soft).",
        );
        out.sample("berth_process_max_fds", &[], max);
    }
    if let Some(bytes) = resident_bytes() {
        out.family(
            "berth_process_resident_memory_bytes",
            Kind::Gauge,
            "The daemon's resident memory (VmRSS).",
        );
        out.sample("berth_process_resident_memory_bytes", &[], bytes);
    }
}

/// Entries of `/proc/self/fd`, less the one listing them.
fn open_fds() -> Option<u64> {
    let entries = std::fs::read_dir("/proc/self/fd").ok()?.count();
    u64::try_from(entries.saturating_sub(1)).ok()
}

fn max_fds() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    max_open_files(&limits)
}

fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    vm_rss_bytes(&status)
}

/// `Max open files  1024  4096  files` → 1024 (`unlimited` → none).
fn max_open_files(limits: &str) -> Option<u64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// `VmRSS:    12345 kB` → 12345 × 1024.
fn vm_rss_bytes(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let mut parts = line["VmRSS:".len()..].split_whitespace();
    let kib: u64 = parts.next()?.parse().ok()?;
    (parts.next()? == "kB").then(|| kib.saturating_mul(1024))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_lines_are_read() {
        let status = "Name:\tberth\nVmPeak:\t  9000 kB\nVmRSS:\t   12345 kB\nThreads:\t4\n";
        assert_eq!(vm_rss_bytes(status), Some(12345 * 1024));
        assert_eq!(vm_rss_bytes("VmRSS:\t12 MB\n"), None);
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max open files            1024                 524288               files     \n";
        assert_eq!(max_open_files(limits), Some(1024));
        assert_eq!(
            max_open_files(
                "Max open files            unlimited            unlimited            files\n"
            ),
            None
        );
    }

    #[test]
    fn this_process_is_read_on_linux() {
        let mut out = Exposition::default();
        write(&mut out, SystemTime::now());
        let text = out.finish();
        assert!(text.contains("berth_build_info{version=\""), "{text}");
        if cfg!(target_os = "linux") {
            assert!(text.contains("\nberth_process_open_fds "), "{text}");
            assert!(
                text.contains("\nberth_process_resident_memory_bytes "),
                "{text}"
            );
        }
    }
}
