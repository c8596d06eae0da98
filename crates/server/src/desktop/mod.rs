//! Computer use: a box whose template runs a desktop (an X server as its `xvfb` service,
//! with a window manager and a VNC server beside it) is seen with `scrot` and driven with
//! `xdotool`, each run in the box as its user on [`DESKTOP_DISPLAY`] through the exec
//! operation: one exec per step, an argv, never a shell line made of what a client sent.
//!
//! This module holds the pure parts: the actions a client asks for and their limits
//! ([`action`]), key names as E2B's and Anthropic's computer-use tools spell them
//! ([`keys`]), the argvs ([`xdotool`]), and when a box's desktop services have settled
//! ([`settle`]). `crate::ops::desktop` wakes the box and runs them; docs/desktop.md is
//! the API.

pub mod action;
pub mod error;
pub mod keys;
pub mod names;
pub mod settle;
pub mod xdotool;

pub use error::DesktopError;

/// The longest a box's services may take to settle before a desktop call gives up: as long
/// as the `desktop` template gives XFCE to be ready (a VM without KVM takes minutes), so a
/// call made at boot never gives up on a session that is still coming.
pub const SETTLE_DEADLINE_S: u64 = crate::templates::desktop::XFCE_READY_TIMEOUT_S;

/// The most bytes of a screenshot.
pub const MAX_SCREENSHOT_BYTES: usize = 32 * 1024 * 1024;

/// `GET /v1/boxes/{ref}/desktop`: the box's display, once its services have settled.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct DesktopStatus {
    /// The X display (`:0`).
    pub display: String,
    /// The screen's size in pixels.
    pub width: u32,
    pub height: u32,
    /// Every desktop service the box has (`xvfb`, `xfce`, `vnc`) is running. The display
    /// takes actions and screenshots once `xvfb` runs, even when another one failed.
    pub ready: bool,
    /// From the start of the box's current boot to the moment the last desktop service was
    /// found ready; `null` when not ready, for a boot restored from a snapshot (its
    /// services were ready before it), or for a boot recorded by an older berth.
    pub ready_after_ms: Option<u64>,
}

/// Where the mouse pointer is, in pixels from the screen's top left corner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
#[schema(as = CursorPosition)]
pub struct Cursor {
    pub x: u32,
    pub y: u32,
}

/// `POST /v1/boxes/{ref}/desktop/actions`: where the pointer is after the last action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
#[schema(as = DesktopActionsDone)]
pub struct ActionsDone {
    pub cursor: Cursor,
}
