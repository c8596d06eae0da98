//! The link's state, behind one lock: the streams (by id, and by the serial number that
//! tells a handle's stream from a later one reusing its id), the listeners, and the frames
//! waiting for the writer. Every frame the reader gets and every call on a handle is one
//! short critical section here; nothing in it awaits.
//!
//! Closing a stream is always a RESET exchange: a side that is done sends RESET (after its
//! DATA and SHUTDOWN, the queue is in order), the other answers with its own unless it
//! sent one already, and an id is free once a side has both sent and received one; so no
//! frame of an old stream can reach a new one with the same id. A RESET after the peer's
//! SHUTDOWN still lets the reader drain what arrived.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};

use bytes::{Bytes, BytesMut};
use tokio::io::ReadBuf;
use tokio::sync::{mpsc, Notify};

use super::frame::{Frame, Out, MAX_PAYLOAD};
use super::{Role, Violation, MAX_STREAMS, QUEUE_BYTES, WINDOW};

/// What the writer takes from the queue at once.
const BATCH_BYTES: usize = 256 * 1024;
/// Frames other than DATA waiting for the writer before the reader stops reading: the
/// reader answers the peer (ACCEPT, RESET, CREDIT) without waiting, so a peer that sends
/// and never reads would otherwise grow the queue without bound. An honest peer keeps a
/// few per stream at most, far below this.
pub(super) const CONTROL_FRAMES: usize = 16 * MAX_STREAMS;

pub(super) struct Shared {
    pub role: Role,
    state: Mutex<State>,
    /// Frames were queued.
    pub writer: Notify,
    /// The peer's HELLO arrived, or the link ended (for `open`, which waits on both).
    pub changed: Notify,
    /// The writer took control frames (for a reader held back by [`CONTROL_FRAMES`]).
    pub drained: Notify,
}

impl Shared {
    pub fn new(role: Role) -> Arc<Shared> {
        let mut state = State {
            role,
            peer_ready: false,
            closed: false,
            queue: VecDeque::new(),
            queued_bytes: 0,
            queued_control: 0,
            pushed: false,
            drained: false,
            space_waiters: Vec::new(),
            ids: HashMap::new(),
            slots: HashMap::new(),
            listeners: HashMap::new(),
            first_id: match role {
                Role::Host => 2,
                Role::Guest => 1,
            },
            next_serial: 1,
        };
        if role == Role::Host {
            state.push(Out::Sync);
            state.push(Out::Frame(Frame::Hello));
        }
        Arc::new(Shared {
            role,
            state: Mutex::new(state),
            writer: Notify::new(),
            changed: Notify::new(),
            drained: Notify::new(),
        })
    }

    /// Runs `f` on the state, then wakes the writer if `f` queued a frame.
    pub fn with<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let result = f(&mut state);
        let pushed = std::mem::take(&mut state.pushed);
        let drained = std::mem::take(&mut state.drained);
        drop(state);
        if pushed {
            self.writer.notify_one();
        }
        if drained {
            self.drained.notify_waiters();
        }
        result
    }
}

/// One side's record of a stream id in use.
#[derive(Debug, Clone, Copy)]
struct IdState {
    /// The stream's handle serial; `None` once this side is done with it.
    serial: Option<u64>,
    reset_sent: bool,
    /// Opened by this side.
    ours: bool,
}

/// A stream as its handle sees it; outlives its id while the handle drains.
#[derive(Debug)]
struct Slot {
    id: u32,
    accepted: bool,
    recv: VecDeque<Bytes>,
    recv_eof: bool,
    /// Bytes the peer may still send (its credit as this side counts it).
    allowance: u32,
    /// Bytes read but not yet credited back.
    unreported: u32,
    send_credit: u32,
    write_shut: bool,
    reset: Option<io::ErrorKind>,
    read_waker: Option<Waker>,
    write_waker: Option<Waker>,
}

impl Slot {
    fn new(id: u32, accepted: bool) -> Slot {
        Slot {
            id,
            accepted,
            recv: VecDeque::new(),
            recv_eof: false,
            allowance: WINDOW,
            unreported: 0,
            send_credit: WINDOW,
            write_shut: false,
            reset: None,
            read_waker: None,
            write_waker: None,
        }
    }

    fn wake(&mut self) {
        if let Some(w) = self.read_waker.take() {
            w.wake();
        }
        if let Some(w) = self.write_waker.take() {
            w.wake();
        }
    }
}

/// A stream the peer opened and this end accepted, on its way to its listener (which
/// makes it a `MuxStream`; one never received is dropped with `drop_stream`).
#[derive(Debug)]
pub(super) struct Accepted {
    pub id: u32,
    pub port: u32,
    pub serial: u64,
}

