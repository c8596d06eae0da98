//! The built-in `desktop` template: the `desktop` image (bookworm with Xvfb, XFCE, x11vnc,
//! noVNC, xdotool and scrot: `berth_image::DESKTOP_PACKAGES`) and three services that make a
//! desktop at every boot, all as the box user:
//!
//! - `xvfb`: the X server, display [`DESKTOP_DISPLAY`], with no screen of its own. Clients
//!   reach it through its socket in `/tmp/.X11-unix` (a tmpfs in every box), never TCP.
//! - `xfce`: the XFCE session under its own D-Bus session bus, after `xvfb`; ready once its
//!   desktop and panel are drawn (minutes under a VM without KVM, hence its longer timeout).
//! - `vnc`: x11vnc on 127.0.0.1:[`DESKTOP_VNC_PORT`], after `xvfb`, run as `berth-vnc` (a
//!   link in the image) so that E2B's desktop SDK, which starts and kills an `x11vnc` of its
//!   own on 5900, never touches it.
//!
//! The screen is [`DESKTOP_RESOLUTION_ENV`] (`WxH`) at [`DESKTOP_DPI_ENV`] dots per inch,
//! read by `xvfb` at each start: a box sets them in its env (which goes over each service's
//! env), a user template in its services' env. The names are `crate::desktop::names`, which
//! the computer-use API finds the desktop by; `builtin.rs` makes the template of these parts.

use std::collections::BTreeMap;

use berth_protocol::guest::BoxUser;
use berth_protocol::service::{
    ReadyCheck, RestartPolicy, ServiceConfig, DEFAULT_READY_TIMEOUT_S,
    DEFAULT_SERVICE_MAX_RESTARTS, DEFAULT_STOP_TIMEOUT_S,
};
use berth_runtime::Limits;

use crate::desktop::names::{
    DEFAULT_DESKTOP_DPI, DEFAULT_DESKTOP_RESOLUTION, DESKTOP_DISPLAY, DESKTOP_DPI_ENV,
    DESKTOP_RESOLUTION_ENV, DESKTOP_VNC_PORT, VNC_SERVICE, XFCE_SERVICE, XVFB_SERVICE,
};

/// XFCE and a few applications do not fit in the default 512 MiB, nor their threads in the
/// default 256 pids.
const MEMORY_MIB: u64 = 2048;
const PIDS: u64 = 1024;
/// Under a VM without KVM (TCG), XFCE's processes took 150 s to start on a busy 2-core host;
/// one not ready in time is restarted, which would start it all over again.
pub const XFCE_READY_TIMEOUT_S: u64 = 300;
/// Seconds between SIGTERM and SIGKILL for the VNC server (see `services`).
const VNC_STOP_TIMEOUT_S: u64 = 1;
/// XFCE is up once it is on the screen: its settings daemon runs (it holds the keyboard
/// shortcuts, ctrl+alt+t among them), the desktop window and the panel's plugins are mapped,
/// and the screen, read pixel by pixel, row by row, is [`DRAWN_RUNS`] runs of one colour or
/// more. Mapped is not drawn: under TCG a screenshot taken when every window was mapped
/// showed one colour for seconds (the window manager composites, and paints the screen
/// later). The whole screen, not where the panel is by default: a user may move the panel,
/// and a session that is never ready is restarted every `ready_timeout_s`. The processes are
/// read from `/proc` by shell builtins, and the runs counted by coreutils in a PPM (`scrot`
/// writes one for that suffix), stopping at enough: under TCG every program a check starts
/// costs a second or more.
fn xfce_up() -> String {
    format!(
        "s=; for c in /proc/[0-9]*/comm; do read -r n < $c && \
         [ \"$n\" = xfsettingsd ] && s=1; done 2>/dev/null; [ \"$s\" = 1 ] && \
         xdotool search --onlyvisible --class xfdesktop >/dev/null && \
         xdotool search --onlyvisible --class Wrapper >/dev/null && \
         set -- $(xdotool getdisplaygeometry) && f=$(mktemp --suffix=.ppm) && \
         scrot -o \"$f\" && n=$(tail -c $(($1 * $2 * 3)) \"$f\" | od -An -v -tx1 -w3 | \
         uniq | head -n {DRAWN_RUNS} | wc -l); rm -f \"$f\"; [ \"${{n:-0}}\" -ge {DRAWN_RUNS} ]"
    )
}
/// A screen not yet drawn is one run of one colour; a drawn desktop (the panel, the icons)
/// was 10415.
const DRAWN_RUNS: u32 = 64;

/// The template's limits: more than the defaults.
pub(super) fn limits() -> Limits {
    Limits {
        memory_mib: MEMORY_MIB,
        pids: PIDS,
        ..Limits::default()
    }
}

