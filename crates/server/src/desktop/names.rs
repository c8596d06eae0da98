//! The names a desktop box is made of: its display, its services, its VNC port and the env
//! variables that size its screen. The `desktop` template (`crate::templates::desktop`) makes
//! a box of them and the computer-use API (`crate::ops::desktop`) finds its desktop by them;
//! this file imports nothing, so both can.

/// The X display of the desktop, in every box of the template.
pub const DESKTOP_DISPLAY: &str = ":0";
/// The services' names.
pub const XVFB_SERVICE: &str = "xvfb";
pub const XFCE_SERVICE: &str = "xfce";
pub const VNC_SERVICE: &str = "vnc";
/// The port of the desktop's VNC server, on 127.0.0.1 in the box (5900, VNC's own, is left to
/// E2B's SDK).
pub const DESKTOP_VNC_PORT: u16 = 5910;
/// The box env variable giving the screen's size, `WxH`.
pub const DESKTOP_RESOLUTION_ENV: &str = "DESKTOP_RESOLUTION";
pub const DEFAULT_DESKTOP_RESOLUTION: &str = "1024x768";
/// The box env variable giving the screen's dots per inch.
pub const DESKTOP_DPI_ENV: &str = "DESKTOP_DPI";
pub const DEFAULT_DESKTOP_DPI: u32 = 96;

/// The desktop template's services: the desktop is ready once those of them the box has
/// are running. A box whose template has no [`XVFB_SERVICE`] has no desktop.
pub const DESKTOP_SERVICES: [&str; 3] = [XVFB_SERVICE, XFCE_SERVICE, VNC_SERVICE];
