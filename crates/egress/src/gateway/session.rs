//! One stream from one box: take the socket berth-init handed over with it, if any
//! (`handoff.rs`), decide, then either refuse (audit at once) or dial and splice (audit
//! when the connection ends).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use berth_handoff::{receive_first, First};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::sync::watch;
use tokio::time::{timeout_at, Instant as TokioInstant};

use crate::hostname::canonical_host;
use crate::intercept::{HeadReadError, InterceptError, Interceptor, Refusal};
use crate::policy::EGRESS_PORT;

use super::audit::{AuditRecord, RefusedAddress, Verdict, Via, WithheldRecord};
use super::decision::{DenyReason, Route};
use super::handoff::Handoffs;
use super::hello::{host_deny, read_client_hello};
use super::preamble::{read_preamble, Preamble, PreambleError};
use super::resolve::vet_addresses;
use super::splice::{dial, splice, Counted, Counters, DialError};
use super::{BoxEgress, Inner};

pub(crate) struct Session {
    gw: Arc<Inner>,
    egress: Arc<BoxEgress>,
    interceptor: Option<Arc<Interceptor>>,
    handoffs: Arc<Handoffs>,
    stop: watch::Receiver<bool>,
    started: Instant,
    /// The end of the wait for the CONNECT head or ClientHello, counted from accept.
    hello_deadline: TokioInstant,
    time: OffsetDateTime,
    via: Option<Via>,
    target: Option<String>,
    port: Option<u16>,
    resolved: Option<SocketAddr>,
    refused: Vec<RefusedAddress>,
    /// Whether the CONNECT client has been told `200`, after which no status can be sent.
    answered: bool,
    intercept: bool,
    /// The credential rule whose secret was set (its name).
    credential: Option<String>,
    withheld: Option<WithheldRecord>,
    /// Why the gateway ended the connection itself (`idle`).
    closed: Option<&'static str>,
}

impl Session {
    pub(crate) fn new(
        gw: Arc<Inner>,
        egress: Arc<BoxEgress>,
        interceptor: Option<Arc<Interceptor>>,
        handoffs: Arc<Handoffs>,
        stop: watch::Receiver<bool>,
    ) -> Self {
        let hello_deadline = TokioInstant::now() + gw.config.timeouts.client_hello;
        Session {
            gw,
            egress,
            interceptor,
            handoffs,
            stop,
            started: Instant::now(),
            hello_deadline,
            time: OffsetDateTime::now_utc(),
            via: None,
            target: None,
            port: None,
            resolved: None,
            refused: Vec::new(),
            answered: false,
            intercept: false,
            credential: None,
            withheld: None,
            closed: None,
        }
    }

    /// Serves one stream accepted on the box's listener. Its first read brings either a
    /// socket handed over by the box's init, which is then the box side and the stream is
    /// closed, or the first byte of a plain stream, which is kept as the start of it.
    pub(crate) async fn run(self, mut stream: UnixStream) {
        let mut stop = self.stop.clone();
        let first = tokio::select! {
            first = timeout_at(self.hello_deadline, receive_first(&stream, self.handoffs.from)) => {
                first.map_err(|_elapsed| DenyReason::Timeout)
            }
            _ = stop.wait_for(|s| *s) => Err(DenyReason::Shutdown),
        };
        match first {
            Err(reason) => self.refuse(&mut stream, reason).await,
            Ok(Ok(First::Socket(socket))) => {
                drop(stream);
                self.serve(socket, Vec::new()).await
            }
            Ok(Ok(First::Byte(byte))) => self.serve(stream, vec![byte]).await,
            Ok(Ok(First::Closed)) => self.refuse(&mut stream, DenyReason::ClosedEarly).await,
            Ok(Err(e)) => {
                // Whatever came with the byte has been closed by `receive_first`.
                self.handoffs.refused(&self.egress.box_id, &e);
                self.refuse(&mut stream, DenyReason::HandoffRefused).await
            }
        }
    }

