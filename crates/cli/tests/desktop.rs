//! The built-in `desktop` template on a real box, driven only through the computer-use API
//! (`berth desktop`): its screenshot is a PNG of the size the box asked for, showing XFCE's
//! panel (not one colour); a text editor opened through the actions (a terminal by its
//! keyboard shortcut, `mousepad FILE` typed into it) takes typed text and saves it, and the
//! file holds it; the cursor goes where it was moved. The same desktop on qemu (a microVM;
//! TCG here, where XFCE takes minutes to start) is drawn and takes typed text too.
//!
//! Real parts: `berth up` on the sandbox and qemu runtimes (runc, berth-init), the `desktop` image
//! built by `berth image build --template desktop` (debootstrap from the Debian mirror,
//! minutes, shared through the tests' image cache), Xvfb, XFCE, xdotool and scrot in the
//! box. Needs root and the mirror; skipped (and says so) otherwise.

mod common;

use std::fs;
use std::time::{Duration, Instant};

use common::{e2e_skip_reason, link_test_image_cache, stderr, Daemon, Follower};
use serde_json::{json, Value};

const WIDTH: u32 = 1280;
const HEIGHT: u32 = 800;
/// How long a window or a file may take to appear on the sandbox, and under a VM without
/// KVM (TCG: every program starts tens of times slower); each wait ends once it holds.
const SANDBOX_WAIT: Duration = Duration::from_secs(120);
const TCG_WAIT: Duration = Duration::from_secs(600);

fn json_of(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// A daemon with the desktop image built, or `None` (a skip, said and recorded).
fn daemon_with_desktop() -> Option<Daemon> {
    if let Some(reason) = e2e_skip_reason() {
        berth_testkit::skip("sandbox", &reason);
        return None;
    }
    let daemon = Daemon::start();
    link_test_image_cache(daemon.dir());
    let built = daemon.berth(&["image", "build", "--template", "desktop"]);
    if !built.status.success() {
        let err = stderr(&built);
        if err.contains("no network to the Debian mirror") {
            berth_testkit::skip("image-build", err.trim());
            return None;
        }
        panic!("berth image build --template desktop failed: {err}");
    }
    Some(daemon)
}

/// Decodes a PNG: (width, height, RGB(A) bytes, bytes per pixel).
fn decode_png(bytes: &[u8]) -> (u32, u32, Vec<u8>, usize) {
    let decoder = png::Decoder::new(bytes);
    let mut reader = decoder.read_info().expect("a PNG");
    let mut pixels = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut pixels).expect("a PNG frame");
    pixels.truncate(info.buffer_size());
    let per_pixel = info.color_type.samples();
    (info.width, info.height, pixels, per_pixel)
}

/// Where XFCE's panel is.
#[derive(Clone, Copy)]
enum Panel {
    Top,
    Bottom,
}

/// The screen a PNG shows is `width`×`height`, with XFCE's panel at `panel` (its own colour,
/// not the wallpaper's; the wallpaper at the other edge) and many colours in all: a
/// desktop, not one colour.
fn assert_shows_the_desktop(png: &[u8], expect_width: u32, expect_height: u32, panel: Panel) {
    let (width, height, pixels, per_pixel) = decode_png(png);
    assert_eq!((width, height), (expect_width, expect_height));
    let pixel = |x: u32, y: u32| {
        let at = ((y * width + x) as usize) * per_pixel;
        [pixels[at], pixels[at + 1], pixels[at + 2]]
    };
    let colours: std::collections::BTreeSet<[u8; 3]> = (0..height)
        .step_by(8)
        .flat_map(|y| (0..width).step_by(8).map(move |x| (x, y)))
        .map(|(x, y)| pixel(x, y))
        .collect();
    assert!(colours.len() > 16, "a screen of {} colours", colours.len());
    let (top, bottom, middle) = (
        pixel(width / 2, 10),
        pixel(width / 2, height - 10),
        pixel(width / 2, height / 2),
    );
    match panel {
        Panel::Top => assert_ne!(top, middle, "no panel at the top"),
        Panel::Bottom => {
            assert_ne!(bottom, middle, "no panel at the bottom");
            assert_eq!(top, middle, "the panel is still at the top");
        }
    }
}

/// Where the tests' screenshots go, to be looked at: `target/tmp/desktop`.
fn shots_dir() -> std::path::PathBuf {
    let shots = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("desktop");
    fs::create_dir_all(&shots).unwrap();
    shots
}

