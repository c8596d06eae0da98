//! Template rootfs images: `minimal` (busybox-static from apt), `debian` (debootstrap
//! minbase; `desktop_image.rs` adds X, XFCE and VNC to it), or a directory or tarball of
//! the user's; each with berth's skeleton added and made a read-only ext4 image
//! `<images>/rootfs/<key>.ext4`.

use std::ffi::OsString;
use std::path::Path;
use std::process::Command;

use crate::disk::{read_only_image, ROOTFS_LABEL};
use crate::error::io;
use crate::key::KeyBuilder;
use crate::tool::{Tool, DEBOOTSTRAP};
use crate::{apt, skeleton, DiskImage, ImageError, ImageStore, Progress};

/// The busybox package the `minimal` template is made of.
pub const BUSYBOX_PACKAGE: &str = "busybox-static";
/// The Debian mirror debootstrap fetches from.
pub const DEBIAN_MIRROR: &str = "http://deb.debian.org/debian";
/// The `debian` template's suite.
pub const DEBIAN_SUITE: &str = "bookworm";
/// What the `debian` template adds to minbase.
pub const DEBIAN_PACKAGES: &[&str] =
    &["ca-certificates", "curl", "python3", "procps", "util-linux"];
/// What an image adds to its tree after debootstrap.
#[derive(Debug, Clone, Copy)]
pub struct Additions {
    /// `(path in the image, target)`; the target must be in the tree.
    pub links: &'static [(&'static str, &'static str)],
    /// `(path in the image, text)`: executable files (0755, root's), over anything there.
    pub scripts: &'static [(&'static str, &'static str)],
}

impl Additions {
    pub const NONE: Additions = Additions {
        links: &[],
        scripts: &[],
    };
}

const CP: Tool = Tool {
    name: "cp",
    package: "coreutils",
};
const TAR: Tool = Tool {
    name: "tar",
    package: "tar",
};

/// The `minimal` template: busybox-static (`/bin/busybox` and a link per applet) and the
/// skeleton. Built once per busybox version.
pub fn rootfs_minimal(
    store: &ImageStore,
    progress: &dyn Progress,
) -> Result<DiskImage, ImageError> {
    progress.stage("resolve busybox-static");
    let record = apt::candidate(store, BUSYBOX_PACKAGE, progress)?;
    let base = KeyBuilder::new("rootfs")
        .field("base", "minimal")
        .field("busybox", &record.version);
    stored_or_built(store, base, None, progress, |scratch, tree| {
        let (download, unpacked) = (scratch.join("download"), scratch.join("unpacked"));
        for d in [&download, &unpacked, tree] {
            std::fs::create_dir(d).map_err(io("create the directory", d))?;
        }
        apt::fetch_and_unpack(&record, &download, &unpacked, progress)?;
        progress.stage("lay out the minimal rootfs");
        install_busybox(&unpacked.join("bin/busybox"), tree)
    })
}

/// The rootfs image keyed by `base` and the skeleton's fingerprint: the stored one, else
/// built. Building checks for root when `needs_root` names what needs it, then `fill`
/// lays the base out at `tree` (not created yet) inside a fresh `scratch` dir it may also
/// use; the skeleton is added and the tree made a read-only image.
fn stored_or_built(
    store: &ImageStore,
    base: KeyBuilder,
    needs_root: Option<&'static str>,
    progress: &dyn Progress,
    fill: impl FnOnce(&Path, &Path) -> Result<(), ImageError>,
) -> Result<DiskImage, ImageError> {
    let key = base.field("skeleton", skeleton::fingerprint()).finish();
    let path = store.rootfs_path(&key);
    if let Some(image) = DiskImage::existing(key.clone(), path.clone()) {
        return Ok(image);
    }
    if let Some(what) = needs_root.filter(|_| !is_root()) {
        return Err(ImageError::NeedsRoot { what });
    }
    let scratch = store.scratch("rootfs")?;
    let tree = scratch.path().join("tree");
    fill(scratch.path(), &tree)?;
    skeleton::apply(&tree)?;
    progress.stage("make the rootfs image");
    read_only_image(&tree, scratch.path(), ROOTFS_LABEL, key, &path)
}

