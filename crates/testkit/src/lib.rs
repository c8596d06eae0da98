//! One way for a berth test to skip: [`skip`] says `SKIPPED: <part>: <why>`, records the
//! skip for the run's tally, and fails the test instead when the run requires that part.
//!
//! A test that needs something this host lacks (root, KVM, a `firecracker` binary, the
//! Debian mirror) calls [`skip`] and returns: a skip is never a pass. `make test` prints
//! the tally of every skip after the run (nextest hides a passing test's output, so each
//! skip is also appended to `$BERTH_SKIP_LOG`), and `BERTH_REQUIRE` (a comma list of
//! [`PARTS`], or `all`) turns the skip of a required part into a failure with its reason:
//! CI requires what its machine has, so a test that stops running there is noticed.
//!
//! The parts, named the same everywhere (README's test section lists them too):
//!
//! | part | what the host lacks |
//! |---|---|
//! | `root` | root (chown, mounts, namespaces, the jailer's staging) |
//! | `loop` | loop devices (`/dev/loop-control`: `modprobe loop`) |
//! | `netns` | network namespaces |
//! | `cap-sys-resource` | `CAP_SYS_RESOURCE` (ext4's online resize) |
//! | `memory-cgroup` | a memory cgroup this process may create (cgroup v2, as root) |
//! | `berth-init` | a static berth-init (`make init`, or `$BERTH_INIT_BIN`) |
//! | `sandbox` | the sandbox backend: root, an OCI runtime (runc), berth-init |
//! | `qemu` | the qemu backend: `qemu-system-x86_64`, berth-init, the test VM images |
//! | `firecracker` | the firecracker backend: a `firecracker` binary, a `vmlinux`, a KVM that runs guests |
//! | `vm-images` | the test VM images built already (the qemu tests build them) |
//! | `image-build` | what building an image needs: the Debian mirror and the tools it runs |
//! | `e2fsprogs` | `mkfs.ext4`, `e2fsck`, `debugfs` |
//! | `kmod` | `depmod` |
//! | `cpio` | a system `cpio` |
//! | `debootstrap` | `debootstrap` (as root, with the Debian mirror) |
//! | `python3` | `python3` |
//! | `cc` | a C compiler and the static libc (`gcc`, `libc6-dev`) |
//! | `perl` | `perl` under `/usr` (Debian's `perl-base`) |
//! | `claude-code` | Claude Code from npm (`scripts/install-deps.sh --tests` with npm) |
//! | `box-tools` | a tool inside the box's rootfs (the `minimal` test image has no python3, no curl) |
//! | `shells` | `zsh` and `fish`, which parse `berth completion`'s scripts for them |
//! | `browser` | what the web app's end-to-end tests drive: Debian's `chromium` and `node` with `npm` ([`browser`]) |
//! | `pebble` | Debian's `pebble` and `pebble-challtestsrv`, the ACME test CA the TLS tests order from |
//! | `curl` | `curl`, the browser stand-in of the cookie tests (its cookie jar) |
//! | `sqlite3` | the `sqlite3` shell, which writes the earlier releases' databases of the upgrade tests |
//! | `e2b-sdk` | the pinned E2B Python SDK in its venv under `target/e2b-sdk` (`scripts/install-deps.sh --tests`: `python3-venv` and PyPI) ([`e2b_sdk`]) |
//! | `sdk-python` | berth's own Python SDK in its venv under `target/sdk-python`, with pinned httpx, websockets and pytest (`scripts/install-deps.sh --tests`: `python3-venv` and PyPI) ([`sdk_python`]) |
//! | `sdk-typescript` | berth's own TypeScript SDK's npm packages under `sdk/typescript/node_modules` (`scripts/install-deps.sh --tests` with npm: `npm ci`) and a `node` of 18 or newer ([`sdk_typescript`]) |
//! | `mcp-sdk` | the official MCP Python SDK (PyPI `mcp`, pinned) in its venv under `target/mcp-sdk` (`scripts/install-deps.sh --tests`: `python3-venv` and PyPI) ([`mcp_sdk`]) |
//! | `e2b-npm` | the pinned E2B npm SDK under `target/e2b-sdk` (`scripts/install-deps.sh --tests` with npm) and a `node` it supports (20.18.1 or newer; Debian 12's own is 18) ([`e2b_sdk`]) |
//! | `postgres` | PostgreSQL's server binaries (Debian's `postgresql` package: `initdb`, `postgres`, `createdb` under `/usr/lib/postgresql/<N>/bin`) ([`postgres`]) |
//! | `prom-parser` | Debian's `python3-prometheus-client`, the Prometheus text format parser the metrics tests check `/metrics` with |
//! | `deploy-validate` | what checks `deploy/` offline: PyPI's `kubernetes-validate` and `python-hcl2` in a venv under `target/deploy-validate` (`scripts/install-deps.sh --tests`: `python3-venv` and PyPI) ([`deploy_validate`]) |
//! | `kubectl` | `kubectl` on `PATH`, whose built-in kustomize renders `deploy/k8s` (Debian packages none: required only where one is installed) |
//! | `moto` | moto, the S3 stand-in the chunk store is tested against, pinned in a venv under `target/moto` (`scripts/install-deps.sh --tests`: `python3-venv` and PyPI) ([`moto`]) |

