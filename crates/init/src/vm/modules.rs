//! The `modules` phase of a VM: the kernel's virtio drivers are modules (Debian's cloud
//! kernel builds ext4 in, but not virtio_blk or vsock), shipped in the initramfs under
//! `/lib/modules/<release>/` with a `modules.dep` made by `depmod -b` at image build.
//! They are loaded with `finit_module(2)` in dependency order: each module after
//! everything it needs. A module the kernel already has (built in, or loaded) is skipped.
//! No `modules.dep` at all means a kernel with the drivers built in (Firecracker's
//! `vmlinux`): nothing to do.

use std::collections::BTreeMap;
use std::ffi::CStr;
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// `MODULE_INIT_COMPRESSED_FILE`: the kernel decompresses `.ko.xz`/`.ko.zst`/`.ko.gz`.
const MODULE_INIT_COMPRESSED_FILE: libc::c_uint = 4;

#[derive(Debug, thiserror::Error)]
pub enum ModulesError {
    #[error("modules phase: cannot read {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("modules phase: modules.dep line {line}: {reason}")]
    Syntax { line: usize, reason: &'static str },
    #[error("modules phase: modules.dep lists {module} twice")]
    Duplicate { module: String },
    #[error("modules phase: {module} needs {needs}, which modules.dep does not list")]
    Missing { module: String, needs: String },
    #[error("modules phase: modules.dep has a dependency cycle: {}", cycle.join(" -> "))]
    Cycle { cycle: Vec<String> },
    #[error("modules phase: cannot load {path}")]
    Load {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// One line of `modules.dep`: a module's path (relative to the release directory) and
/// the paths of the modules it needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub path: String,
    pub needs: Vec<String>,
}

/// Parses `modules.dep`: `path: dep dep …` per line; blank lines and `#` comments skipped.
pub fn parse(text: &str) -> Result<Vec<Entry>, ModulesError> {
    let mut entries = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let syntax = |reason| ModulesError::Syntax {
            line: i + 1,
            reason,
        };
        let (path, needs) = line.split_once(':').ok_or(syntax("no ':'"))?;
        let path = path.trim();
        if path.is_empty() {
            return Err(syntax("no module before ':'"));
        }
        if !is_safe_relative(path) {
            return Err(syntax("a module path must be relative, without '..'"));
        }
        let needs: Vec<String> = needs.split_whitespace().map(str::to_owned).collect();
        if needs.iter().any(|n| !is_safe_relative(n)) {
            return Err(syntax("a module path must be relative, without '..'"));
        }
        entries.push(Entry {
            path: path.to_owned(),
            needs,
        });
    }
    Ok(entries)
}

fn is_safe_relative(path: &str) -> bool {
    !path.starts_with('/') && !path.split('/').any(|c| c == "..")
}

/// Every module of `entries`, each after all it needs; otherwise in file order.
pub fn load_order(entries: &[Entry]) -> Result<Vec<String>, ModulesError> {
    let mut index = BTreeMap::new();
    for (i, e) in entries.iter().enumerate() {
        if index.insert(e.path.as_str(), i).is_some() {
            return Err(ModulesError::Duplicate {
                module: e.path.clone(),
            });
        }
    }
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Visiting,
        Done,
    }
    let mut marks = vec![Mark::New; entries.len()];
    let mut order = Vec::with_capacity(entries.len());
    // Depth-first with an explicit stack (of entry index, next dependency to look at),
    // which is also the path for the cycle report.
    for root in 0..entries.len() {
        if marks[root] != Mark::New {
            continue;
        }
        let mut stack = vec![(root, 0usize)];
        marks[root] = Mark::Visiting;
        while let Some(&mut (at, ref mut next)) = stack.last_mut() {
            let Some(dep) = entries[at].needs.get(*next) else {
                marks[at] = Mark::Done;
                order.push(entries[at].path.clone());
                stack.pop();
                continue;
            };
            *next += 1;
            let Some(&d) = index.get(dep.as_str()) else {
                return Err(ModulesError::Missing {
                    module: entries[at].path.clone(),
                    needs: dep.clone(),
                });
            };
            match marks[d] {
                Mark::Done => {}
                Mark::New => {
                    marks[d] = Mark::Visiting;
                    stack.push((d, 0));
                }
                Mark::Visiting => {
                    let from = stack.iter().position(|&(i, _)| i == d).unwrap_or(0);
                    let mut cycle: Vec<String> = stack[from..]
                        .iter()
                        .map(|&(i, _)| entries[i].path.clone())
                        .collect();
                    cycle.push(entries[d].path.clone());
                    return Err(ModulesError::Cycle { cycle });
                }
            }
        }
    }
    Ok(order)
}

/// The kernel's name of a module file: `kernel/net/vmw_vsock/vsock.ko.xz` → `vsock`
/// (dashes become underscores, as in `/sys/module`).
pub fn module_name(path: &str) -> String {
    let file = path.rsplit('/').next().unwrap_or(path);
    let stem = file.split(".ko").next().unwrap_or(file);
    stem.replace('-', "_")
}

