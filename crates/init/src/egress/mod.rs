//! The `egress` boot phase: the box's only way out.
//!
//! The box has no network device but `lo`. `berth-init` makes sure `lo` is up, then
//! listens on 127.0.0.1:[`EGRESS_TLS_PORT`] (where `/etc/hosts` pins every allowed host)
//! and on 127.0.0.1:[`EGRESS_PROXY_PORT`] (the HTTP CONNECT proxy named by `HTTPS_PROXY`),
//! and passes each accepted connection, unchanged, to the host's gateway: in a sandbox it
//! hands the socket itself over `<run dir>/`[`berth_protocol::guest::EGRESS_SOCKET`] and
//! keeps no copy; in a VM it copies the bytes into one stream over vsock or the serial
//! channel ([`forward`], [`upstream`]). Nothing listens on port 80 or any other
//! port, so nothing else leaves. Both listeners are bound before the harness starts: it may
//! connect out at once.
//!
//! Every process `berth-init` starts gets [`client_env`], so common HTTP clients use the
//! proxy and trust the box's bundle (which holds the box's interception CA).

mod forward;
mod loopback;
mod upstream;

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use berth_protocol::guest::{BOX_CA_BUNDLE, EGRESS_PROXY_PORT, EGRESS_TLS_PORT};
use tokio::net::TcpListener;

use self::forward::Forwarder;
pub use self::upstream::Upstream;

/// Connections being copied or handed over at once, for the whole box. A copied one costs
/// two copy buffers; the cap keeps a box from exhausting `berth-init`'s memory or
/// descriptors. A handed-over one is held only until sent; the gateway bounds how many a
/// box has open (`max_connections_per_box`).
pub const MAX_CONNECTIONS: usize = 1024;

/// Where the phase listens and forwards to; the defaults are the box's.
#[derive(Debug, Clone)]
pub struct Options {
    /// The host's gateway: `<run dir>/`[`berth_protocol::guest::EGRESS_SOCKET`] in a
    /// sandbox, [`Upstream::vm_host`] in a VM.
    pub upstream: Upstream,
    /// 127.0.0.1:[`EGRESS_TLS_PORT`] in a box.
    pub tls: SocketAddr,
    /// 127.0.0.1:[`EGRESS_PROXY_PORT`] in a box.
    pub proxy: SocketAddr,
}

/// The default listen addresses.
pub fn default_tls_addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], EGRESS_TLS_PORT))
}

pub fn default_proxy_addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], EGRESS_PROXY_PORT))
}

#[derive(Debug, thiserror::Error)]
pub enum EgressError {
    #[error("egress phase: cannot bring up the loopback interface lo")]
    Loopback(#[source] io::Error),
    #[error("egress phase: cannot listen on {addr} for the {what}")]
    Listen {
        what: &'static str,
        addr: SocketAddr,
        #[source]
        source: io::Error,
    },
}

/// Brings `lo` up, binds both listeners and spawns their accept loops (on the current
/// tokio runtime). Returns the bound addresses (they differ from the options for port 0).
pub fn start(opts: Options) -> Result<[SocketAddr; 2], EgressError> {
    loopback::ensure_up().map_err(EgressError::Loopback)?;
    let tls = listen("TLS port", opts.tls)?;
    let proxy = listen("CONNECT proxy", opts.proxy)?;
    let bound = [local_addr(&tls, opts.tls), local_addr(&proxy, opts.proxy)];
    let fwd = Arc::new(Forwarder::new(opts.upstream, MAX_CONNECTIONS));
    tokio::spawn(forward::accept_loop(tls, fwd.clone()));
    tokio::spawn(forward::accept_loop(proxy, fwd));
    Ok(bound)
}

fn listen(what: &'static str, addr: SocketAddr) -> Result<TcpListener, EgressError> {
    let err = |source| EgressError::Listen { what, addr, source };
    let listener = std::net::TcpListener::bind(addr).map_err(err)?;
    listener.set_nonblocking(true).map_err(err)?;
    TcpListener::from_std(listener).map_err(err)
}

fn local_addr(listener: &TcpListener, asked: SocketAddr) -> SocketAddr {
    listener.local_addr().unwrap_or(asked)
}

/// The variables that point HTTP clients at the proxy and the box's trust bundle. No
/// `HTTP_PROXY`: plain HTTP has no way out, by design.
pub fn client_env() -> [(&'static str, String); 8] {
    let proxy = format!("http://127.0.0.1:{EGRESS_PROXY_PORT}");
    let no_proxy = "localhost,127.0.0.1".to_owned();
    [
        ("HTTPS_PROXY", proxy.clone()),
        ("https_proxy", proxy),
        ("NO_PROXY", no_proxy.clone()),
        ("no_proxy", no_proxy),
        ("SSL_CERT_FILE", BOX_CA_BUNDLE.to_owned()),
        ("NODE_EXTRA_CA_CERTS", BOX_CA_BUNDLE.to_owned()),
        ("REQUESTS_CA_BUNDLE", BOX_CA_BUNDLE.to_owned()),
        ("CURL_CA_BUNDLE", BOX_CA_BUNDLE.to_owned()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_protocol::guest::EGRESS_SOCKET;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test(flavor = "current_thread")]
    async fn both_listeners_forward_to_the_run_dir_socket() {
        let dir = tempfile::tempdir().unwrap();
        let gateway = tokio::net::UnixListener::bind(dir.path().join(EGRESS_SOCKET)).unwrap();
        let any = SocketAddr::from(([127, 0, 0, 1], 0));
        let bound = start(Options {
            upstream: Upstream::Unix(dir.path().join(EGRESS_SOCKET)),
            tls: any,
            proxy: any,
        })
        .unwrap();
        assert_ne!(bound[0], bound[1]);
        for (addr, first) in bound.into_iter().zip([&b"\x16\x03\x01"[..], b"CONNECT"]) {
            let mut client = tokio::net::TcpStream::connect(addr).await.unwrap();
            client.write_all(first).await.unwrap();
            let (mut host, _) = gateway.accept().await.unwrap();
            let mut buf = vec![0u8; first.len()];
            host.read_exact(&mut buf).await.unwrap();
            assert_eq!(buf, first);
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_taken_address_fails_the_phase_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = taken.local_addr().unwrap();
        let err = start(Options {
            upstream: Upstream::Unix(dir.path().join(EGRESS_SOCKET)),
            tls: SocketAddr::from(([127, 0, 0, 1], 0)),
            proxy: addr,
        })
        .unwrap_err();
        assert!(matches!(err, EgressError::Listen { addr: a, .. } if a == addr));
        assert!(err.to_string().contains(&addr.to_string()), "{err}");
    }

    #[test]
    fn clients_get_the_proxy_and_the_bundle_but_no_http_proxy() {
        let env: std::collections::BTreeMap<_, _> = client_env().into_iter().collect();
        assert_eq!(env["HTTPS_PROXY"], "http://127.0.0.1:3128");
        assert_eq!(env["https_proxy"], env["HTTPS_PROXY"]);
        assert_eq!(env["NO_PROXY"], "localhost,127.0.0.1");
        assert_eq!(env["CURL_CA_BUNDLE"], BOX_CA_BUNDLE);
        assert!(!env.contains_key("HTTP_PROXY") && !env.contains_key("http_proxy"));
    }
}