fn screenshot(daemon: &Daemon, name: &str, to: &std::path::Path) -> Vec<u8> {
    let shot = to.to_str().unwrap();
    daemon.berth_ok(&["desktop", "screenshot", name, "-o", shot]);
    fs::read(to).unwrap()
}

fn act(daemon: &Daemon, name: &str, actions: &[Value]) -> Value {
    let mut args = vec!["desktop".to_owned(), "do".into(), name.into()];
    args.extend(actions.iter().map(Value::to_string));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    json_of(&daemon.berth_ok(&args))
}

/// Polls a shell condition in the box (as the box user, on the desktop's display) until it
/// holds: the test waits for windows and files, never for a fixed time.
fn wait_in_box(daemon: &Daemon, name: &str, what: &str, condition: &str, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let out = daemon.berth(&[
            "exec",
            name,
            "--",
            "env",
            "DISPLAY=:0",
            "sh",
            "-c",
            condition,
        ]);
        if out.status.success() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "waiting for {what}: {}\n{}",
            stderr(&out),
            daemon.logs()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[test]
fn a_desktop_box_is_seen_and_driven_through_the_computer_use_api() {
    let Some(daemon) = daemon_with_desktop() else {
        return;
    };
    let size = format!("DESKTOP_RESOLUTION={WIDTH}x{HEIGHT}");
    daemon.berth_ok(&[
        "box",
        "create",
        "d1",
        "--template",
        "desktop",
        "--env",
        &size,
    ]);
    let status = json_of(&daemon.berth_ok(&["desktop", "status", "d1", "--json"]));
    assert_eq!(status["ready"], true, "{status:#}");
    assert_eq!(
        (status["width"].as_u64(), status["height"].as_u64()),
        (Some(WIDTH.into()), Some(HEIGHT.into()))
    );
    assert!(status["ready_after_ms"].as_u64().is_some(), "{status:#}");

    // The screen: the size asked for, showing the desktop.
    let shots = shots_dir();
    let first = screenshot(&daemon, "d1", &shots.join("desktop.png"));
    assert_shows_the_desktop(&first, WIDTH, HEIGHT, Panel::Top);

    // A text editor through the actions alone: the terminal's shortcut, then mousepad.
    act(
        &daemon,
        "d1",
        &[json!({"type": "key", "keys": "ctrl+alt+t"})],
    );
    wait_in_box(
        &daemon,
        "d1",
        "a terminal window",
        "xdotool search --onlyvisible --class xfce4-terminal",
        SANDBOX_WAIT,
    );
    act(
        &daemon,
        "d1",
        &[
            json!({"type": "type", "text": "mousepad /home/user/note.txt"}),
            json!({"type": "key", "keys": "enter"}),
        ],
    );
    wait_in_box(
        &daemon,
        "d1",
        "the editor's window",
        "xdotool search --onlyvisible --class mousepad",
        SANDBOX_WAIT,
    );
    act(
        &daemon,
        "d1",
        &[
            json!({"type": "type", "text": "typed by berth's computer-use API"}),
            json!({"type": "key", "keys": "ctrl+s"}),
        ],
    );
    wait_in_box(
        &daemon,
        "d1",
        "the saved file",
        "grep -q \"typed by berth's computer-use API\" /home/user/note.txt",
        SANDBOX_WAIT,
    );
    screenshot(&daemon, "d1", &shots.join("desktop-editor.png"));

    // The pointer goes where it is moved, and the cursor call says so.
    let moved = act(
        &daemon,
        "d1",
        &[json!({"type": "move", "x": 300, "y": 200})],
    );
    assert_eq!(moved["cursor"], json!({"x": 300, "y": 200}));
    let cursor = json_of(&daemon.berth_ok(&["desktop", "cursor", "d1", "--json"]));
    assert_eq!(cursor, json!({"x": 300, "y": 200}));

    // A VNC viewer on this machine, through `berth desktop vnc`: the box's VNC server
    // greets it and tells it the screen's size.
    let mut vnc = Follower::spawn(
        &daemon,
        &["desktop", "vnc", "d1", "--listen", "127.0.0.1:0"],
    );
    let line = vnc.wait_for_line(|line| line.contains("vnc://"));
    let address = line
        .split("vnc://")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .unwrap_or_else(|| panic!("no address in {line:?}"));
    assert_eq!(rfb_screen_size(address), (WIDTH, HEIGHT));
    assert_eq!(vnc.interrupt(), Some(0));

    // A layout of the user's own, the panel moved to the bottom (and the dock gone): the
    // session is still ready (its check looks at the whole screen, not where the panel was),
    // and the screen shows the panel there.
    daemon.berth_ok(&["exec", "d1", "--", "sh", "-c", PANEL_AT_THE_BOTTOM]);
    daemon.berth_ok(&["service", "restart", "d1", "xfce"]);
    let status = json_of(&daemon.berth_ok(&["desktop", "status", "d1", "--json"]));
    assert_eq!(status["ready"], true, "{status:#}\n{}", daemon.logs());
    let moved = screenshot(
        &daemon,
        "d1",
        &shots.join("desktop-panel-at-the-bottom.png"),
    );
    assert_shows_the_desktop(&moved, WIDTH, HEIGHT, Panel::Bottom);
    daemon.berth_ok(&["box", "rm", "d1"]);
}

/// The user's panel settings, changed through the running session's settings daemon (it
/// writes them out as the session ends, over any file changed beside it): panel 1 at the
/// bottom (`p=10`), and panel 2, the dock, not listed.
const PANEL_AT_THE_BOTTOM: &str =
    "export $(tr '\\0' '\\n' < /proc/$(pgrep -x xfce4-panel)/environ \
    | grep '^DBUS_SESSION_BUS_ADDRESS=') && \
    xfconf-query -c xfce4-panel -p /panels/panel-1/position -s 'p=10;x=0;y=0' && \
    xfconf-query -c xfce4-panel -p /panels -t int -s 1 -a";

/// The same template on a microVM: `berth box start` answers once the desktop's services
/// have started, or after its 60 s (XFCE takes minutes under TCG); `berth desktop status`
/// waits for the rest. The screen is drawn, and a command typed into a terminal opened by
/// its shortcut runs.
#[test]
fn a_qemu_desktop_box_is_drawn_and_takes_typed_text() {
    let Some(daemon) = daemon_with_desktop() else {
        return;
    };
    if daemon.offer_qemu().is_none() {
        return;
    }
    daemon.berth_ok(&[
        "box",
        "create",
        "q1",
        "--template",
        "desktop",
        "--runtime",
        "qemu",
    ]);
    daemon.berth_ok(&["box", "start", "q1"]);
    let status = json_of(&daemon.berth_ok(&["desktop", "status", "q1", "--json"]));
    assert_eq!(status["ready"], true, "{status:#}\n{}", daemon.logs());
    let shots = shots_dir();
    let screen = screenshot(&daemon, "q1", &shots.join("desktop-qemu.png"));
    assert_shows_the_desktop(&screen, 1024, 768, Panel::Top);

    act(
        &daemon,
        "q1",
        &[json!({"type": "key", "keys": "ctrl+alt+t"})],
    );
    wait_in_box(
        &daemon,
        "q1",
        "a terminal window",
        "xdotool search --onlyvisible --class xfce4-terminal",
        TCG_WAIT,
    );
    act(
        &daemon,
        "q1",
        &[json!({"type": "type", "text": "echo typed on qemu > /home/user/typed.txt\n"})],
    );
    wait_in_box(
        &daemon,
        "q1",
        "the typed command's file",
        "grep -q 'typed on qemu' /home/user/typed.txt",
        TCG_WAIT,
    );
    screenshot(&daemon, "q1", &shots.join("desktop-qemu-terminal.png"));
    daemon.berth_ok(&["box", "rm", "q1"]);
}

/// An RFB 3.8 client's handshake with no security, up to the server's init: the screen's
/// size it announces.
fn rfb_screen_size(address: &str) -> (u32, u32) {
    use std::io::{Read as _, Write as _};
    let mut server = std::net::TcpStream::connect(address).unwrap();
    server
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut exchange = |send: &[u8], n: usize| {
        server.write_all(send).unwrap();
        let mut bytes = vec![0; n];
        server.read_exact(&mut bytes).unwrap();
        bytes
    };
    assert_eq!(exchange(b"", 12), b"RFB 003.008\n");
    let types = exchange(b"RFB 003.008\n", 1)[0] as usize;
    assert!(
        exchange(b"", types).contains(&1),
        "the server offers no security type None"
    );
    assert_eq!(exchange(b"\x01", 4), [0; 4], "the security result");
    // Shared: other viewers stay.
    let size = exchange(&[1], 4);
    (
        u16::from_be_bytes([size[0], size[1]]).into(),
        u16::from_be_bytes([size[2], size[3]]).into(),
    )
}