/// Copies busybox to `<tree>/bin/busybox` and links every applet (`busybox --list-full`,
/// run on the host: the binary is static) to it.
fn install_busybox(busybox: &Path, tree: &Path) -> Result<(), ImageError> {
    use std::os::unix::fs::PermissionsExt;
    let bin = tree.join("bin");
    std::fs::create_dir_all(&bin).map_err(io("create the directory", &bin))?;
    let dest = bin.join("busybox");
    std::fs::copy(busybox, &dest).map_err(io("copy busybox to", &dest))?;
    std::fs::set_permissions(&dest, std::fs::Permissions::from_mode(0o755))
        .map_err(io("chmod", &dest))?;
    let tool = Tool {
        name: "busybox",
        package: BUSYBOX_PACKAGE,
    };
    let list = tool.run(Command::new(&dest).arg("--list-full"))?;
    for applet in String::from_utf8_lossy(&list).lines() {
        let applet = applet.trim().trim_start_matches('/');
        if applet.is_empty() || applet == "bin/busybox" || applet.split('/').any(|c| c == "..") {
            continue;
        }
        let link = tree.join(applet);
        if link.symlink_metadata().is_ok() {
            continue;
        }
        if let Some(parent) = link.parent() {
            std::fs::create_dir_all(parent).map_err(io("create the directory", parent))?;
        }
        std::os::unix::fs::symlink("/bin/busybox", &link).map_err(io("create the link", &link))?;
    }
    Ok(())
}

/// The `debian` template: `debootstrap --variant=minbase --include=<packages>` of `suite`
/// from [`DEBIAN_MIRROR`], apt's caches emptied, and the skeleton. Needs root; takes about
/// 40 s and 275 MB for bookworm with [`DEBIAN_PACKAGES`] here. Keyed by suite, mirror and
/// package list (not by the day's package versions: rebuild by removing the image).
pub fn rootfs_debian(
    store: &ImageStore,
    suite: &str,
    packages: &[&str],
    progress: &dyn Progress,
) -> Result<DiskImage, ImageError> {
    debootstrapped(store, suite, packages, Additions::NONE, progress)
}

/// debootstrap of `suite` with `packages`, apt's caches emptied, then `additions`.
pub(crate) fn debootstrapped(
    store: &ImageStore,
    suite: &str,
    packages: &[&str],
    additions: Additions,
    progress: &dyn Progress,
) -> Result<DiskImage, ImageError> {
    let mut packages: Vec<&str> = packages.to_vec();
    packages.sort_unstable();
    packages.dedup();
    // Validate before anything touches the disk.
    let args_check = debootstrap_args(suite, &packages, Path::new("/x"), DEBIAN_MIRROR)?;
    drop(args_check);
    let mut base = KeyBuilder::new("rootfs")
        .field("base", "debootstrap")
        .field("suite", suite)
        .field("mirror", DEBIAN_MIRROR)
        .field("packages", packages.join(","));
    // Only an image with additions keys them, so the `debian` images already built keep
    // their keys.
    if !additions.links.is_empty() {
        let listed: Vec<String> = additions
            .links
            .iter()
            .map(|(l, t)| format!("{l}->{t}"))
            .collect();
        base = base.field("links", listed.join(","));
    }
    for (path, text) in additions.scripts {
        base = base.field(&format!("script {path}"), text);
    }
    stored_or_built(store, base, Some("debootstrap"), progress, |_, tree| {
        let mut cmd = DEBOOTSTRAP.command()?;
        cmd.args(debootstrap_args(suite, &packages, tree, DEBIAN_MIRROR)?);
        progress.stage(&format!("debootstrap {suite} (minutes)"));
        let mut last = String::new();
        DEBOOTSTRAP.run_streaming(&mut cmd, |line| {
            if let Some(stage) = debootstrap_stage(line, &mut last) {
                progress.stage(&stage);
            }
        })?;
        progress.stage("clean apt caches");
        for dir in ["var/cache/apt/archives", "var/lib/apt/lists"] {
            empty_files(&tree.join(dir))?;
        }
        add_links(tree, additions.links)?;
        add_scripts(tree, additions.scripts)
    })
}

