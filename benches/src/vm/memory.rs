//! Host memory of a process, split into guest RAM and the rest.
//!
//! Guest RAM is a memfd (`memory-backend-memfd,share=on`) that QEMU and
//! vhost-device-vsock both map; its mappings are named `/memfd:<name> (deleted)`. A
//! process's PSS counts each page it maps divided by the number of processes mapping
//! it, so summed over QEMU and vhost-device-vsock each guest page counts once: the sum of
//! the memfd mappings' PSS is the guest RAM actually touched, and the sum of everything
//! else is what a VM costs the host beyond its guest RAM.

use std::path::Path;

/// One process's memory, in KiB.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcessMemory {
    /// PSS of every mapping (`smaps_rollup`).
    pub pss_kib: u64,
    /// PSS of the guest RAM memfd's mappings.
    pub guest_pss_kib: u64,
    /// RSS of the guest RAM memfd's mappings (each touched guest page once per process).
    pub guest_rss_kib: u64,
}

impl ProcessMemory {
    pub fn of(pid: i32) -> std::io::Result<ProcessMemory> {
        let proc_dir = Path::new("/proc").join(pid.to_string());
        let rollup = std::fs::read_to_string(proc_dir.join("smaps_rollup"))?;
        let smaps = std::fs::read_to_string(proc_dir.join("smaps"))?;
        let (guest_pss_kib, guest_rss_kib) = guest_ram(&smaps);
        Ok(ProcessMemory {
            pss_kib: field(&rollup, "Pss:"),
            guest_pss_kib,
            guest_rss_kib,
        })
    }

    /// PSS beyond guest RAM.
    pub fn overhead_kib(&self) -> u64 {
        self.pss_kib.saturating_sub(self.guest_pss_kib)
    }
}

impl std::ops::Add for ProcessMemory {
    type Output = ProcessMemory;
    fn add(self, other: ProcessMemory) -> ProcessMemory {
        ProcessMemory {
            pss_kib: self.pss_kib + other.pss_kib,
            guest_pss_kib: self.guest_pss_kib + other.guest_pss_kib,
            guest_rss_kib: self.guest_rss_kib.max(other.guest_rss_kib),
        }
    }
}

/// The first `name` line's value in kB.
fn field(text: &str, name: &str) -> u64 {
    text.lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

/// (PSS, RSS) of the mappings whose name is a memfd.
fn guest_ram(smaps: &str) -> (u64, u64) {
    let (mut pss, mut rss, mut in_memfd) = (0, 0, false);
    for line in smaps.lines() {
        let is_header = line
            .split_whitespace()
            .next()
            .is_some_and(|first| first.contains('-') && !first.ends_with(':'));
        if is_header {
            in_memfd = line.contains("/memfd:");
        } else if in_memfd {
            if line.starts_with("Pss:") {
                pss += field(line, "Pss:");
            } else if line.starts_with("Rss:") {
                rss += field(line, "Rss:");
            }
        }
    }
    (pss, rss)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_only_memfd_mappings_as_guest_ram() {
        let smaps = "\
7f0000000000-7f0010000000 rw-s 00000000 00:01 12 /memfd:mem (deleted)
Size:             262144 kB
Rss:               40000 kB
Pss:               20000 kB
7f0020000000-7f0020100000 rw-p 00000000 00:00 0
Size:               1024 kB
Rss:                 512 kB
Pss:                 512 kB
";
        assert_eq!(guest_ram(smaps), (20000, 40000));
    }
}
