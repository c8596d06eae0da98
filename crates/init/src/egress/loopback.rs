//! Bringing up `lo`. In a runc sandbox the OCI runtime has done it already; in a VM nobody
//! has, and the box's egress listeners live on 127.0.0.1.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::io::AsRawFd;

const LOOPBACK: &[u8] = b"lo";

/// Sets `IFF_UP` on `lo` unless it is already set (then nothing is changed, so no
/// capability is needed). Setting it needs `CAP_NET_ADMIN` in the network namespace.
pub fn ensure_up() -> io::Result<()> {
    // SAFETY: plain socket(2); the result is checked before it is wrapped.
    let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a fresh descriptor that nothing else owns.
    let sock = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: ifreq is plain old data; all zeroes is a valid value (empty name, no flags).
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (slot, &byte) in req.ifr_name.iter_mut().zip(LOOPBACK) {
        *slot = byte as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS reads the NUL-terminated name and writes `ifru_flags` of the
    // ifreq we own.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: SIOCGIFFLAGS succeeded, so the union holds the flags.
    let flags = unsafe { req.ifr_ifru.ifru_flags };
    if flags & libc::IFF_UP as libc::c_short != 0 {
        return Ok(());
    }
    req.ifr_ifru.ifru_flags = flags | libc::IFF_UP as libc::c_short;
    // SAFETY: SIOCSIFFLAGS only reads the ifreq we own.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn up_already_is_a_no_op() {
        ensure_up().unwrap();
        std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    }

    /// A fresh network namespace has `lo` down, like a VM at boot. Namespaces belong to
    /// threads, so only this test's own thread moves (and its namespace dies with it).
    #[test]
    fn lo_comes_up_in_a_fresh_network_namespace() {
        let outcome = std::thread::spawn(|| {
            // SAFETY: unshare affects only this thread, which runs nothing else.
            if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
                return Err(io::Error::last_os_error());
            }
            let reach = || {
                let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
                std::net::TcpStream::connect(listener.local_addr()?).map(drop)
            };
            let down = reach().is_err();
            ensure_up().unwrap();
            reach().unwrap();
            ensure_up().unwrap(); // second time: already up
            Ok(down)
        })
        .join()
        .unwrap();
        match outcome {
            Ok(was_down) => assert!(was_down, "lo of a new namespace was already usable"),
            Err(err) => {
                berth_testkit::skip("netns", format!("cannot create a network namespace: {err}"))
            }
        }
    }
}