/// A rootfs from a directory of the user's (copied with `cp -a`, owners and modes kept;
/// the user's tree is not changed), with the skeleton added. Keyed by the tree's content.
pub fn rootfs_from_dir(
    store: &ImageStore,
    dir: &Path,
    progress: &dyn Progress,
) -> Result<DiskImage, ImageError> {
    progress.stage(&format!("hash {}", dir.display()));
    let base = KeyBuilder::new("rootfs")
        .field("base", "dir")
        .tree("tree", dir)?;
    stored_or_built(store, base, None, progress, |_, tree| {
        progress.stage(&format!("copy {}", dir.display()));
        let mut src = dir.as_os_str().to_owned();
        src.push("/.");
        let mut cmd = CP.command()?;
        cmd.arg("-a").arg(src).arg(tree);
        CP.run(&mut cmd)?;
        Ok(())
    })
}

/// A rootfs from a tarball (any compression GNU tar detects), owners kept numerically,
/// with the skeleton added. Keyed by the tarball's bytes.
pub fn rootfs_from_tarball(
    store: &ImageStore,
    tarball: &Path,
    progress: &dyn Progress,
) -> Result<DiskImage, ImageError> {
    let base = KeyBuilder::new("rootfs")
        .field("base", "tarball")
        .file("tarball", tarball)?;
    stored_or_built(store, base, None, progress, |_, tree| {
        std::fs::create_dir(tree).map_err(io("create the directory", tree))?;
        progress.stage(&format!("unpack {}", tarball.display()));
        let mut cmd = TAR.command()?;
        cmd.args(["-x", "-p", "--numeric-owner", "-f"])
            .arg(tarball)
            .arg("-C")
            .arg(tree);
        TAR.run(&mut cmd)?;
        Ok(())
    })
}

/// debootstrap's arguments. Suite and packages are checked so none can pass as an option.
pub(crate) fn debootstrap_args(
    suite: &str,
    packages: &[&str],
    target: &Path,
    mirror: &str,
) -> Result<Vec<OsString>, ImageError> {
    let suite_ok = !suite.is_empty()
        && suite.starts_with(|c: char| c.is_ascii_lowercase())
        && suite
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !suite_ok {
        return Err(ImageError::Invalid {
            what: "Debian suite",
            value: suite.into(),
            why: "lower-case letters, digits and - only (e.g. bookworm)",
        });
    }
    for p in packages {
        apt::validate_name(p)?;
    }
    let mut args: Vec<OsString> = vec!["--variant=minbase".into()];
    if !packages.is_empty() {
        args.push(format!("--include={}", packages.join(",")).into());
    }
    args.push(suite.into());
    args.push(target.into());
    args.push(mirror.into());
    Ok(args)
}

/// The stage a debootstrap output line starts, if any: its phases ("Installing core
/// packages...") each, and its per-package lines ("Retrieving sed 4.9-1", "Extracting
/// sed...") once per verb, so a few hundred packages make a handful of stages.
fn debootstrap_stage(line: &str, last_verb: &mut String) -> Option<String> {
    const PER_PACKAGE: &[&str] = &[
        "Retrieving",
        "Validating",
        "Extracting",
        "Unpacking",
        "Configuring",
    ];
    let msg = line.strip_prefix("I: ")?.trim();
    let words: Vec<&str> = msg.split_whitespace().collect();
    let verb = *words.first()?;
    let per_package = PER_PACKAGE.contains(&verb)
        && ((words.len() == 2 && msg.ends_with("..."))
            || (words.len() == 3 && matches!(verb, "Retrieving" | "Validating")));
    if !per_package {
        last_verb.clear();
        return Some(format!("debootstrap: {msg}"));
    }
    // Retrieving and Validating alternate per package: one stage for both.
    let group = if verb == "Validating" {
        "Retrieving"
    } else {
        verb
    };
    if group == last_verb {
        return None;
    }
    *last_verb = group.to_string();
    Some(format!("debootstrap: {} packages", group.to_lowercase()))
}