/// A stream the reader accepted, to hand to its listener once the lock is released.
pub(super) type Delivery = (mpsc::UnboundedSender<Accepted>, Accepted);

pub(super) struct State {
    role: Role,
    pub peer_ready: bool,
    pub closed: bool,
    queue: VecDeque<Out>,
    /// DATA payload bytes in `queue`.
    queued_bytes: usize,
    /// Frames in `queue` other than DATA and SYNC.
    pub queued_control: usize,
    pushed: bool,
    drained: bool,
    space_waiters: Vec<Waker>,
    ids: HashMap<u32, IdState>,
    slots: HashMap<u64, Slot>,
    listeners: HashMap<u32, (u64, mpsc::UnboundedSender<Accepted>)>,
    first_id: u32,
    next_serial: u64,
}

fn reset_err(kind: io::ErrorKind) -> io::Error {
    io::Error::new(kind, "the serial channel stream was reset")
}

impl State {
    fn push(&mut self, out: Out) {
        match &out {
            Out::Frame(Frame::Data { data, .. }) => self.queued_bytes += data.len(),
            Out::Frame(_) => self.queued_control += 1,
            Out::Sync => {}
        }
        self.queue.push_back(out);
        self.pushed = true;
    }

    fn serial(&mut self) -> u64 {
        self.next_serial += 1;
        self.next_serial
    }

    /// Whether `id` is still this handle's live stream on the wire.
    fn live(&self, id: u32, serial: u64) -> bool {
        self.ids
            .get(&id)
            .is_some_and(|s| s.serial == Some(serial) && !s.reset_sent)
    }

    /// Moves queued frames into `out` (up to a batch); wakes writers waiting for space.
    pub fn take_batch(&mut self, out: &mut BytesMut) {
        let mut freed = false;
        while out.len() < BATCH_BYTES {
            let Some(next) = self.queue.pop_front() else {
                break;
            };
            match &next {
                Out::Frame(Frame::Data { data, .. }) => {
                    self.queued_bytes -= data.len();
                    freed = true;
                }
                Out::Frame(_) => {
                    self.queued_control -= 1;
                    self.drained = true;
                }
                Out::Sync => {}
            }
            next.encode(out);
        }
        if freed {
            self.space_waiters.drain(..).for_each(Waker::wake);
        }
    }

    /// Every stream fails with `kind` (`opening` for those not yet accepted), and every
    /// queued frame is dropped: they belong to streams the peer no longer has.
    pub fn reset_all(&mut self, kind: io::ErrorKind, opening: io::ErrorKind) {
        for slot in self.slots.values_mut() {
            slot.reset = Some(if slot.accepted { kind } else { opening });
            slot.recv.clear();
            slot.recv_eof = false;
            slot.wake();
        }
        self.ids.clear();
        self.queue.clear();
        self.queued_bytes = 0;
        self.queued_control = 0;
        self.drained = true;
        self.space_waiters.drain(..).for_each(Waker::wake);
    }

    /// The link ended: nothing works any more.
    pub fn close(&mut self) {
        self.closed = true;
        self.peer_ready = false;
        self.reset_all(io::ErrorKind::ConnectionReset, io::ErrorKind::NotConnected);
        self.listeners.clear();
    }

