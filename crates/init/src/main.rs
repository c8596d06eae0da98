//! `berth-init`: PID 1 of every berth box, and the guest agent the host talks to.
//!
//! Boots in phases (`mount` → `limits` → `seal` → `volume` → `egress` → `harness` →
//! `services` → `serve`, see [`boot`], [`sandbox_cgroup`], [`egress`], [`harness`] and
//! [`service`]; a VM's PID 1 does
//! `kernel` → `modules` → `disks` → `limits` after `mount`, see [`vm`]), then serves the
//! guest channel ([`server`]) until SIGTERM or `POST /v1/shutdown`, then stops the
//! services and every other process ([`stop`]) and exits (a VM powers off). The `egress` phase also takes the box's
//! environment ([`box_env`]); it runs before `harness` so the harness can connect out at
//! once.
//!
//! Usage: `berth-init [--run-dir DIR] [--home DIR] [--memory DIR] [--state-dir DIR]
//! [--deliver-timeout-ms MS] [--egress-tls ADDR] [--egress-proxy ADDR]`. The defaults are
//! the box's paths (and 60 s, 127.0.0.1:443, 127.0.0.1:3128); the flags let tests run the
//! agent in a temporary directory, not as PID 1 (with `127.0.0.1:0` for the egress
//! listeners).

mod account_names;
mod archive;
mod boot;
mod boot_token;
mod box_cgroup;
mod box_env;
mod bridge;
mod channel;
mod egress;
mod error;
mod exec;
mod files;
mod harness;
mod listener;
mod mux;
mod ports;
mod process;
mod query;
mod reaper;
mod sandbox_cgroup;
mod seal;
mod server;
mod service;
mod slots;
mod started;
mod stop;
mod stream;
mod terminal;
mod thread_caps;
mod vm;
mod volume;
mod vsock;
mod wake;
mod watch;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_protocol::guest::{
    Environment, AGENT_STATE_DIR, BOX_HOME, BOX_MEMORY, EGRESS_SOCKET, SANDBOX_RUN_DIR,
};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::Notify;

use crate::boot::BootRecord;
use crate::egress::Upstream;
use crate::exec::Executor;
use crate::listener::ChannelListener;
use crate::reaper::Reaper;
use crate::server::Agent;

#[derive(Debug)]
struct Args {
    run_dir: PathBuf,
    home: PathBuf,
    memory: PathBuf,
    state_dir: PathBuf,
    deliver_timeout: Duration,
    egress_tls: SocketAddr,
    egress_proxy: SocketAddr,
}