/// The template's services.
pub(super) fn services() -> Vec<ServiceConfig> {
    let xvfb = format!(
        "exec Xvfb {DESKTOP_DISPLAY} -screen 0 \"${{{DESKTOP_RESOLUTION_ENV}:-{DEFAULT_DESKTOP_RESOLUTION}}}\"x24 \
         -dpi \"${{{DESKTOP_DPI_ENV}:-{DEFAULT_DESKTOP_DPI}}}\" -nolisten tcp"
    );
    let port = DESKTOP_VNC_PORT.to_string();
    vec![
        service(
            XVFB_SERVICE,
            &["/bin/sh", "-c", &xvfb],
            ReadyCheck::Command(strings(&["xdpyinfo", "-display", DESKTOP_DISPLAY])),
            &[],
        ),
        {
            let mut xfce = service(
                XFCE_SERVICE,
                &["dbus-launch", "--exit-with-session", "startxfce4"],
                ReadyCheck::Command(strings(&["/bin/sh", "-c", &xfce_up()])),
                &[XVFB_SERVICE],
            );
            xfce.ready_timeout_s = XFCE_READY_TIMEOUT_S;
            // No accessibility bus runs: without this every GTK program the session
            // starts prints a warning about it into the terminal it runs in.
            xfce.env.insert("NO_AT_BRIDGE".into(), "1".into());
            xfce
        },
        {
            let mut vnc = service(
                VNC_SERVICE,
                &[
                    "berth-vnc",
                    "-display",
                    DESKTOP_DISPLAY,
                    "-rfbport",
                    &port,
                    "-localhost",
                    "-forever",
                    "-shared",
                    "-nopw",
                    "-quiet",
                ],
                ReadyCheck::Port(DESKTOP_VNC_PORT),
                &[XVFB_SERVICE],
            );
            // x11vnc ignores SIGTERM while a viewer is connected; it holds nothing that a
            // SIGKILL loses, so a box being watched stops without waiting out the default.
            vnc.stop_timeout_s = VNC_STOP_TIMEOUT_S;
            vnc
        },
    ]
}

/// A service of the desktop: the box user's, on its display, restarted whatever its end.
fn service(name: &str, command: &[&str], ready: ReadyCheck, after: &[&str]) -> ServiceConfig {
    ServiceConfig {
        name: name.into(),
        command: strings(command),
        user: BoxUser::User,
        env: BTreeMap::from([("DISPLAY".into(), DESKTOP_DISPLAY.into())]),
        cwd: None,
        restart: RestartPolicy::Always,
        ready: Some(ready),
        after: strings(after),
        keep_awake: false,
        max_restarts: DEFAULT_SERVICE_MAX_RESTARTS,
        ready_timeout_s: DEFAULT_READY_TIMEOUT_S,
        stop_timeout_s: DEFAULT_STOP_TIMEOUT_S,
    }
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/templates.md shows the template as a file; that file must make this template.
    #[test]
    fn the_documented_file_makes_the_builtin_desktop() {
        let doc = include_str!("../../../../docs/templates.md");
        let section = doc
            .split_once("### `desktop`")
            .expect("docs/templates.md has a `desktop` section")
            .1;
        let toml = section
            .split_once("```toml\n")
            .and_then(|(_, rest)| rest.split_once("```"))
            .expect("the section shows the template's file")
            .0;
        let parsed =
            super::super::parse_template(std::path::Path::new("desktop.toml"), toml).unwrap();
        assert_eq!(parsed.base, super::super::Base::Desktop);
        assert_eq!(parsed.limits, limits());
        assert_eq!(parsed.services, services());
        assert_eq!(parsed.harness, None);
        assert_eq!(parsed.disk_mib, berth_runtime::DEFAULT_DISK_MIB);
    }

    #[test]
    fn the_screen_comes_from_the_box_env_and_vnc_is_on_its_own_port() {
        assert!(limits().memory_mib >= 2048);
        let services = services();
        let names: Vec<&str> = services.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["xvfb", "xfce", "vnc"]);
        let xvfb = &services[0].command[2];
        assert!(
            xvfb.contains("\"${DESKTOP_RESOLUTION:-1024x768}\"x24")
                && xvfb.contains("-dpi \"${DESKTOP_DPI:-96}\"")
                && xvfb.ends_with("-nolisten tcp"),
            "{xvfb}"
        );
        assert!(
            crate::desktop::SETTLE_DEADLINE_S >= services[1].ready_timeout_s,
            "a desktop call gives up before XFCE may be ready"
        );
        let vnc = &services[2];
        assert_eq!(vnc.command[0], "berth-vnc");
        assert_eq!(vnc.ready, Some(ReadyCheck::Port(5910)));
        for s in &services {
            assert_eq!(s.env["DISPLAY"], ":0");
            assert_eq!((s.user, s.restart), (BoxUser::User, RestartPolicy::Always));
        }
        // A box's own size goes over the services' env.
        let box_env = BTreeMap::from([("DESKTOP_RESOLUTION".into(), "1920x1080".into())]);
        let with = crate::box_env::services_with(services, &box_env);
        assert_eq!(with[0].env["DESKTOP_RESOLUTION"], "1920x1080");
        assert_eq!(with[0].env["DISPLAY"], ":0");
    }
}