    /// Applies one frame from the peer.
    pub fn on_frame(
        &mut self,
        frame: Frame,
        shared: &Arc<Shared>,
    ) -> Result<Option<Delivery>, Violation> {
        let id = match &frame {
            Frame::Hello => {
                self.on_hello(shared);
                return Ok(None);
            }
            Frame::Open { id, .. }
            | Frame::Accept { id }
            | Frame::Data { id, .. }
            | Frame::Credit { id, .. }
            | Frame::Shutdown { id }
            | Frame::Reset { id } => *id,
        };
        if !self.peer_ready {
            return Err(Violation::BeforeHello { id });
        }
        if let Frame::Open { id, port } = frame {
            return self.on_open(id, port);
        }
        let state = *self.ids.get(&id).ok_or(Violation::UnknownStream { id })?;
        if let Frame::Reset { .. } = frame {
            self.ids.remove(&id);
            if !state.reset_sent {
                self.push(Out::Frame(Frame::Reset { id }));
            }
            if let Some(slot) = state.serial.and_then(|s| self.slots.get_mut(&s)) {
                slot.reset = Some(if slot.accepted {
                    io::ErrorKind::ConnectionReset
                } else {
                    io::ErrorKind::ConnectionRefused
                });
                slot.wake();
            }
            return Ok(None);
        }
        // A stream this side has reset: the peer's frames were sent before it knew.
        if state.reset_sent {
            return Ok(None);
        }
        let Some(slot) = state.serial.and_then(|s| self.slots.get_mut(&s)) else {
            return Err(Violation::UnknownStream { id });
        };
        // Only the acceptor's ACCEPT may come before everything else on a stream.
        let opening_accept = state.ours && matches!(frame, Frame::Accept { .. });
        if !slot.accepted && !opening_accept {
            return Err(Violation::UnknownStream { id });
        }
        match frame {
            Frame::Accept { .. } if slot.accepted => return Err(Violation::UnknownStream { id }),
            Frame::Accept { .. } => slot.accepted = true,
            Frame::Data { data, .. } => {
                let len = data.len() as u32;
                if slot.recv_eof {
                    return Err(Violation::DataAfterShutdown { id });
                }
                if len > slot.allowance {
                    return Err(Violation::OverWindow {
                        id,
                        len,
                        allowed: slot.allowance,
                    });
                }
                slot.allowance -= len;
                slot.recv.push_back(data);
            }
            Frame::Credit { bytes, .. } => {
                if u64::from(slot.send_credit) + u64::from(bytes) > u64::from(WINDOW) {
                    return Err(Violation::OverCredit { id });
                }
                slot.send_credit += bytes;
            }
            Frame::Shutdown { .. } => slot.recv_eof = true,
            Frame::Hello | Frame::Open { .. } | Frame::Reset { .. } => {}
        }
        slot.wake();
        Ok(None)
    }

    fn on_hello(&mut self, shared: &Arc<Shared>) {
        match self.role {
            // Every HELLO is a new host end (a boot or a restore): nothing of the old one
            // survives, and the new one hears from this side only after the answer.
            Role::Guest => {
                self.reset_all(
                    io::ErrorKind::ConnectionReset,
                    io::ErrorKind::ConnectionReset,
                );
                self.push(Out::Sync);
                self.push(Out::Frame(Frame::Hello));
            }
            // A second HELLO: the guest reset its streams.
            Role::Host if self.peer_ready => self.reset_all(
                io::ErrorKind::ConnectionReset,
                io::ErrorKind::ConnectionReset,
            ),
            Role::Host => {}
        }
        self.peer_ready = true;
        shared.changed.notify_waiters();
    }

    fn on_open(&mut self, id: u32, port: u32) -> Result<Option<Delivery>, Violation> {
        let theirs = match self.role {
            Role::Host => id % 2 == 1,
            Role::Guest => id.is_multiple_of(2) && id != 0,
        };
        if !theirs || self.ids.contains_key(&id) {
            return Err(Violation::BadOpen { id });
        }
        let (mut live, mut all) = (0, 0);
        for s in self.ids.values().filter(|s| !s.ours) {
            all += 1;
            live += usize::from(s.serial.is_some());
        }
        // Refused opens wait for the peer's answering RESET; an honest peer has at most
        // MAX_STREAMS outstanding.
        if all >= 2 * MAX_STREAMS {
            return Err(Violation::TooManyStreams {
                max: 2 * MAX_STREAMS,
            });
        }
        let listener = self.listeners.get(&port).map(|(_, tx)| tx.clone());
        let Some(tx) = listener.filter(|_| live < MAX_STREAMS) else {
            self.push(Out::Frame(Frame::Reset { id }));
            self.ids.insert(
                id,
                IdState {
                    serial: None,
                    reset_sent: true,
                    ours: false,
                },
            );
            return Ok(None);
        };
        let serial = self.insert(id, false, true);
        self.push(Out::Frame(Frame::Accept { id }));
        Ok(Some((tx, Accepted { id, port, serial })))
    }

    fn insert(&mut self, id: u32, ours: bool, accepted: bool) -> u64 {
        let serial = self.serial();
        self.slots.insert(serial, Slot::new(id, accepted));
        self.ids.insert(
            id,
            IdState {
                serial: Some(serial),
                reset_sent: false,
                ours,
            },
        );
        serial
    }

    /// Ids in use on the wire (open, or reset and waiting for the peer's answer).
    #[cfg(test)]
    pub fn ids_in_use(&self) -> usize {
        self.ids.len()
    }

    /// Starts opening a stream to the peer's `port`.
    pub fn open(&mut self, port: u32) -> io::Result<(u32, u64)> {
        if self.closed {
            return Err(io::Error::new(
                io::ErrorKind::NotConnected,
                "the serial channel is down",
            ));
        }
        // The lowest free id: the peer's records stay small and ids are reused soon,
        // which the RESET exchange makes safe.
        let mut id = self.first_id;
        while self.ids.contains_key(&id) {
            id += 2;
        }
        let serial = self.insert(id, true, false);
        self.push(Out::Frame(Frame::Open { id, port }));
        Ok((id, serial))
    }

