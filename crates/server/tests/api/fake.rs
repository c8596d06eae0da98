//! A fake runtime whose boxes are in-process fake agents on Unix sockets: the lifecycle
//! (wake once, fresh token per boot, stop, delete, reconcile, shutdown) without root.
//! Each agent checks the boot token like `berth-init` does, and speaks the harness calls of
//! protocol v2 with a [`FakeHarness`] that outlives boots like a volume: a journal of
//! message ids (duplicates are answered `duplicate: true`), an event journal with its own
//! seq, and a harness that answers each message with `user`, `assistant`, `result`.
//!
//! [`FakeRuntime::snapshotting`] stands in for a VMM that can snapshot, so the daemon's
//! snapshot logic is tested in milliseconds (the real qemu one boots VMs): a snapshot keeps the agent's memory (a counter, `exec count`) and its boot token, a
//! restore brings them back and takes the new token over `POST /v1/boot/token` like
//! `berth-init`, a cold start begins from zero.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use berth_protocol::BoxId;
use berth_runtime::{
    BootPhase, BootPhases, BootToken, Booted, BoxExit, BoxSpec, Capabilities, EgressListener,
    GuestAddr, GuestClient, IdMap, Runtime, RuntimeError, RuntimeStatus, EXIT_POLL,
};

use crate::fake_agent::{agent, Volume};
pub use crate::fake_agent::{FakeHarness, Memory};

/// A fake box's agent task, the switch that ends its open exec streams, and its memory.
type RunningAgent = (
    tokio::task::JoinHandle<()>,
    tokio::sync::watch::Sender<bool>,
    Memory,
);

#[derive(Debug, Default)]
pub struct FakeRuntime {
    /// `fake` unless set ([`FakeRuntime::named`]).
    name: &'static str,
    /// The rootfs and disk size of every start, in order.
    pub specs: Mutex<Vec<(berth_runtime::Rootfs, u64)>>,
    dir: PathBuf,
    pub starts: AtomicUsize,
    pub tokens: Mutex<Vec<String>>,
    pub stopped: Mutex<Vec<BoxId>>,
    pub removed: Mutex<Vec<BoxId>>,
    /// What `list()` reports beyond the boxes it runs (leftovers for reconcile).
    pub orphans: Vec<BoxId>,
    agents: Mutex<HashMap<BoxId, RunningAgent>>,
    volume: Volume,
    pub harness: Arc<FakeHarness>,
    /// Snapshots are taken and restored ([`FakeRuntime::snapshotting`]).
    snapshots: bool,
    saved: Mutex<HashMap<BoxId, Memory>>,
    /// The next restore fails (the daemon must boot the box cold instead).
    pub fail_restore: AtomicBool,
    pub restores: AtomicUsize,
    pub discarded: Mutex<Vec<BoxId>>,
    /// The interception CA each start or restore was given, in order.
    pub cas: Mutex<Vec<Option<String>>>,
    /// The next start, stop or snapshot fails (the daemon must record it on the box).
    pub fail_start: AtomicBool,
    pub fail_stop: AtomicBool,
    pub fail_snapshot: AtomicBool,
    /// Boxes are paused and resumed ([`FakeRuntime::pausing`]); the next pause, resume or
    /// egress rebind (a warm-pool handover) fails when told to.
    pauses: bool,
    paused: Mutex<HashSet<BoxId>>,
    pub fail_pause: AtomicBool,
    pub fail_resume: AtomicBool,
    pub fail_rebind: AtomicBool,
    /// The runtime does not notice a box that died (`wait_exit` waits on): the next call
    /// that cannot reach the box finds it dead instead of the exit watch.
    pub unseen_exits: AtomicBool,
}

/// The error of a call a test told to fail.
fn told_to_fail(operation: &'static str) -> RuntimeError {
    RuntimeError::Io {
        action: operation,
        path: PathBuf::from("/fake/told-to-fail"),
        source: std::io::Error::other("the fake was told to fail"),
    }
}

impl FakeRuntime {
    /// A fake that pauses and resumes boxes.
    pub fn pausing(dir: PathBuf) -> FakeRuntime {
        FakeRuntime {
            pauses: true,
            ..FakeRuntime::new(dir)
        }
    }

    /// A fake that snapshots and restores boxes.
    pub fn snapshotting(dir: PathBuf) -> FakeRuntime {
        FakeRuntime {
            snapshots: true,
            ..FakeRuntime::new(dir)
        }
    }

    pub fn new(dir: PathBuf) -> FakeRuntime {
        FakeRuntime::with_orphans(dir, Vec::new())
    }