    /// Serves the box side `stream`, whose first bytes, already read, are `buf`.
    async fn serve<S: AsyncRead + AsyncWrite + Unpin + 'static>(
        mut self,
        mut stream: S,
        mut buf: Vec<u8>,
    ) {
        let mut stop = self.stop.clone();
        let decided = tokio::select! {
            d = self.decide(&mut stream, &mut buf) => d,
            _ = stop.wait_for(|s| *s) => Err(DenyReason::Shutdown),
        };
        let route = match decided {
            Ok(route) => route,
            Err(reason) => return self.refuse(&mut stream, reason).await,
        };
        match route {
            Route::Passthrough { addr } => self.passthrough(stream, addr, &buf).await,
            Route::Intercept { addr } => self.intercept(stream, addr, buf).await,
        }
    }

    /// The box has [`super::GatewayConfig::max_connections_per_box`] open already: the
    /// stream is closed unread (dropped) and the refusal audited.
    pub(crate) fn over_cap<S>(mut self, stream: S) {
        drop(stream);
        self.audit(
            Verdict::Deny,
            Some(DenyReason::TooManyConnections),
            &Counters::default(),
        );
    }

    /// Everything up to the point where the gateway would dial: no byte has left the host.
    async fn decide<S: AsyncRead + AsyncWrite + Unpin>(
        &mut self,
        stream: &mut S,
        buf: &mut Vec<u8>,
    ) -> Result<Route, DenyReason> {
        let hello_timeout = self.gw.config.timeouts.client_hello;
        let deadline = self.hello_deadline;
        let preamble = timeout_at(deadline, read_preamble(stream, buf))
            .await
            .map_err(|_| DenyReason::Timeout)?
            .map_err(|e| preamble_deny(&e))?;
        match preamble {
            Preamble::Direct => {
                self.via = Some(Via::Direct);
                self.port = Some(EGRESS_PORT);
                let info = timeout_at(deadline, read_client_hello(stream, buf))
                    .await
                    .map_err(|_| DenyReason::Timeout)?
                    .map_err(|e| e.deny_reason())?;
                // The parser has already refused ECH, IP literals and bad names, and
                // returns the canonical spelling.
                self.target = Some(info.sni.clone());
                self.route_for(&info.sni).await
            }
            Preamble::Connect(t) => {
                self.via = Some(Via::Connect);
                self.port = Some(t.port);
                self.target = Some(t.host.clone());
                if t.port != EGRESS_PORT {
                    return Err(DenyReason::Port);
                }
                let host = canonical_host(&t.host).map_err(|e| host_deny(&e))?;
                self.target = Some(host.clone());
                let route = self.route_for(&host).await?;
                stream
                    .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                    .await
                    .map_err(|_| DenyReason::ClosedEarly)?;
                self.answered = true;
                let deadline = TokioInstant::now() + hello_timeout;
                let info = timeout_at(deadline, read_client_hello(stream, buf))
                    .await
                    .map_err(|_| DenyReason::Timeout)?
                    .map_err(|e| e.deny_reason())?;
                if info.sni != host {
                    return Err(DenyReason::SniMismatch);
                }
                Ok(route)
            }
        }
    }

    /// Policy, then resolution and address vetting for a canonical host.
    async fn route_for(&mut self, host: &str) -> Result<Route, DenyReason> {
        if !self.egress.allow.allows(host) {
            return Err(DenyReason::NotAllowed);
        }
        if let Some(addr) = self.gw.config.resolve_overrides.get(host) {
            self.resolved = Some(*addr);
            return Ok(self.route(host, *addr));
        }
        let addrs = self
            .gw
            .resolver
            .resolve(host, EGRESS_PORT)
            .await
            .map_err(|_| DenyReason::ResolveFailed)?;
        match vet_addresses(&addrs) {
            Ok(v) => {
                self.refused = v.refused;
                self.resolved = Some(v.addr);
                Ok(self.route(host, v.addr))
            }
            Err((reason, refused)) => {
                self.refused = refused;
                Err(reason)
            }
        }
    }

    /// A host named by one of the box's credential rules is intercepted; any other is spliced.
    fn route(&self, host: &str, addr: SocketAddr) -> Route {
        match &self.interceptor {
            Some(i) if i.intercepts(host) => Route::Intercept { addr },
            _ => Route::Passthrough { addr },
        }
    }

    async fn refuse<S: AsyncWrite + Unpin>(mut self, stream: &mut S, reason: DenyReason) {
        if self.via == Some(Via::Connect) && !self.answered {
            let status = reason.connect_status();
            let response =
                format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
            // The box may already be gone; the refusal stands either way.
            let _ = stream.write_all(response.as_bytes()).await;
        }
        let _ = stream.shutdown().await;
        self.audit(Verdict::Deny, Some(reason), &Counters::default());
    }

    async fn passthrough<S: AsyncRead + AsyncWrite + Unpin + 'static>(
        mut self,
        mut stream: S,
        addr: SocketAddr,
        first_bytes: &[u8],
    ) {
        let upstream = match self.dial(addr).await {
            Ok(u) => u,
            Err(reason) => return self.refuse(&mut stream, reason).await,
        };
        let counters = Counters::default();
        let mut upstream = Counted::new(upstream, counters.clone());
        let mut stop = self.stop.clone();
        let idle = self.gw.config.timeouts.idle;
        tokio::select! {
            res = splice(&mut stream, &mut upstream, first_bytes) => {
                if let Err(e) = res {
                    tracing::debug!(box_id = %self.egress.box_id, error = %e, "egress splice ended");
                }
            }
            () = counters.idle_for(idle) => self.closed = Some("idle"),
            _ = stop.wait_for(|s| *s) => {}
        }
        self.audit(Verdict::Allow, None, &counters);
    }

    async fn dial(&self, addr: SocketAddr) -> Result<tokio::net::TcpStream, DenyReason> {
        dial(addr, self.gw.config.timeouts.dial).await.map_err(|e| {
            tracing::info!(box_id = %self.egress.box_id, error = %e, "egress dial failed");
            match e {
                DialError::Timeout { .. } => DenyReason::Timeout,
                DialError::Connect { .. } => DenyReason::DialFailed,
            }
        })
    }

    /// Terminates the box's TLS and re-encrypts upstream (`crate::intercept`). A request
    /// refused by the interceptor (TRACE, Host ≠ SNI, …) is a deny line; one that went
    /// upstream is an allow line, written when the response has ended.
    async fn intercept<S: AsyncRead + AsyncWrite + Unpin>(
        mut self,
        mut stream: S,
        addr: SocketAddr,
        client_hello: Vec<u8>,
    ) {
        self.intercept = true;
        let Some(interceptor) = self.interceptor.clone() else {
            return self.refuse(&mut stream, DenyReason::InterceptFailed).await;
        };
        let upstream = match self.dial(addr).await {
            Ok(u) => u,
            Err(reason) => return self.refuse(&mut stream, reason).await,
        };
        let Some(sni) = self.target.clone() else {
            return self.refuse(&mut stream, DenyReason::InterceptFailed).await;
        };
        let counters = Counters::default();
        let upstream = Counted::new(upstream, counters.clone());
        let mut stop = self.stop.clone();
        let idle = self.gw.config.timeouts.idle;
        let served = tokio::select! {
            res = interceptor.serve(&sni, stream, client_hello, upstream) => res,
            () = counters.idle_for(idle) => {
                self.closed = Some("idle");
                return self.audit(Verdict::Allow, None, &counters);
            }
            _ = stop.wait_for(|s| *s) => {
                return self.audit(Verdict::Allow, None, &counters);
            }
        };
        match served {
            Ok(served) => {
                if let Some(e) = &served.stream_error {
                    tracing::debug!(box_id = %self.egress.box_id, error = %e, "egress intercepted stream ended");
                }
                self.credential = served.injected;
                self.withheld = served.withheld.map(|w| WithheldRecord {
                    rule: w.rule,
                    reason: w.why.code(),
                });
                if served.encoded_response {
                    self.audit(Verdict::Deny, Some(DenyReason::EncodedResponse), &counters);
                } else {
                    self.audit(Verdict::Allow, None, &counters);
                }
            }
            Err(e) => {
                tracing::debug!(box_id = %self.egress.box_id, error = %e, "egress interception refused");
                self.audit(Verdict::Deny, Some(intercept_deny(&e)), &counters);
            }
        }
    }

    fn audit(&mut self, decision: Verdict, reason: Option<DenyReason>, counters: &Counters) {
        let record = AuditRecord {
            box_id: self.egress.box_id.clone(),
            time: self
                .time
                .format(&Rfc3339)
                .unwrap_or_else(|_| String::from("1970-01-01T00:00:00Z")),
            target: self.target.clone(),
            port: self.port,
            via: self.via,
            resolved: self.resolved,
            decision,
            reason: reason.as_ref().map(DenyReason::code),
            refused: std::mem::take(&mut self.refused),
            bytes_up: counters.up(),
            bytes_down: counters.down(),
            duration_ms: u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX),
            intercept: self.intercept,
            credential: self.credential.take(),
            withheld: self.withheld.take(),
            closed: self.closed,
        };
        match &reason {
            Some(r) => {
                // debug, not info: a box can make denials as fast as it likes, and each one
                // is already a line in the audit log.
                tracing::debug!(box_id = %record.box_id, target = ?record.target, reason = %r.code(), "egress denied")
            }
            None => {
                tracing::debug!(box_id = %record.box_id, target = ?record.target, "egress connection closed")
            }
        }
        if let Err(e) = self.gw.audit.record(&record) {
            tracing::error!(box_id = %record.box_id, error = %e, "writing the egress audit log failed");
        }
    }
}