    /// Ready once the peer accepted the stream (or refused it, or the link reset).
    pub fn poll_accepted(&mut self, serial: u64, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let Some(slot) = self.slots.get_mut(&serial) else {
            return Poll::Ready(Err(reset_err(io::ErrorKind::ConnectionReset)));
        };
        if let Some(kind) = slot.reset {
            return Poll::Ready(Err(reset_err(kind)));
        }
        if slot.accepted {
            return Poll::Ready(Ok(()));
        }
        slot.write_waker = Some(cx.waker().clone());
        Poll::Pending
    }

    pub fn listen(&mut self, port: u32) -> io::Result<(u64, mpsc::UnboundedReceiver<Accepted>)> {
        if self.closed {
            return Err(io::Error::new(
                io::ErrorKind::NotConnected,
                "the serial channel is down",
            ));
        }
        if self.listeners.contains_key(&port) {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!("serial channel port {port} already has a listener"),
            ));
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let token = self.serial();
        self.listeners.insert(port, (token, tx));
        Ok((token, rx))
    }

    pub fn unlisten(&mut self, port: u32, token: u64) {
        if self.listeners.get(&port).is_some_and(|(t, _)| *t == token) {
            self.listeners.remove(&port);
        }
    }

    /// The handle is gone: the stream is reset unless this side already did.
    pub fn drop_stream(&mut self, id: u32, serial: u64) {
        self.slots.remove(&serial);
        if let Some(state) = self.ids.get_mut(&id).filter(|s| s.serial == Some(serial)) {
            state.serial = None;
            if !state.reset_sent {
                state.reset_sent = true;
                self.push(Out::Frame(Frame::Reset { id }));
            }
        }
    }

    pub fn poll_read(
        &mut self,
        serial: u64,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let Some(slot) = self.slots.get_mut(&serial) else {
            return Poll::Ready(Err(reset_err(io::ErrorKind::ConnectionReset)));
        };
        let mut read = 0usize;
        while buf.remaining() > 0 {
            let Some(front) = slot.recv.front_mut() else {
                break;
            };
            let n = front.len().min(buf.remaining());
            buf.put_slice(&front.split_to(n));
            read += n;
            if front.is_empty() {
                slot.recv.pop_front();
            }
        }
        if read > 0 {
            slot.unreported += read as u32;
            let (id, unreported, eof) = (slot.id, slot.unreported, slot.recv_eof);
            if !eof && unreported >= WINDOW / 2 {
                slot.allowance += unreported;
                slot.unreported = 0;
                if self.live(id, serial) {
                    self.push(Out::Frame(Frame::Credit {
                        id,
                        bytes: unreported,
                    }));
                }
            }
            return Poll::Ready(Ok(()));
        }
        if buf.remaining() == 0 || slot.recv_eof {
            return Poll::Ready(Ok(()));
        }
        if let Some(kind) = slot.reset {
            return Poll::Ready(Err(reset_err(kind)));
        }
        slot.read_waker = Some(cx.waker().clone());
        Poll::Pending
    }

    pub fn poll_write(
        &mut self,
        serial: u64,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let Some(slot) = self.slots.get_mut(&serial) else {
            return Poll::Ready(Err(reset_err(io::ErrorKind::ConnectionReset)));
        };
        if let Some(kind) = slot.reset {
            return Poll::Ready(Err(reset_err(kind)));
        }
        if slot.write_shut {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the serial channel stream was shut down for writing",
            )));
        }
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        if slot.send_credit == 0 {
            slot.write_waker = Some(cx.waker().clone());
            return Poll::Pending;
        }
        if self.queued_bytes >= QUEUE_BYTES {
            self.space_waiters.push(cx.waker().clone());
            return Poll::Pending;
        }
        let n = buf.len().min(slot.send_credit as usize).min(MAX_PAYLOAD);
        slot.send_credit -= n as u32;
        let id = slot.id;
        self.push(Out::Frame(Frame::Data {
            id,
            data: Bytes::copy_from_slice(&buf[..n]),
        }));
        Poll::Ready(Ok(n))
    }

    pub fn shutdown(&mut self, id: u32, serial: u64) {
        let Some(slot) = self.slots.get_mut(&serial) else {
            return;
        };
        if std::mem::replace(&mut slot.write_shut, true) {
            return;
        }
        if self.live(id, serial) {
            self.push(Out::Frame(Frame::Shutdown { id }));
        }
    }
}
