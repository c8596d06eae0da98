//! What makes the `desktop` image of the `debian` one: its packages, and the links and
//! scripts added after debootstrap (`rootfs::rootfs_desktop` builds it).
//!
//! The desktop runs as the box's services (`xvfb`, `xfce`, `vnc`: berth-server's
//! `templates/desktop.rs`), started by berth-init at boot. E2B's desktop SDK starts a
//! desktop of its own through `commands` (`Xvfb :0 …`, `startxfce4`, `x11vnc`, noVNC from
//! `/opt/noVNC`); the additions make those calls find or join berth's, never fight it.

use crate::rootfs::{debootstrapped, Additions, DEBIAN_PACKAGES, DEBIAN_SUITE};
use crate::{DiskImage, ImageError, ImageStore, Progress};

/// What the `desktop` template adds to [`DEBIAN_PACKAGES`]: an X server with no screen
/// (Xvfb), XFCE with its file manager, a text editor and a terminal, a VNC server and
/// noVNC, and what drives and looks at a desktop (xdotool, scrot, xdpyinfo). debootstrap
/// resolves no virtual packages: `python3-cffi-backend` is the one that provides what
/// websockify depends on.
pub const DESKTOP_PACKAGES: &[&str] = &[
    "xvfb",
    "xfce4-session",
    "xfwm4",
    "xfce4-panel",
    "xfdesktop4",
    "xfce4-settings",
    "xfce4-terminal",
    "thunar",
    "mousepad",
    "x11vnc",
    "xdotool",
    "scrot",
    "x11-utils",
    "x11-xserver-utils",
    "novnc",
    "python3-websockify",
    "python3-cffi-backend",
    "dbus-x11",
    "xdg-utils",
    "net-tools",
    "fonts-dejavu-core",
];

/// The links and scripts of the `desktop` image.
///
/// - `/opt/noVNC`: where E2B's desktop SDK runs noVNC from (`cd /opt/noVNC/utils &&
///   ./novnc_proxy …`).
/// - `berth-vnc`: x11vnc under another name, for berth's VNC service, so that the SDK's
///   `pgrep -x x11vnc` and `pkill x11vnc`, meant for the server it starts itself, never
///   see or end berth's.
/// - `Xvfb` and `startxfce4` in `/usr/local/bin` (before `/usr/bin` on every `PATH`):
///   asked for a display that is already served, or a session that already runs, they
///   say so and end, so that the SDK's desktop is berth's; otherwise they run the real
///   ones, as they do for berth's own services, which start first.
pub const DESKTOP_ADDITIONS: Additions = Additions {
    links: &[
        ("opt/noVNC", "/usr/share/novnc"),
        ("usr/local/bin/berth-vnc", "/usr/bin/x11vnc"),
    ],
    scripts: &[
        ("usr/local/bin/Xvfb", XVFB_JOINS),
        ("usr/local/bin/startxfce4", STARTXFCE4_JOINS),
    ],
};

const XVFB_JOINS: &str = r#"#!/bin/sh
# berth: the box's desktop runs its X server as the `xvfb` service. Asked for a display
# that already answers, this uses it rather than fail to start a second server on it.
case "$1" in
:[0-9]*)
    if xdpyinfo -display "$1" >/dev/null 2>&1; then
        echo "berth: display $1 is already served (the box's xvfb service: berth service ls); using it" >&2
        exit 0
    fi
    ;;
esac
exec /usr/bin/Xvfb "$@"
"#;

const STARTXFCE4_JOINS: &str = r#"#!/bin/sh
# berth: the box's desktop runs its XFCE session as the `xfce` service. A second session
# on the same screen would fight it for the windows, so this joins the running one.
for comm in /proc/[0-9]*/comm; do
    if read -r name < "$comm" 2>/dev/null && [ "$name" = xfce4-session ]; then
        echo "berth: an XFCE session already runs (the box's xfce service: berth service ls); using it" >&2
        exit 0
    fi
done
exec /usr/bin/startxfce4 "$@"
"#;