fn preamble_deny(e: &PreambleError) -> DenyReason {
    match e {
        PreambleError::Read(_) | PreambleError::Empty | PreambleError::Truncated => {
            DenyReason::ClosedEarly
        }
        PreambleError::TooLong | PreambleError::BadRequestLine | PreambleError::BadPort => {
            DenyReason::BadConnect
        }
        PreambleError::Unrecognised => DenyReason::BadClientHello,
    }
}

fn intercept_deny(e: &InterceptError) -> DenyReason {
    match e {
        InterceptError::Refused(Refusal::Method) => DenyReason::MethodRefused,
        InterceptError::Refused(Refusal::HostMismatch) => DenyReason::HostMismatch,
        InterceptError::Refused(Refusal::BadRequest | Refusal::BadFraming | Refusal::TooLarge)
        | InterceptError::RequestHead(HeadReadError::Malformed(_) | HeadReadError::TooLarge) => {
            DenyReason::BadRequest
        }
        InterceptError::RequestHead(HeadReadError::Read(_) | HeadReadError::Closed) => {
            DenyReason::ClosedEarly
        }
        InterceptError::BoxTls(_) => DenyReason::BoxTls,
        InterceptError::BoxTimeout | InterceptError::UpstreamTimeout => DenyReason::Timeout,
        InterceptError::UpstreamTls(_) | InterceptError::UpstreamWrite(_) => {
            DenyReason::UpstreamTls
        }
        InterceptError::Ca(_) | InterceptError::ServerConfig(_) | InterceptError::ServerName(_) => {
            DenyReason::InterceptFailed
        }
    }
}