/// What [`load_all`] did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Loaded {
    pub loaded: Vec<String>,
    /// Built in or already loaded.
    pub present: Vec<String>,
}

/// Loads every module of `<release_dir>/modules.dep` in dependency order, each with its
/// parameters from the kernel command line `cmdline` ([`module_params`]). `sys_module` is
/// `/sys/module`, where a module the kernel has (loaded, or built in with parameters) has
/// a directory. A missing `modules.dep` loads nothing.
pub fn load_all(
    release_dir: &Path,
    sys_module: &Path,
    cmdline: &str,
) -> Result<Loaded, ModulesError> {
    let dep_path = release_dir.join("modules.dep");
    let text = match std::fs::read_to_string(&dep_path) {
        Ok(text) => text,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(Loaded::default()),
        Err(source) => {
            return Err(ModulesError::Read {
                path: dep_path,
                source,
            })
        }
    };
    let order = load_order(&parse(&text)?)?;
    let mut done = Loaded::default();
    for rel in order {
        let name = module_name(&rel);
        if sys_module.join(&name).exists() {
            done.present.push(name);
            continue;
        }
        let path = release_dir.join(&rel);
        match finit_module(&path, &module_params(cmdline, &name)) {
            Ok(()) => done.loaded.push(name),
            Err(err) if err.raw_os_error() == Some(libc::EEXIST) => done.present.push(name),
            Err(source) => return Err(ModulesError::Load { path, source }),
        }
    }
    Ok(done)
}

/// The parameters the kernel command line gives `module` (`<module>.<param>=<value>`, with
/// `-` and `_` alike in the name), space-separated, as modprobe passes them: the kernel
/// hands a built-in driver its parameters itself, a module only gets them from whoever
/// loads it. Firecracker describes its devices this way (`virtio_mmio.device=4K@0xd0000000:5`),
/// which a kernel built with `VIRTIO_MMIO_CMDLINE_DEVICES` reads; Debian's cloud kernel is
/// not (it finds virtio-mmio devices through ACPI, as on QEMU's microvm). Double quotes
/// group a value with spaces.
pub fn module_params(cmdline: &str, module: &str) -> String {
    let canonical = |s: &str| s.replace('-', "_");
    let want = canonical(module);
    cmdline_words(cmdline)
        .into_iter()
        .filter_map(|word| {
            let (name, param) = word.split_once('.')?;
            // `a.b` without `=` is a flag parameter; a dot after the `=` is in the value.
            if name.contains('=') || canonical(name) != want || param.is_empty() {
                return None;
            }
            Some(param.to_owned())
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The command line's words: split at spaces outside double quotes, quotes kept.
fn cmdline_words(cmdline: &str) -> Vec<String> {
    let (mut words, mut word, mut quoted) = (Vec::new(), String::new(), false);
    for c in cmdline.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                word.push(c);
            }
            c if c.is_whitespace() && !quoted => {
                if !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
            }
            c => word.push(c),
        }
    }
    if !word.is_empty() {
        words.push(word);
    }
    words
}