    pub fn with_orphans(dir: PathBuf, orphans: Vec<BoxId>) -> FakeRuntime {
        FakeRuntime {
            dir,
            orphans,
            ..Default::default()
        }
    }

    /// A fake that calls itself `name` (e.g. `qemu`, to stand in for a VM runtime).
    pub fn named(dir: PathBuf, name: &'static str) -> FakeRuntime {
        FakeRuntime {
            name,
            ..FakeRuntime::new(dir)
        }
    }

    fn socket(&self, id: &BoxId) -> PathBuf {
        self.dir.join(format!("{id}.sock"))
    }

    /// The box's egress channel: nothing in a fake box connects out.
    fn egress_listener(&self, id: &BoxId) -> Result<EgressListener, RuntimeError> {
        let path = self.dir.join(format!("{id}.egress.sock"));
        let _ = std::fs::remove_file(&path);
        EgressListener::bind(&path).map_err(|source| RuntimeError::Io {
            action: "bind",
            path,
            source,
        })
    }

    /// The box's processes die (the runtime sees it stopped; nobody told the daemon).
    pub fn crash(&self, id: &BoxId) {
        self.kill(id);
    }

    fn kill(&self, id: &BoxId) -> Option<Memory> {
        self.paused.lock().unwrap().remove(id);
        let killed = self.agents.lock().unwrap().remove(id);
        let _ = std::fs::remove_file(self.socket(id));
        killed.map(|(agent, alive, memory)| {
            agent.abort();
            let _ = alive.send(false);
            memory
        })
    }

    /// Serves an agent for `id` with `memory` (a cold start's is new).
    fn serve(&self, spec: &BoxSpec, memory: Memory) -> Result<EgressListener, RuntimeError> {
        self.cas.lock().unwrap().push(spec.egress.ca_pem.clone());
        let path = self.socket(&spec.id);
        let _ = std::fs::remove_file(&path);
        let listener =
            tokio::net::UnixListener::bind(&path).map_err(|source| RuntimeError::Io {
                action: "bind",
                path: path.clone(),
                source,
            })?;
        let (alive, alive_rx) = tokio::sync::watch::channel(true);
        let agent = agent(
            memory.clone(),
            self.volume.clone(),
            self.harness.clone(),
            alive_rx,
        );
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, agent).await;
        });
        self.agents
            .lock()
            .unwrap()
            .insert(spec.id.clone(), (task, alive, memory));
        self.egress_listener(&spec.id)
    }
}

impl FakeRuntime {
    /// Pauses (`pause`) or resumes box `id`: only a [`FakeRuntime::pausing`] one, and
    /// failing once when `fail` is set. The agent keeps answering: nothing runs in it.
    fn pause_or_resume(
        &self,
        id: &BoxId,
        pause: bool,
        fail: &AtomicBool,
    ) -> Result<(), RuntimeError> {
        let operation = if pause { "pause" } else { "resume" };
        if !self.pauses {
            return Err(RuntimeError::Unsupported {
                backend: "fake",
                operation,
            });
        }
        if fail.swap(false, Ordering::SeqCst) {
            return Err(told_to_fail(operation));
        }
        let mut paused = self.paused.lock().unwrap();
        if pause {
            paused.insert(id.clone());
        } else {
            paused.remove(id);
        }
        Ok(())
    }
}

