//! Looking at the host's processes: their memory, and which ones a test left behind.

use std::fs;
use std::path::Path;

/// A `kB` field of `/proc/<pid>/status` (`VmRSS`, `VmHWM`), in KiB.
pub fn vm_kib(pid: u32, field: &str) -> u64 {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

/// Resets `VmHWM` to the current RSS (`clear_refs` value 5).
pub fn reset_peak_rss(pid: u32) {
    fs::write(format!("/proc/{pid}/clear_refs"), "5").unwrap();
}

/// Every process whose command line names `needle`, as (pid, command line).
pub fn processes_naming(needle: &str) -> Vec<(i32, String)> {
    let mut found = Vec::new();
    for entry in fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(cmdline) = fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(needle) {
            found.push((pid, cmdline));
        }
    }
    found
}

/// The VM processes (QEMU, its channel bridge `berth-init bridge`) whose command line
/// names `dir` (a daemon's data dir).
pub fn vm_processes(dir: &Path) -> Vec<(i32, String)> {
    processes_naming(&dir.to_string_lossy())
        .into_iter()
        .filter(|(_, cmd)| cmd.contains("qemu-system") || cmd.contains(" bridge --serial "))
        .collect()
}