fn finit_module(path: &Path, params: &str) -> io::Result<()> {
    let file = std::fs::File::open(path)?;
    let compressed = [".ko.xz", ".ko.zst", ".ko.gz"]
        .iter()
        .any(|ext| path.to_string_lossy().ends_with(ext));
    let flags = if compressed {
        MODULE_INIT_COMPRESSED_FILE
    } else {
        0
    };
    let params = std::ffi::CString::new(params).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "a NUL in the module's parameters",
        )
    })?;
    // SAFETY: finit_module reads the open descriptor and a NUL-terminated string.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_finit_module,
            file.as_raw_fd(),
            params.as_ptr(),
            flags,
        )
    };
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// The running kernel's release (`uname -r`), which names its modules directory.
pub fn kernel_release() -> io::Result<String> {
    // SAFETY: utsname is plain old data; uname fills it with NUL-terminated strings.
    let mut uts: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `uts` is a valid, writable utsname.
    if unsafe { libc::uname(&raw mut uts) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel NUL-terminates `release` within the array.
    let release = unsafe { CStr::from_ptr(uts.release.as_ptr()) };
    Ok(release.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Debian 6.1's depmod output for the VM's drivers (trimmed paths).
    const DEBIAN: &str = "\
kernel/drivers/virtio/virtio_mmio.ko: kernel/drivers/virtio/virtio_ring.ko kernel/drivers/virtio/virtio.ko
kernel/drivers/virtio/virtio.ko: kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/virtio/virtio_ring.ko:
kernel/drivers/block/virtio_blk.ko: kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko
kernel/net/vmw_vsock/vmw_vsock_virtio_transport.ko: kernel/net/vmw_vsock/vmw_vsock_virtio_transport_common.ko kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko kernel/net/vmw_vsock/vsock.ko
kernel/net/vmw_vsock/vmw_vsock_virtio_transport_common.ko: kernel/net/vmw_vsock/vsock.ko
kernel/net/vmw_vsock/vsock.ko:
kernel/drivers/char/virtio_console.ko: kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko

# a comment
";

    fn names(order: &[String]) -> Vec<String> {
        order.iter().map(|p| module_name(p)).collect()
    }

    #[test]
    fn every_module_comes_after_what_it_needs() {
        let entries = parse(DEBIAN).unwrap();
        assert_eq!(entries.len(), 8);
        let order = load_order(&entries).unwrap();
        assert_eq!(
            names(&order),
            [
                "virtio_ring",
                "virtio",
                "virtio_mmio",
                "virtio_blk",
                "vsock",
                "vmw_vsock_virtio_transport_common",
                "vmw_vsock_virtio_transport",
                "virtio_console"
            ]
        );
        for e in &entries {
            let at = order.iter().position(|p| *p == e.path).unwrap();
            for n in &e.needs {
                assert!(
                    order.iter().position(|p| p == n).unwrap() < at,
                    "{n} after {}",
                    e.path
                );
            }
        }
    }

    #[test]
    fn cycles_missing_entries_and_bad_lines_are_refused() {
        let cycle = parse("a.ko: b.ko\nb.ko: c.ko\nc.ko: a.ko\n").unwrap();
        match load_order(&cycle) {
            Err(ModulesError::Cycle { cycle }) => {
                assert_eq!(cycle, ["a.ko", "b.ko", "c.ko", "a.ko"]);
            }
            other => panic!("{other:?}"),
        }
        let own = parse("a.ko: a.ko\n").unwrap();
        assert!(matches!(load_order(&own), Err(ModulesError::Cycle { .. })));
        let missing = parse("a.ko: gone.ko\n").unwrap();
        let err = load_order(&missing).unwrap_err();
        assert!(err.to_string().contains("a.ko needs gone.ko"), "{err}");
        let twice = parse("a.ko:\na.ko:\n").unwrap();
        assert!(matches!(
            load_order(&twice),
            Err(ModulesError::Duplicate { .. })
        ));
        for (text, line) in [
            ("a.ko:\nno colon here\n", 2),
            (": b.ko\n", 1),
            ("/abs/a.ko:\n", 1),
            ("a.ko: ../../etc/x.ko\n", 1),
        ] {
            match parse(text) {
                Err(ModulesError::Syntax { line: l, .. }) => assert_eq!(l, line, "{text}"),
                other => panic!("{text}: {other:?}"),
            }
        }
        assert_eq!(
            load_order(&parse("").unwrap()).unwrap(),
            Vec::<String>::new()
        );
    }

    #[test]
    fn module_parameters_come_from_the_command_line_as_modprobe_reads_them() {
        let cmdline = "console=ttyS0 reboot=k virtio_mmio.device=4K@0xd0000000:5 \
                       virtio-mmio.device=4K@0xd0001000:6 vsock.x=\"a b\" virtio_mmiox.y=1 \
                       foo=virtio_mmio.device=2 virtio_mmio. virtio_mmio.flag";
        assert_eq!(
            module_params(cmdline, "virtio_mmio"),
            "device=4K@0xd0000000:5 device=4K@0xd0001000:6 flag"
        );
        assert_eq!(module_params(cmdline, "vsock"), "x=\"a b\"");
        assert_eq!(module_params(cmdline, "virtio_blk"), "");
        assert_eq!(module_params("", "virtio_mmio"), "");
    }

    #[test]
    fn module_names_drop_the_path_and_compression() {
        assert_eq!(module_name("kernel/net/vmw_vsock/vsock.ko"), "vsock");
        assert_eq!(module_name("kernel/x/virtio-blk.ko.xz"), "virtio_blk");
        assert_eq!(module_name("a.ko.zst"), "a");
    }

    #[test]
    fn present_modules_are_skipped_and_no_modules_dep_is_nothing_to_do() {
        let release = tempfile::tempdir().unwrap();
        let sys = tempfile::tempdir().unwrap();
        assert_eq!(
            load_all(release.path(), sys.path(), "").unwrap(),
            Loaded::default()
        );
        std::fs::write(release.path().join("modules.dep"), "a.ko:\nb-c.ko: a.ko\n").unwrap();
        std::fs::create_dir(sys.path().join("a")).unwrap();
        std::fs::create_dir(sys.path().join("b_c")).unwrap();
        let done = load_all(release.path(), sys.path(), "").unwrap();
        assert_eq!(done.present, ["a", "b_c"]);
        assert!(done.loaded.is_empty());
        // A module the kernel lacks and whose file is missing: the error names the file.
        std::fs::write(release.path().join("modules.dep"), "a.ko:\nnew.ko: a.ko\n").unwrap();
        match load_all(release.path(), sys.path(), "") {
            Err(ModulesError::Load { path, source }) => {
                assert!(path.ends_with("new.ko"));
                assert_eq!(source.kind(), io::ErrorKind::NotFound);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_release_is_known() {
        assert!(!kernel_release().unwrap().is_empty());
    }
}
