//! The local terminal for `berth shell`: its window size, and raw mode for as long as a
//! [`RawMode`] lives. Raw mode is undone on every way out: the guard's drop (normal end,
//! error, panic unwinding), and the signals that end berth, which `cmd_shell` turns into a
//! normal end.

use std::io::IsTerminal as _;
use std::os::fd::AsRawFd as _;

use berth_protocol::terminal::TerminalSize;

/// The window size of the terminal on stdout (or stdin), if either is one.
pub fn window_size() -> Option<TerminalSize> {
    [std::io::stdout().as_raw_fd(), std::io::stdin().as_raw_fd()]
        .into_iter()
        .find_map(|fd| {
            // SAFETY: a zeroed winsize is a valid value for the ioctl to fill.
            let mut size: libc::winsize = unsafe { std::mem::zeroed() };
            // SAFETY: TIOCGWINSZ writes one winsize to the pointer, which outlives the call.
            let rc = unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &mut size) };
            (rc == 0 && size.ws_col > 0 && size.ws_row > 0).then_some(TerminalSize {
                cols: size.ws_col,
                rows: size.ws_row,
            })
        })
}

/// stdin in raw mode (every key goes to the box as it is typed, ^C included); the saved
/// settings come back on drop.
#[derive(Debug)]
pub struct RawMode {
    saved: libc::termios,
}

impl RawMode {
    /// Raw mode on stdin, or `None` when stdin is not a terminal (a pipe: nothing to do).
    pub fn enter() -> std::io::Result<Option<RawMode>> {
        let stdin = std::io::stdin();
        if !stdin.is_terminal() {
            return Ok(None);
        }
        let fd = stdin.as_raw_fd();
        // SAFETY: a zeroed termios is a valid value for tcgetattr to fill.
        let mut saved: libc::termios = unsafe { std::mem::zeroed() };
        // SAFETY: tcgetattr writes one termios to the pointer.
        if unsafe { libc::tcgetattr(fd, &mut saved) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut raw = saved;
        // SAFETY: cfmakeraw only changes the struct it is given.
        unsafe { libc::cfmakeraw(&mut raw) };
        // SAFETY: tcsetattr reads one termios from the pointer.
        if unsafe { libc::tcsetattr(fd, libc::TCSANOW, &raw) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Some(RawMode { saved }))
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        // SAFETY: tcsetattr reads the termios saved at entry. TCSADRAIN: the output
        // already written is shown in raw mode, as the program meant it.
        unsafe { libc::tcsetattr(std::io::stdin().as_raw_fd(), libc::TCSADRAIN, &self.saved) };
    }
}
