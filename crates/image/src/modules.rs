//! Picking a kernel's modules for a VM: `depmod -b` (Debian's kmod) writes the package's
//! `modules.dep`, which gives each wanted module's dependencies; the chosen `.ko` files are
//! copied with a `modules.dep` and `modules.order` of their own.
//!
//! Modules are copied as they are. Debian 12's 6.1 kernels ship plain `.ko` files, which
//! berth-init loads directly; a compressed `.ko.xz`/`.ko.zst` (newer kernels) is copied
//! compressed, and loading it needs a kernel built with in-kernel decompression.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use crate::error::io;
use crate::tool::DEPMOD;
use crate::ImageError;

/// The modules chosen from one kernel's tree.
#[derive(Debug)]
pub(crate) struct ModuleSet {
    /// `<root>/lib/modules/<version>` the files come from.
    src: PathBuf,
    /// (path relative to `src`, its dependencies' paths) in load order.
    load_order: Vec<(String, Vec<String>)>,
}

const MODULES_DEP: &str = "modules.dep";
const MODULES_ORDER: &str = "modules.order";
const MODULES_BUILTIN: &str = "modules.builtin";

/// Runs `depmod -b` on the unpacked tree at `root` (`lib/modules/<version>` or, on a
/// merged-/usr package, `usr/lib/modules/<version>`) and picks `wanted` with everything
/// they need. A wanted module that is built in is left out; one that is neither is an error.
pub(crate) fn select(root: &Path, version: &str, wanted: &[&str]) -> Result<ModuleSet, ImageError> {
    let base = [root.to_path_buf(), root.join("usr")]
        .into_iter()
        .find(|b| b.join("lib/modules").join(version).is_dir())
        .ok_or(ImageError::NotAKernel {
            path: root.into(),
            expected: "lib/modules/<version>/ for the kernel's version",
        })?;
    let src = base.join("lib/modules").join(version);
    let mut cmd = DEPMOD.command()?;
    cmd.arg("-b").arg(&base).arg(version);
    DEPMOD.run(&mut cmd)?;
    let dep_path = src.join(MODULES_DEP);
    let deps = parse_dep(&std::fs::read_to_string(&dep_path).map_err(io("read", &dep_path))?);
    let builtin_path = src.join(MODULES_BUILTIN);
    let builtin: HashSet<String> = std::fs::read_to_string(&builtin_path)
        .unwrap_or_default()
        .lines()
        .map(module_name)
        .collect();
    let by_name: HashMap<String, &str> =
        deps.keys().map(|p| (module_name(p), p.as_str())).collect();

    let mut order = Vec::new();
    let mut done = HashSet::new();
    for want in wanted {
        let name = want.replace('-', "_");
        match by_name.get(&name) {
            Some(path) => visit(path, &deps, &mut done, &mut order),
            None if builtin.contains(&name) => {}
            None => {
                return Err(ImageError::MissingModule {
                    module: name,
                    version: version.into(),
                })
            }
        }
    }
    let load_order = order
        .into_iter()
        .map(|p| {
            let d = deps.get(&p).cloned().unwrap_or_default();
            (p, d)
        })
        .collect();
    Ok(ModuleSet { src, load_order })
}

/// Depth first: a module's dependencies go before it.
fn visit(
    path: &str,
    deps: &HashMap<String, Vec<String>>,
    done: &mut HashSet<String>,
    order: &mut Vec<String>,
) {
    if !done.insert(path.to_string()) {
        return;
    }
    for dep in deps.get(path).into_iter().flatten() {
        visit(dep, deps, done, order);
    }
    order.push(path.to_string());
}

impl ModuleSet {
    /// Copies the chosen modules to `dest` (`.../lib/modules/<version>`) with a
    /// `modules.dep` of just them, a `modules.order` in load order, and the kernel's
    /// `modules.builtin`.
    pub fn write(&self, dest: &Path) -> Result<(), ImageError> {
        std::fs::create_dir_all(dest).map_err(io("create the directory", dest))?;
        let mut dep = String::new();
        let mut order = String::new();
        for (path, deps) in &self.load_order {
            let from = self.src.join(path);
            let to = dest.join(path);
            if let Some(parent) = to.parent() {
                std::fs::create_dir_all(parent).map_err(io("create the directory", parent))?;
            }
            std::fs::copy(&from, &to).map_err(io("copy the module", &from))?;
            dep.push_str(&format!("{path}:"));
            for d in deps {
                dep.push(' ');
                dep.push_str(d);
            }
            dep.push('\n');
            order.push_str(path);
            order.push('\n');
        }
        write(&dest.join(MODULES_DEP), &dep)?;
        write(&dest.join(MODULES_ORDER), &order)?;
        let builtin = self.src.join(MODULES_BUILTIN);
        if builtin.is_file() {
            let to = dest.join(MODULES_BUILTIN);
            std::fs::copy(&builtin, &to).map_err(io("copy", &builtin))?;
        }
        Ok(())
    }