use std::io::Write;

pub mod browser;
pub mod deploy_validate;
pub mod e2b_sdk;
pub mod image_cache;
pub mod mcp_sdk;
pub mod moto;
pub mod node;
pub mod pattern;
pub mod pinned_python;
pub mod postgres;
pub mod raw_tar;
pub mod sdk_python;
pub mod sdk_typescript;

/// Every part a test may skip for; `BERTH_REQUIRE` names only these (or `all`).
pub const PARTS: &[&str] = &[
    "root",
    "loop",
    "netns",
    "cap-sys-resource",
    "memory-cgroup",
    "berth-init",
    "sandbox",
    "qemu",
    "firecracker",
    "vm-images",
    "image-build",
    "e2fsprogs",
    "kmod",
    "cpio",
    "debootstrap",
    "python3",
    "cc",
    "perl",
    "claude-code",
    "box-tools",
    "shells",
    "browser",
    "pebble",
    "curl",
    "sqlite3",
    "e2b-sdk",
    "e2b-npm",
    "sdk-python",
    "sdk-typescript",
    "mcp-sdk",
    "postgres",
    "prom-parser",
    "deploy-validate",
    "kubectl",
    "moto",
];

/// The variable naming the parts a run requires.
pub const REQUIRE_VAR: &str = "BERTH_REQUIRE";
/// The variable naming the file each skip is appended to.
pub const LOG_VAR: &str = "BERTH_SKIP_LOG";

/// Says the calling test skips (or, within a test, skips one check) because this host
/// lacks `part` ([`PARTS`]), for reason `why`, and records it. Panics, failing the test
/// with the reason, when `BERTH_REQUIRE` requires `part`. The caller returns after it.
pub fn skip(part: &str, why: impl std::fmt::Display) {
    assert!(
        PARTS.contains(&part),
        "skip: `{part}` is not a part in berth_testkit::PARTS"
    );
    let line = format!("{part}: {why}");
    let required = std::env::var(REQUIRE_VAR).unwrap_or_default();
    if let Some(required) = requires(&required, part) {
        panic!("{REQUIRE_VAR}={required} requires `{part}`, but the test would skip: {line}");
    }
    eprintln!("SKIPPED: {line}");
    if let Some(log) = std::env::var_os(LOG_VAR) {
        record(std::path::Path::new(&log), &line);
    }
}

/// `Some(list)` when the comma `list` requires `part`. Panics on a name that is not a part
/// (a typo must not quietly require nothing).
fn requires<'a>(list: &'a str, part: &str) -> Option<&'a str> {
    let mut hit = false;
    for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        assert!(
            name == "all" || PARTS.contains(&name),
            "{REQUIRE_VAR}: `{name}` is not one of {PARTS:?} (or `all`)"
        );
        hit |= name == "all" || name == part;
    }
    hit.then_some(list)
}

/// Appends `<test>\t<part: why>` to `log` in one write (concurrent tests append whole
/// lines). The test is the thread's name (libtest names each test's thread after it),
/// qualified by the test binary's name.
fn record(log: &std::path::Path, line: &str) {
    let binary = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.file_stem()?.to_string_lossy().into_owned()))
        .map(|stem| match stem.rsplit_once('-') {
            // cargo names test binaries `<name>-<hash>`
            Some((name, _)) => name.to_owned(),
            None => stem,
        })
        .unwrap_or_default();
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("?");
    let entry = format!("{binary} {test}\t{}\n", line.replace(['\n', '\t'], " "));
    if let Some(dir) = log.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .and_then(|mut file| file.write_all(entry.as_bytes()));
    if let Err(e) = written {
        eprintln!("cannot record the skip in {}: {e}", log.display());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listed_part_or_all_is_required_and_others_are_not() {
        assert_eq!(requires("sandbox, qemu", "qemu"), Some("sandbox, qemu"));
        assert_eq!(requires("all", "firecracker"), Some("all"));
        assert_eq!(requires("sandbox,qemu", "firecracker"), None);
        assert_eq!(requires("", "qemu"), None);
    }

    #[test]
    #[should_panic(expected = "`qemu-kvm` is not one of")]
    fn an_unknown_required_part_is_refused() {
        requires("sandbox,qemu-kvm", "sandbox");
    }

    #[test]
    fn a_skip_is_recorded_as_one_line_naming_the_test() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("skips/skips.log");
        record(&log, "qemu: no\tqemu\nhere");
        record(&log, "root: not root");
        let text = std::fs::read_to_string(&log).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(
            lines[0]
                .ends_with("a_skip_is_recorded_as_one_line_naming_the_test\tqemu: no qemu here"),
            "{text}"
        );
        assert!(lines[1].starts_with("berth_testkit "), "{text}");
    }
}
