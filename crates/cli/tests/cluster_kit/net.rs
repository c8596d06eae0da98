//! The test's own network: a bridge in the host's namespace and one namespace per node,
//! joined to it by a veth pair, on a /24 of 10.200.0.0/16 no interface of the host has
//! yet, named by the test process and a count within it (tests run as processes or as
//! threads of one). All of it is deleted on drop.
//!
//! Postgres listens on loopback only; [`Forward`] carries the nodes' connections from the
//! bridge's address to it, so a node's database traffic crosses the bridge like a real
//! one's crosses a network.

use std::io;
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

pub struct Bridge {
    name: String,
    octet: u8,
    tag: u32,
    namespaces: Vec<String>,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl Bridge {
    /// `None` after a SKIPPED line (part `netns`) when this machine cannot make one.
    pub fn new() -> Option<Bridge> {
        static MADE: AtomicU32 = AtomicU32::new(0);
        let tag = (std::process::id() % 10_000) * 100 + MADE.fetch_add(1, Ordering::SeqCst) % 100;
        // Two tests picking at once could take the same /24: the pick and the address are
        // one step under a lock every test process shares.
        let _picking = PickLock::take();
        let bridge = Bridge {
            name: format!("bbr{tag}"),
            octet: free_octet(tag),
            tag,
            namespaces: Vec::new(),
        };
        let made = ip(&["link", "add", &bridge.name, "type", "bridge"])
            .and_then(|()| {
                ip(&[
                    "addr",
                    "add",
                    &format!("{}/24", bridge.host_ip()),
                    "dev",
                    &bridge.name,
                ])
            })
            .and_then(|()| ip(&["link", "set", &bridge.name, "up"]));
        match made {
            Ok(()) => Some(bridge),
            Err(why) => {
                drop(bridge);
                berth_testkit::skip("netns", format!("cannot make a bridge: {why}"));
                None
            }
        }
    }

    /// The bridge's address in the host's namespace.
    pub fn host_ip(&self) -> Ipv4Addr {
        Ipv4Addr::new(10, 200, self.octet, 1)
    }

    pub fn namespace_ip(&self, i: usize) -> Ipv4Addr {
        Ipv4Addr::new(10, 200, self.octet, 10 + i as u8)
    }

    /// Makes namespace `i` on the bridge; its name and address.
    pub fn add_namespace(&mut self, i: usize) -> (String, Ipv4Addr) {
        let ns = format!("berth-t{}-{i}", self.tag);
        let (host_end, ns_end) = (format!("vb{}h{i}", self.tag), format!("vb{}n{i}", self.tag));
        let addr = self.namespace_ip(i);
        ip(&["netns", "add", &ns]).unwrap();
        self.namespaces.push(ns.clone());
        for step in [
            vec![
                "link", "add", &host_end, "type", "veth", "peer", "name", &ns_end,
            ],
            vec!["link", "set", &ns_end, "netns", &ns],
            vec!["link", "set", &host_end, "master", &self.name],
            vec!["link", "set", &host_end, "up"],
        ] {
            ip(&step).unwrap();
        }
        let cidr = format!("{addr}/24");
        for step in [
            vec!["addr", "add", &cidr, "dev", &ns_end],
            vec!["link", "set", &ns_end, "up"],
            vec!["link", "set", "lo", "up"],
        ] {
            let mut args = vec!["-n", ns.as_str()];
            args.extend(step);
            ip(&args).unwrap();
        }
        (ns, addr)
    }
}

/// An exclusive `flock` on a file in the temp dir, released when the file is closed (on drop).
struct PickLock(#[allow(dead_code)] std::fs::File);

impl PickLock {
    fn take() -> PickLock {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(std::env::temp_dir().join("berth-test-bridges.lock"))
            .expect("the bridges' lock file");
        // SAFETY: flock(2) on a descriptor this struct owns.
        let rc = unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&file), libc::LOCK_EX) };
        assert_eq!(rc, 0, "flock: {}", io::Error::last_os_error());
        PickLock(file)
    }
}

/// A third octet whose 10.200.X.0/24 no interface here holds, tried from one `tag` picks.
fn free_octet(tag: u32) -> u8 {
    let taken = Command::new("ip")
        .args(["-o", "-4", "addr", "show"])
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).into_owned())
        .unwrap_or_default();
    (0..250)
        .map(|step| ((tag.wrapping_mul(7) + step) % 250) as u8 + 1)
        .find(|octet| !taken.contains(&format!(" 10.200.{octet}.")))
        .unwrap_or(1)
}

impl Bridge {
    /// Cuts namespace `i` off the bridge (its link down on the host's side), or joins it
    /// again.
    pub fn set_link(&self, i: usize, up: bool) {
        let host_end = format!("vb{}h{i}", self.tag);
        ip(&["link", "set", &host_end, if up { "up" } else { "down" }]).unwrap();
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        // A namespace's veth end goes with it, and the host's end with its peer.
        for ns in &self.namespaces {
            let _ = ip(&["netns", "del", ns]);
        }
        let _ = ip(&["link", "del", &self.name]);
    }
}

/// Accepts on `(ip, any port)` and copies each connection to `127.0.0.1:to`.
pub struct Forward {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
}

impl Forward {
    pub fn start(ip: Ipv4Addr, to: u16) -> Forward {
        let listener = TcpListener::bind((ip, 0)).unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let accept = std::thread::spawn(move || {
            for client in listener.incoming() {
                if stopping.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(client) = client else { continue };
                let Ok(upstream) = TcpStream::connect((Ipv4Addr::LOCALHOST, to)) else {
                    continue;
                };
                splice(client, upstream);
            }
        });
        Forward {
            addr,
            stop,
            accept: Some(accept),
        }
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }
}

fn splice(a: TcpStream, b: TcpStream) {
    let copy = |mut from: TcpStream, mut to: TcpStream| {
        std::thread::spawn(move || {
            let _ = io::copy(&mut from, &mut to);
            let _ = to.shutdown(Shutdown::Write);
        });
    };
    copy(a.try_clone().unwrap(), b.try_clone().unwrap());
    copy(b, a);
}

impl Drop for Forward {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop so it sees the flag.
        let _ = TcpStream::connect(self.addr);
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
    }
}