    /// The load order written by [`ModuleSet::write`] in `dir`.
    pub fn read_order(dir: &Path) -> Result<Vec<String>, ImageError> {
        let path = dir.join(MODULES_ORDER);
        Ok(std::fs::read_to_string(&path)
            .map_err(io("read", &path))?
            .lines()
            .filter(|l| !l.is_empty())
            .map(String::from)
            .collect())
    }
}

/// `modules.dep`: `path: dep dep ...` per line.
fn parse_dep(text: &str) -> HashMap<String, Vec<String>> {
    text.lines()
        .filter_map(|line| {
            let (path, deps) = line.split_once(':')?;
            let deps = deps.split_whitespace().map(String::from).collect();
            Some((path.trim().to_string(), deps))
        })
        .collect()
}

/// `kernel/drivers/virtio/virtio-mmio.ko.xz` → `virtio_mmio`.
fn module_name(path: &str) -> String {
    let file = path.rsplit('/').next().unwrap_or(path);
    let stem = file.split(".ko").next().unwrap_or(file);
    stem.replace('-', "_")
}

fn write(path: &Path, text: &str) -> Result<(), ImageError> {
    std::fs::write(path, text).map_err(io("write", path))
}

/// Copies a modules tree (regular files and directories; links are copied as links).
pub(crate) fn copy_tree(from: &Path, to: &Path) -> Result<(), ImageError> {
    let mut entries = Vec::new();
    crate::tree::walk(from, &mut entries)?;
    std::fs::create_dir_all(to).map_err(io("create the directory", to))?;
    for (rel, meta) in entries {
        let (src, dst) = (from.join(&rel), to.join(&rel));
        if meta.is_dir() {
            std::fs::create_dir_all(&dst).map_err(io("create the directory", &dst))?;
        } else if meta.file_type().is_symlink() {
            let target = std::fs::read_link(&src).map_err(io("read the link", &src))?;
            std::os::unix::fs::symlink(target, &dst).map_err(io("create the link", &dst))?;
        } else if meta.is_file() {
            std::fs::copy(&src, &dst).map_err(io("copy", &src))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_drop_dirs_suffixes_and_dashes() {
        assert_eq!(
            module_name("kernel/drivers/virtio/virtio_mmio.ko"),
            "virtio_mmio"
        );
        assert_eq!(module_name("kernel/x/vmw-vsock.ko.zst"), "vmw_vsock");
        assert_eq!(module_name("kernel/fs/ext4/ext4.ko"), "ext4");
    }

    #[test]
    fn dependencies_load_first_and_once() {
        let deps = parse_dep(
            "k/ring.ko:\nk/virtio.ko: k/ring.ko\nk/mmio.ko: k/virtio.ko k/ring.ko\n\
             k/blk.ko: k/virtio.ko k/ring.ko\n",
        );
        let (mut done, mut order) = (HashSet::new(), Vec::new());
        for m in ["k/mmio.ko", "k/blk.ko", "k/ring.ko"] {
            visit(m, &deps, &mut done, &mut order);
        }
        assert_eq!(order, ["k/ring.ko", "k/virtio.ko", "k/mmio.ko", "k/blk.ko"]);
    }

    #[test]
    fn selects_from_a_fake_kernel_tree_with_depmod() {
        if DEPMOD.locate().is_err() {
            berth_testkit::skip("kmod", "depmod (Debian package kmod) is not installed");
            return;
        }
        // depmod reads real ELF modules; a tree without any still gets a modules.dep, so
        // this checks the built-in and missing paths. The real kernel test covers the rest.
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("lib/modules/9.9.9");
        std::fs::create_dir_all(&src).unwrap();
        std::fs::write(src.join(MODULES_BUILTIN), "kernel/fs/ext4/ext4.ko\n").unwrap();
        let set = select(dir.path(), "9.9.9", &["ext4"]).unwrap();
        assert!(set.load_order.is_empty());
        match select(dir.path(), "9.9.9", &["virtio_blk"]) {
            Err(ImageError::MissingModule { module, .. }) => assert_eq!(module, "virtio_blk"),
            other => panic!("expected MissingModule, got {other:?}"),
        }
        assert!(matches!(
            select(dir.path(), "1.0", &["ext4"]),
            Err(ImageError::NotAKernel { .. })
        ));
    }
}