/// The `desktop` template: bookworm as `debian` is made, with [`DEBIAN_PACKAGES`] and
/// [`DESKTOP_PACKAGES`], then [`DESKTOP_ADDITIONS`]. Needs root; takes 4–6 minutes and
/// about 1 GB (a 1156 MiB image, 945 MiB on disk). Keyed as `debian` is, plus the
/// additions.
pub fn rootfs_desktop(
    store: &ImageStore,
    progress: &dyn Progress,
) -> Result<DiskImage, ImageError> {
    let packages: Vec<&str> = DEBIAN_PACKAGES
        .iter()
        .chain(DESKTOP_PACKAGES)
        .copied()
        .collect();
    debootstrapped(store, DEBIAN_SUITE, &packages, DESKTOP_ADDITIONS, progress)
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::process::{Command, Output};

    use super::*;
    use crate::rootfs::{add_links, add_scripts};

    #[test]
    fn links_are_made_only_to_what_the_tree_holds() {
        let dir = tempfile::tempdir().unwrap();
        let tree = dir.path();
        std::fs::create_dir_all(tree.join("usr/share/novnc")).unwrap();
        std::fs::create_dir_all(tree.join("usr/bin")).unwrap();
        std::fs::write(tree.join("usr/bin/x11vnc"), "").unwrap();
        add_links(tree, DESKTOP_ADDITIONS.links).unwrap();
        for (path, target) in DESKTOP_ADDITIONS.links {
            assert_eq!(
                std::fs::read_link(tree.join(path)).unwrap(),
                Path::new(target)
            );
        }
        let err = add_links(tree, &[("usr/local/bin/gone", "/usr/bin/gone")]).unwrap_err();
        assert!(
            matches!(&err, ImageError::LinkTarget { link, .. } if link == "/usr/local/bin/gone"),
            "{err}"
        );
        assert!(tree.join("usr/local/bin/gone").symlink_metadata().is_err());
    }

    fn run(script: &str, args: &[&str], path: &Path) -> Output {
        Command::new("/bin/sh")
            .arg("-c")
            .arg(script)
            .arg("sh")
            .args(args)
            .env("PATH", path)
            .output()
            .unwrap()
    }

    #[test]
    fn xvfb_on_a_served_display_uses_it_and_starts_no_server() {
        let dir = tempfile::tempdir().unwrap();
        let answers = |code: u8| {
            let xdpyinfo = dir.path().join("xdpyinfo");
            std::fs::write(&xdpyinfo, format!("#!/bin/sh\nexit {code}\n")).unwrap();
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&xdpyinfo, std::fs::Permissions::from_mode(0o755)).unwrap();
        };
        answers(0);
        let joined = run(
            XVFB_JOINS,
            &[":0", "-screen", "0", "800x600x24"],
            dir.path(),
        );
        assert!(joined.status.success(), "{joined:?}");
        assert!(String::from_utf8_lossy(&joined.stderr).contains("display :0 is already served"));
        // Not served: the real server is run (none at /usr/bin here, or it has no display).
        answers(1);
        let started = run(XVFB_JOINS, &[":0", "-version"], dir.path());
        assert!(!String::from_utf8_lossy(&started.stderr).contains("already served"));
    }

    #[test]
    fn startxfce4_beside_a_running_session_joins_it() {
        let dir = tempfile::tempdir().unwrap();
        let alone = run(STARTXFCE4_JOINS, &[], dir.path());
        assert!(!String::from_utf8_lossy(&alone.stderr).contains("already runs"));
        // A process whose name is the session's.
        let session = dir.path().join("xfce4-session");
        std::fs::copy("/bin/sleep", &session).unwrap();
        let mut running = Command::new(&session).arg("30").spawn().unwrap();
        let joined = run(STARTXFCE4_JOINS, &[], dir.path());
        running.kill().unwrap();
        running.wait().unwrap();
        assert!(joined.status.success(), "{joined:?}");
        assert!(String::from_utf8_lossy(&joined.stderr).contains("an XFCE session already runs"));
    }

    #[test]
    fn scripts_are_executable_and_replace_what_was_there_without_following_it() {
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("outside");
        std::fs::write(&outside, "kept").unwrap();
        let tree = dir.path().join("tree");
        std::fs::create_dir_all(tree.join("usr/local/bin")).unwrap();
        std::os::unix::fs::symlink(&outside, tree.join("usr/local/bin/Xvfb")).unwrap();
        add_scripts(&tree, DESKTOP_ADDITIONS.scripts).unwrap();
        use std::os::unix::fs::PermissionsExt as _;
        for (path, text) in DESKTOP_ADDITIONS.scripts {
            let file = tree.join(path);
            assert_eq!(std::fs::read_to_string(&file).unwrap(), *text);
            let meta = file.symlink_metadata().unwrap();
            assert!(meta.is_file());
            assert_eq!(meta.permissions().mode() & 0o777, 0o755);
        }
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "kept");
    }
}
