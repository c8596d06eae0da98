//! Host memory of a process, split into guest RAM and the rest.
//!
//! Guest RAM is a memfd (`memory-backend-memfd`) that only QEMU maps; its mappings are
//! named `/memfd:<name> (deleted)`. Summed over QEMU and its channel bridge, the memfd
//! mappings' PSS is the guest RAM actually touched, and the sum of everything else is what
//! a VM costs the host beyond its guest RAM. Pages of the QEMU binary and its
//! libraries count once per host, spread over every QEMU running: measured with several
//! VMs up, each VM's share is what one more VM costs.
//!
//! Under TCG, the translation cache (QEMU's code buffer: the one anonymous `rwxp` mapping)
//! is reported on its own: a KVM host has none.

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
    /// PSS of TCG's translation cache (anonymous, writable and executable).
    pub tcg_cache_kib: u64,
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
            tcg_cache_kib: tcg_cache(&smaps),
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
            tcg_cache_kib: self.tcg_cache_kib + other.tcg_cache_kib,
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

/// Whether `line` starts a mapping in `smaps` (`<start>-<end> <perms> …`).
fn is_header(line: &str) -> bool {
    line.split_whitespace()
        .next()
        .is_some_and(|first| first.contains('-') && !first.ends_with(':'))
}

/// PSS of the anonymous `rwxp` mappings: TCG's code buffer.
fn tcg_cache(smaps: &str) -> u64 {
    let (mut pss, mut in_cache) = (0, false);
    for line in smaps.lines() {
        if is_header(line) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            in_cache = fields.get(1) == Some(&"rwxp") && fields.len() == 5;
        } else if in_cache && line.starts_with("Pss:") {
            pss += field(line, "Pss:");
        }
    }
    pss
}

/// (PSS, RSS) of the mappings whose name is a memfd.
fn guest_ram(smaps: &str) -> (u64, u64) {
    let (mut pss, mut rss, mut in_memfd) = (0, 0, false);
    for line in smaps.lines() {
        if is_header(line) {
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

    #[test]
    fn the_tcg_cache_is_the_anonymous_executable_mapping() {
        let smaps = "\
7f0000000000-7f0010000000 rwxp 00000000 00:00 0 
Size:            1048576 kB
Pss:               16384 kB
7f0020000000-7f0020100000 r-xp 00000000 fe:00 12 /usr/bin/qemu-system-x86_64
Size:               1024 kB
Pss:                 512 kB
7f0030000000-7f0030100000 rw-p 00000000 00:00 0
Size:               1024 kB
Pss:                 256 kB
";
        assert_eq!(tcg_cache(smaps), 16384);
    }
}