#[async_trait]
impl Runtime for FakeRuntime {
    fn name(&self) -> &'static str {
        if self.name.is_empty() {
            "fake"
        } else {
            self.name
        }
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            pause: self.pauses,
            snapshot: self.snapshots,
            // The fake named `qemu` stands in for a VM runtime.
            host_rootfs: self.name != "qemu",
        }
    }

    async fn start(&self, spec: &BoxSpec) -> Result<Booted, RuntimeError> {
        let began = Instant::now();
        self.starts.fetch_add(1, Ordering::SeqCst);
        if self.fail_start.swap(false, Ordering::SeqCst) {
            return Err(told_to_fail("start"));
        }
        self.specs
            .lock()
            .unwrap()
            .push((spec.rootfs.clone(), spec.disk_mib));
        self.tokens
            .lock()
            .unwrap()
            .push(spec.boot_token.as_str().to_owned());
        // A cold boot drops the box's snapshot, as the trait says.
        self.discard_snapshot(&spec.id).await?;
        // A cold start takes a while: concurrent wakes overlap here.
        tokio::time::sleep(Duration::from_millis(200)).await;
        self.harness
            .emit("harness_start", serde_json::json!({"pid": 7}));
        let memory = Memory::booted(spec.boot_token.as_str(), &spec.services);
        let egress = self.serve(spec, memory)?;
        // One phase, as a backend that measures its start reports it.
        let phases = BootPhases(vec![BootPhase {
            name: "fake_boot".into(),
            micros: began.elapsed().as_micros() as u64,
        }]);
        Ok(Booted {
            client: self.channel(&spec.id, &spec.boot_token),
            egress,
            phases,
        })
    }

    async fn snapshot(&self, id: &BoxId) -> Result<(), RuntimeError> {
        if self.fail_snapshot.swap(false, Ordering::SeqCst) {
            return Err(told_to_fail("snapshot"));
        }
        if !self.snapshots {
            return Err(RuntimeError::Unsupported {
                backend: "fake",
                operation: "snapshot: this fake has no VMM",
            });
        }
        let memory = self.kill(id).ok_or_else(|| RuntimeError::WrongState {
            id: id.to_string(),
            operation: "snapshot",
            expected: "running",
            actual: "stopped",
        })?;
        self.saved.lock().unwrap().insert(id.clone(), memory);
        Ok(())
    }

    async fn restore(&self, spec: &BoxSpec, old: &BootToken) -> Result<Booted, RuntimeError> {
        self.restores.fetch_add(1, Ordering::SeqCst);
        if self.fail_restore.swap(false, Ordering::SeqCst) {
            return Err(RuntimeError::Unsupported {
                backend: "fake",
                operation: "restore: told to fail",
            });
        }
        let memory = self.saved.lock().unwrap().remove(&spec.id).ok_or_else(|| {
            RuntimeError::Unsupported {
                backend: "fake",
                operation: "restore: no snapshot",
            }
        })?;
        let egress = self.serve(spec, memory)?;
        // As the real backends do: the old token opens the channel that hands over the new.
        self.channel(&spec.id, old)
            .rotate_token(&spec.boot_token)
            .await?;
        Ok(Booted {
            client: self.channel(&spec.id, &spec.boot_token),
            egress,
            phases: Default::default(),
        })
    }

    async fn snapshot_size(&self, id: &BoxId) -> Result<Option<u64>, RuntimeError> {
        Ok(self.saved.lock().unwrap().contains_key(id).then_some(4096))
    }

    async fn discard_snapshot(&self, id: &BoxId) -> Result<(), RuntimeError> {
        if self.saved.lock().unwrap().remove(id).is_some() {
            self.discarded.lock().unwrap().push(id.clone());
        }
        Ok(())
    }

    async fn rebind_egress(
        &self,
        id: &BoxId,
        _id_map: IdMap,
    ) -> Result<EgressListener, RuntimeError> {
        if self.fail_rebind.swap(false, Ordering::SeqCst) {
            return Err(told_to_fail("rebind egress"));
        }
        self.egress_listener(id)
    }

    async fn stop(&self, id: &BoxId, _grace: Duration) -> Result<(), RuntimeError> {
        if self.fail_stop.swap(false, Ordering::SeqCst) {
            return Err(told_to_fail("stop"));
        }
        self.kill(id);
        self.stopped.lock().unwrap().push(id.clone());
        Ok(())
    }

    async fn pause(&self, id: &BoxId) -> Result<(), RuntimeError> {
        self.pause_or_resume(id, true, &self.fail_pause)
    }

    async fn resume(&self, id: &BoxId) -> Result<(), RuntimeError> {
        self.pause_or_resume(id, false, &self.fail_resume)
    }

    async fn status(&self, id: &BoxId) -> Result<RuntimeStatus, RuntimeError> {
        Ok(if self.paused.lock().unwrap().contains(id) {
            RuntimeStatus::Paused
        } else if self.agents.lock().unwrap().contains_key(id) {
            RuntimeStatus::Running
        } else {
            RuntimeStatus::Stopped
        })
    }

    async fn wait_exit(&self, id: &BoxId) -> Result<BoxExit, RuntimeError> {
        loop {
            let unseen = self.unseen_exits.load(Ordering::SeqCst);
            if !unseen && self.status(id).await? == RuntimeStatus::Stopped {
                return Ok(BoxExit::Clean);
            }
            tokio::time::sleep(EXIT_POLL).await;
        }
    }

    fn channel(&self, id: &BoxId, token: &BootToken) -> GuestClient {
        GuestClient::new(GuestAddr::Unix(self.socket(id)), token.clone())
    }

    async fn list(&self) -> Result<Vec<BoxId>, RuntimeError> {
        let mut ids: Vec<BoxId> = self.agents.lock().unwrap().keys().cloned().collect();
        ids.extend(self.orphans.iter().cloned());
        Ok(ids)
    }

    async fn remove(&self, id: &BoxId) -> Result<(), RuntimeError> {
        self.kill(id);
        self.removed.lock().unwrap().push(id.clone());
        Ok(())
    }
}