/// Why the boot failed; each phase has its own error.
#[derive(Debug, thiserror::Error)]
enum BootError {
    #[error(transparent)]
    Mount(#[from] boot::MountError),
    #[error(transparent)]
    Vm(#[from] vm::VmBootError),
    #[error(transparent)]
    Seal(#[from] seal::SealError),
    #[error(transparent)]
    Volume(#[from] volume::VolumeError),
    #[error(transparent)]
    BoxEnv(#[from] box_env::BoxEnvError),
    #[error(transparent)]
    Egress(#[from] egress::EgressError),
    #[error(transparent)]
    Harness(#[from] harness::boot::HarnessBootError),
    #[error(transparent)]
    Services(#[from] service::boot::ServicesFileError),
    #[error(transparent)]
    Channel(#[from] channel::ChannelError),
    #[error("serve phase: cannot install signal handlers")]
    Signals(#[source] std::io::Error),
    #[error("cannot start the async runtime")]
    Runtime(#[source] std::io::Error),
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        run_dir: SANDBOX_RUN_DIR.into(),
        home: BOX_HOME.into(),
        memory: BOX_MEMORY.into(),
        state_dir: AGENT_STATE_DIR.into(),
        deliver_timeout: harness::DELIVER_TIMEOUT,
        egress_tls: egress::default_tls_addr(),
        egress_proxy: egress::default_proxy_addr(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let slot = match flag.as_str() {
            "--run-dir" => &mut args.run_dir,
            "--home" => &mut args.home,
            "--memory" => &mut args.memory,
            "--state-dir" => &mut args.state_dir,
            "--deliver-timeout-ms" => {
                let value = it.next().ok_or("--deliver-timeout-ms needs a value")?;
                let ms = value
                    .parse()
                    .map_err(|_| format!("--deliver-timeout-ms: {value:?} is not a number"))?;
                args.deliver_timeout = Duration::from_millis(ms);
                continue;
            }
            "--egress-tls" | "--egress-proxy" => {
                let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
                let addr = value.parse().map_err(|_| {
                    format!("{flag}: {value:?} is not an address like 127.0.0.1:443")
                })?;
                if flag == "--egress-tls" {
                    args.egress_tls = addr;
                } else {
                    args.egress_proxy = addr;
                }
                continue;
            }
            "--version" => {
                println!("berth-init {}", env!("CARGO_PKG_VERSION"));
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?}")),
        };
        *slot = it
            .next()
            .ok_or_else(|| format!("{flag} needs a value"))?
            .into();
    }
    Ok(args)
}

fn main() {
    if bridge::called_as_bridge() {
        bridge::main()
    }
    if wake::called_as_wake() {
        wake::cli::main()
    }
    let args = parse_args().unwrap_or_else(|msg| {
        eprintln!(
            "berth-init: {msg}\nusage: berth-init [--run-dir DIR] [--home DIR] [--memory DIR] [--state-dir DIR] [--deliver-timeout-ms MS] [--egress-tls ADDR] [--egress-proxy ADDR]"
        );
        std::process::exit(2)
    });
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .max_blocking_threads(4)
        .thread_keep_alive(Duration::from_secs(5))
        .build()
        .map_err(BootError::Runtime);
    let result = runtime.and_then(|rt| rt.block_on(run(args)));
    if let Err(err) = result {
        // One line, with the whole cause chain, for the box's console log.
        let mut line = format!("berth-init: {err}");
        let mut source = std::error::Error::source(&err);
        while let Some(cause) = source {
            line.push_str(&format!(": {cause}"));
            source = cause.source();
        }
        eprintln!("{line}");
        std::process::exit(1);
    }
}

async fn run(args: Args) -> Result<(), BootError> {
    let mut sigterm = signal(SignalKind::terminate()).map_err(BootError::Signals)?;
    let mut sigint = signal(SignalKind::interrupt()).map_err(BootError::Signals)?;
    let env = boot::detect_environment();
    let mut boot = BootRecord::new(env);
    boot.phase("mount", || boot::mount_phase(env))?;
    let cgroup = if env == Environment::Vm {
        // kernel, modules, disks, limits; then the VM's root looks like a sandbox's.
        vm::boot(&mut boot, &args.run_dir)?
    } else if std::process::id() == 1 {
        boot.phase("limits", || Ok::<_, BootError>(sandbox_cgroup::start()))?
    } else {
        // A test running the agent as a plain process: nothing was delegated.
        None
    };
    let cgroup = cgroup.map(Arc::new);
    let filter = boot.phase("seal", || {
        seal::seal_self()?;
        seal::UserFilter::build()
    })?;
    boot.phase("volume", || {
        let layout = volume::layout(&args.run_dir)?;
        volume::prepare(&args.home, &args.memory, &args.state_dir, &layout)
    })?;
    let (box_env, vm_channel) = boot.phase("egress", || {
        let box_env = box_env::take(&args.run_dir)?;
        // A VM's one channel to the host (serial or vsock) carries egress and the agent.
        let vm_channel = if env == Environment::Vm {
            Some(channel::VmChannel::open()?)
        } else {
            None
        };
        let upstream = match &vm_channel {
            Some(channel) => channel.upstream(),
            None => Upstream::Unix(args.run_dir.join(EGRESS_SOCKET)),
        };
        egress::start(egress::Options {
            upstream,
            tls: args.egress_tls,
            proxy: args.egress_proxy,
        })?;
        Ok::<_, BootError>((box_env, vm_channel))
    })?;

    let reaper = Arc::new(Reaper::default());
    let r = reaper.clone();
    tokio::spawn(async move { r.run().await });
    let exec = Arc::new(Executor {
        reaper: reaper.clone(),
        filter: Arc::new(filter),
        home: args.home.clone(),
        box_env,
        cgroup,
    });
    // Loads the journals; the harness starts once the services have settled.
    let harness = boot.phase("harness", || {
        harness::boot::load(harness::boot::Options {
            run_dir: &args.run_dir,
            state_dir: &args.state_dir,
            home: &args.home,
            deliver_timeout: args.deliver_timeout,
        })
        .map(Arc::new)
    })?;
    let services = boot.phase("services", || {
        let configs = service::boot::read(&args.run_dir)?;
        let services = service::Services::new(exec.clone(), harness.clone(), configs);
        services.start();
        Ok::<_, BootError>(services)
    })?;
    harness::supervisor::start(&harness, &exec, services.clone().settled());
    wake::relay::start(harness.clone());

    let serve_start = Instant::now();
    let token = channel::take_token(&args.run_dir)?;
    let listener = match &vm_channel {
        Some(channel) => {
            let listener = channel.listen()?;
            // The host waits for this line before it connects (berth_protocol::vm::READY_MARK).
            eprintln!("{}", channel.ready_line());
            listener
        }
        None => ChannelListener::Unix(channel::listen(&args.run_dir)?),
    };
    boot.record("serve", serve_start);

    let shutdown = Arc::new(Notify::new());
    let agent = Arc::new(Agent {
        token: boot_token::BootTokens::new(token),
        boot,
        terminals: terminal::Terminals::new(exec.clone()),
        processes: process::Processes::new(exec.clone(), harness.clone()),
        services: services.clone(),
        exec,
        harness: harness.clone(),
        shutdown: shutdown.clone(),
    });
    tokio::spawn(server::serve(listener, agent));

    let asked_by_api = tokio::select! {
        _ = sigterm.recv() => false,
        _ = sigint.recv() => false,
        _ = shutdown.notified() => true,
    };
    if asked_by_api {
        // Let the 202 reach the host before the processes (and the socket) go away.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    harness.begin_shutdown();
    // Services first, in reverse dependency order, each with its own grace; then the rest.
    services.stop_all().await;
    stop::stop_everything(&reaper).await;
    harness.sync();
    let _ = std::fs::remove_file(args.run_dir.join(berth_protocol::guest::AGENT_SOCKET));
    if env == Environment::Vm {
        vm::release_volume(&args.run_dir);
        nix::unistd::sync();
    }
    boot::power_off(env)
}
