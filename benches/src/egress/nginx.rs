//! Debian's nginx doing the same SNI routing as the gateway: the stream module with
//! `ssl_preread on` and a `map` from `$ssl_preread_server_name` to the upstream, listening on
//! a Unix socket so its client side is the gateway's. Started from a generated config in a
//! temp dir with `worker_processes 1`, and stopped (master and worker) when dropped.

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

const STARTUP: Duration = Duration::from_secs(10);
const STOP: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum NginxError {
    #[error("nginx is not installed")]
    Missing,
    #[error("nginx has no stream module with ssl_preread (nginx -V: {0})")]
    NoStream(String),
    #[error("running nginx")]
    Io(#[from] io::Error),
    #[error("nginx exited during startup ({status}): {log}")]
    Exited {
        status: std::process::ExitStatus,
        log: String,
    },
    #[error("nginx did not listen on {socket} within {after:?}")]
    NotReady { socket: PathBuf, after: Duration },
}

/// The nginx binary and, when its stream module is dynamic, the module to load.
pub struct NginxBinary {
    pub version: String,
    stream_module: Option<PathBuf>,
}

impl NginxBinary {
    /// `nginx -V` must show the stream module (built in, or dynamic and present on disk) and
    /// ssl_preread.
    pub fn find() -> Result<NginxBinary, NginxError> {
        let out = match Command::new("nginx").arg("-V").output() {
            Ok(out) => out,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(NginxError::Missing),
            Err(e) => return Err(e.into()),
        };
        // nginx prints its version and configure arguments on stderr.
        let text = String::from_utf8_lossy(&out.stderr).into_owned();
        let version = text
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("nginx version: "))
            .unwrap_or("nginx")
            .to_string();
        let args: Vec<&str> = text.split_whitespace().collect();
        if !args.contains(&"--with-stream_ssl_preread_module") {
            return Err(NginxError::NoStream(version));
        }
        let stream_module = if args.contains(&"--with-stream") {
            None
        } else if args.contains(&"--with-stream=dynamic") {
            let dir = args
                .iter()
                .find_map(|a| a.strip_prefix("--modules-path="))
                .unwrap_or("/usr/lib/nginx/modules");
            let module = Path::new(dir).join("ngx_stream_module.so");
            if !module.exists() {
                return Err(NginxError::NoStream(format!(
                    "{version}, dynamic stream module {} missing",
                    module.display()
                )));
            }
            Some(module)
        } else {
            return Err(NginxError::NoStream(version));
        };
        Ok(NginxBinary {
            version,
            stream_module,
        })
    }

    /// The config: `host` → `upstream`, anything else → 127.0.0.1:1 (refused).
    pub fn config(&self, prefix: &Path, socket: &Path, host: &str, upstream: SocketAddr) -> String {
        let load = self
            .stream_module
            .as_ref()
            .map(|m| format!("load_module {};\n", m.display()))
            .unwrap_or_default();
        format!(
            "{load}worker_processes 1;
error_log {log} warn;
events {{ worker_connections 1024; }}
stream {{
    map $ssl_preread_server_name $upstream {{
        {host} {upstream};
        default 127.0.0.1:1;
    }}
    server {{
        listen unix:{socket};
        ssl_preread on;
        proxy_pass $upstream;
    }}
}}
",
            log = prefix.join("error.log").display(),
            socket = socket.display(),
        )
    }

    /// Starts nginx in the foreground (`daemon off`) with the config above, in `prefix`,
    /// and waits until its socket accepts connections.
    pub fn start(
        &self,
        prefix: &Path,
        host: &str,
        upstream: SocketAddr,
    ) -> Result<Nginx, NginxError> {
        let socket = prefix.join("nginx.sock");
        let conf = prefix.join("nginx.conf");
        std::fs::write(&conf, self.config(prefix, &socket, host, upstream))?;
        let pid = prefix.join("nginx.pid");
        let child = Command::new("nginx")
            .arg("-p")
            .arg(prefix)
            .arg("-e")
            .arg(prefix.join("error.log"))
            .arg("-c")
            .arg(&conf)
            .arg("-g")
            .arg(format!("daemon off; pid {};", pid.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let mut nginx = Nginx {
            child,
            socket,
            log: prefix.join("error.log"),
        };
        nginx.wait_ready()?;
        Ok(nginx)
    }
}

/// A running nginx; dropping it stops it.
pub struct Nginx {
    child: Child,
    pub socket: PathBuf,
    log: PathBuf,
}

impl Nginx {
    fn wait_ready(&mut self) -> Result<(), NginxError> {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait()? {
                let log = std::fs::read_to_string(&self.log).unwrap_or_default();
                return Err(NginxError::Exited { status, log });
            }
            if std::os::unix::net::UnixStream::connect(&self.socket).is_ok() {
                return Ok(());
            }
            if started.elapsed() > STARTUP {
                return Err(NginxError::NotReady {
                    socket: self.socket.clone(),
                    after: STARTUP,
                });
            }
            // Polling a condition (the socket answering), not sleeping in its place.
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Nginx {
    /// SIGTERM to the master (nginx's fast shutdown: it stops its worker and exits), then
    /// SIGKILL if it has not exited in time. Killing only the master would orphan the worker.
    fn drop(&mut self) {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
        }
        let started = Instant::now();
        while started.elapsed() < STOP {
            match self.child.try_wait() {
                Ok(Some(_)) | Err(_) => return,
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_routes_only_the_bench_host_and_loads_a_dynamic_module() {
        let bin = NginxBinary {
            version: "nginx/test".into(),
            stream_module: Some(PathBuf::from("/m/ngx_stream_module.so")),
        };
        let conf = bin.config(
            Path::new("/p"),
            Path::new("/p/nginx.sock"),
            "bench.example.test",
            "127.0.0.1:8443".parse().unwrap(),
        );
        assert!(conf.starts_with("load_module /m/ngx_stream_module.so;\n"));
        assert!(conf.contains("bench.example.test 127.0.0.1:8443;"));
        assert!(conf.contains("default 127.0.0.1:1;"));
        assert!(conf.contains("listen unix:/p/nginx.sock;"));
        assert!(conf.contains("ssl_preread on;"));
        assert!(conf.contains("worker_processes 1;"));
        let built_in = NginxBinary {
            version: "nginx/test".into(),
            stream_module: None,
        };
        let conf = built_in.config(
            Path::new("/p"),
            Path::new("/p/s"),
            "h.test",
            "127.0.0.1:1".parse().unwrap(),
        );
        assert!(!conf.contains("load_module"));
    }
}
