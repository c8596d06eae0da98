//! The PTY system calls: open a pair, size it, read and write the master side, find the
//! foreground job, and end a whole session.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use berth_protocol::guest::{BoxUser, BOX_USER_UID};
use berth_protocol::terminal::TerminalSize;

/// A new PTY pair sized `size`, both sides close-on-exec (a process started meanwhile must
/// not inherit them) and the master non-blocking. A box user's terminal is the user's, as
/// `login` leaves it (mode 0620), so programs that reopen it by name work.
pub fn open(size: TerminalSize, user: BoxUser) -> io::Result<(OwnedFd, OwnedFd)> {
    // SAFETY: posix_openpt returns a new fd or -1; ownership passes to the OwnedFd.
    let master = unsafe {
        let fd = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        OwnedFd::from_raw_fd(fd)
    };
    // SAFETY: a valid master fd.
    if unsafe { libc::unlockpt(master.as_raw_fd()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // TIOCGPTPEER opens the slave from the master itself: no path lookup in /dev/pts,
    // where a name could be swapped between the lookup and the open.
    // SAFETY: a valid master fd and open flags; the result is a new fd or -1.
    let slave = unsafe {
        let fd = libc::ioctl(
            master.as_raw_fd(),
            libc::TIOCGPTPEER,
            libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
        );
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        OwnedFd::from_raw_fd(fd)
    };
    if user == BoxUser::User {
        // SAFETY: a valid fd; integer arguments.
        if unsafe { libc::fchown(slave.as_raw_fd(), BOX_USER_UID, u32::MAX) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: as above.
        if unsafe { libc::fchmod(slave.as_raw_fd(), 0o620) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    set_size(&master, size)?;
    // SAFETY: F_GETFL/F_SETFL on a valid fd.
    unsafe {
        let flags = libc::fcntl(master.as_raw_fd(), libc::F_GETFL);
        if flags < 0 || libc::fcntl(master.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) < 0
        {
            return Err(io::Error::last_os_error());
        }
    }
    Ok((master, slave))
}

/// Sets the window size; the kernel sends `SIGWINCH` to the foreground job.
pub fn set_size(master: &OwnedFd, size: TerminalSize) -> io::Result<()> {
    let winsize = libc::winsize {
        ws_row: size.rows,
        ws_col: size.cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads one winsize from the pointer, which outlives the call.
    if unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCSWINSZ, &winsize) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The terminal's foreground process group (what ^C would signal).
pub fn foreground_group(master: &OwnedFd) -> Option<i32> {
    let mut group: libc::pid_t = 0;
    // SAFETY: TIOCGPGRP writes one pid_t to the pointer.
    let rc = unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCGPGRP, &mut group) };
    (rc == 0 && group > 0).then_some(group)
}

/// One `read(2)`; `WouldBlock` when nothing is there. `EIO` is the end: every holder of
/// the slave side has closed it.
pub fn read(master: &OwnedFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: reads at most buf.len() bytes into buf.
    let n = unsafe { libc::read(master.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// One `write(2)`; `WouldBlock` when the PTY's input queue is full.
pub fn write(master: &OwnedFd, data: &[u8]) -> io::Result<usize> {
    // SAFETY: writes at most data.len() bytes from data.
    let n = unsafe { libc::write(master.as_raw_fd(), data.as_ptr().cast(), data.len()) };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// Sends `signal` to every process of session `sid` (the terminal's program started it):
/// a shell's jobs each have their own process group, so one `killpg` would miss them.
pub fn kill_session(sid: i32, signal: i32) {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return;
    };
    for pid in entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
    {
        // SAFETY: getsid has no memory arguments.
        if unsafe { libc::getsid(pid) } == sid {
            // SAFETY: kill with a positive pid and a valid signal.
            unsafe { libc::kill(pid, signal) };
        }
    }
}