/// Makes each `(path, target)` link in `tree`, after checking that the target is there: a
/// package that moved it fails the build rather than the boxes.
pub(crate) fn add_links(tree: &Path, links: &[(&str, &str)]) -> Result<(), ImageError> {
    for (path, target) in links {
        // Not followed: an absolute link in the tree would lead to the host's file.
        if tree
            .join(target.trim_start_matches('/'))
            .symlink_metadata()
            .is_err()
        {
            return Err(ImageError::LinkTarget {
                link: format!("/{path}"),
                target: (*target).to_owned(),
            });
        }
        let link = tree.join(path);
        if let Some(parent) = link.parent() {
            std::fs::create_dir_all(parent).map_err(io("create the directory", parent))?;
        }
        std::os::unix::fs::symlink(target, &link).map_err(io("create the link", &link))?;
    }
    Ok(())
}

pub(crate) fn add_scripts(tree: &Path, scripts: &[(&str, &str)]) -> Result<(), ImageError> {
    use std::os::unix::fs::PermissionsExt as _;
    for (path, text) in scripts {
        let file = tree.join(path);
        if let Some(parent) = file.parent() {
            std::fs::create_dir_all(parent).map_err(io("create the directory", parent))?;
        }
        // A link there would be followed by the write, out of the tree.
        if file.symlink_metadata().is_ok() {
            std::fs::remove_file(&file).map_err(io("remove", &file))?;
        }
        std::fs::write(&file, text).map_err(io("write", &file))?;
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o755))
            .map_err(io("chmod", &file))?;
    }
    Ok(())
}

/// Removes the files (not the directories) directly in `dir`, if it exists.
fn empty_files(dir: &Path) -> Result<(), ImageError> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.symlink_metadata().is_ok_and(|m| !m.is_dir()) {
            std::fs::remove_file(&path).map_err(io("remove", &path))?;
        }
    }
    Ok(())
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debootstrap_command_is_minbase_with_the_packages() {
        let args = debootstrap_args(
            "bookworm",
            DEBIAN_PACKAGES,
            Path::new("/t/tree"),
            DEBIAN_MIRROR,
        )
        .unwrap();
        let args: Vec<_> = args.iter().map(|a| a.to_str().unwrap()).collect();
        assert_eq!(
            args,
            [
                "--variant=minbase",
                "--include=ca-certificates,curl,python3,procps,util-linux",
                "bookworm",
                "/t/tree",
                "http://deb.debian.org/debian"
            ]
        );
        let none = debootstrap_args("trixie", &[], Path::new("/t"), DEBIAN_MIRROR).unwrap();
        assert_eq!(none.len(), 4);
    }

    #[test]
    fn debootstrap_output_becomes_a_few_stages() {
        let out = "I: Retrieving InRelease\nI: Retrieving Packages\nI: Validating Packages\n\
            I: Resolving dependencies of required packages...\nW: something\n\
            I: Retrieving sed 4.9-1\nI: Validating sed 4.9-1\nI: Retrieving tar 1.34\n\
            I: Validating tar 1.34\nI: Extracting sed...\nI: Extracting tar...\n\
            I: Installing core packages...\nI: Unpacking sed...\nI: Unpacking tar...\n\
            I: Base system installed successfully.\n";
        let mut last = String::new();
        let stages: Vec<String> = out
            .lines()
            .filter_map(|l| debootstrap_stage(l, &mut last))
            .collect();
        assert_eq!(
            stages,
            [
                "debootstrap: Retrieving InRelease",
                "debootstrap: Retrieving Packages",
                "debootstrap: Validating Packages",
                "debootstrap: Resolving dependencies of required packages...",
                "debootstrap: retrieving packages",
                "debootstrap: extracting packages",
                "debootstrap: Installing core packages...",
                "debootstrap: unpacking packages",
                "debootstrap: Base system installed successfully.",
            ]
        );
    }

    #[test]
    fn bad_suites_and_packages_are_refused() {
        for suite in ["", "--foreign", "Bookworm", "a b", "../x"] {
            assert!(
                debootstrap_args(suite, &[], Path::new("/t"), DEBIAN_MIRROR).is_err(),
                "{suite}"
            );
        }
        assert!(
            debootstrap_args("bookworm", &["curl", "--x"], Path::new("/t"), DEBIAN_MIRROR).is_err()
        );
        assert!(debootstrap_args("bookworm", &["a,b"], Path::new("/t"), DEBIAN_MIRROR).is_err());
    }
}
