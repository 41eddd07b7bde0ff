//! Connection tracking for the listeners of [`crate::listener`]: the request-head timeout that
//! starts with a head's first byte (so an idle keep-alive connection is not cut by it), and the
//! graceful drain of the webhook (`docs/security.md#keep-alive-and-shutdown`).
//!
//! An HTTP/1.1 server can close an idle keep-alive connection safely only when the client
//! cannot be writing a request on it at that moment: kube-apiserver's webhook client keeps idle
//! connections for 90 s and reuses them, so a server that closes one earlier races a request
//! that the client has just written, which fails with `write: broken pipe` (issue 29). Hence:
//!
//! - the idle keep-alive timeout ([`crate::listener::Limits::idle`]) is longer than the client's,
//!   so the client closes first;
//! - a slow request head is still cut [`crate::listener::Limits::header_read`] after its first
//!   byte ([`Guarded`]), and a connection that never sends a request is still cut by the
//!   first-request timeout;
//! - on shutdown ([`Drain::start`]) nothing is closed under a client: every later HTTP/1
//!   answer carries `Connection: close` (the client closes after reading it), an HTTP/2
//!   connection gets `GOAWAY`, idle HTTP/1 connections stay open until their client closes them,
//!   new connections are still accepted, and the server stops once no connection is open or the
//!   drain time is over ([`Drain::closed`]).

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderValue, Request, Response, Version, header};
use axum_server::ConnectionShutdown;
use axum_server::accept::Accept;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::watch;
use tokio::time::{Instant, Sleep};

/// Where one connection is between requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// No request in flight and no byte of the next head yet.
    Idle,
    /// Bytes of a request head arrived; the head is not complete yet.
    Head,
    /// At least one request is being served.
    Busy,
}

#[derive(Debug)]
struct ConnState {
    phase: Phase,
    in_flight: usize,
    /// The connection speaks HTTP/2 (seen on its first request).
    h2: bool,
    /// axum-server's per-connection handle, for a `GOAWAY` when the drain starts.
    shutdown: Option<ConnectionShutdown>,
}

/// One connection's state, shared by its stream ([`Guarded`]) and its service ([`Tracked`]).
#[derive(Debug)]
struct Conn {
    state: Mutex<ConnState>,
}

impl Conn {
    fn new() -> Self {
        Self {
            state: Mutex::new(ConnState {
                phase: Phase::Idle,
                in_flight: 0,
                h2: false,
                shutdown: None,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, ConnState> {
        // A poisoned lock only means a panic elsewhere while holding it; the state is plain data.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Bytes arrived: on an idle HTTP/1 connection they start a head. Returns whether they did.
    fn bytes_arrived(&self) -> bool {
        let mut state = self.lock();
        if state.phase == Phase::Idle && !state.h2 {
            state.phase = Phase::Head;
            true
        } else {
            false
        }
    }

    fn reading_head(&self) -> bool {
        self.lock().phase == Phase::Head
    }

    /// A request was dispatched (its head is complete).
    fn begin(&self, version: Version, shutdown: Option<ConnectionShutdown>) {
        let mut state = self.lock();
        state.in_flight += 1;
        state.phase = Phase::Busy;
        if version == Version::HTTP_2 {
            state.h2 = true;
        }
        if state.shutdown.is_none() {
            state.shutdown = shutdown;
        }
    }

    /// A request's answer is ready (or the request was dropped).
    fn end(&self) {
        let mut state = self.lock();
        state.in_flight = state.in_flight.saturating_sub(1);
        if state.in_flight == 0 {
            state.phase = Phase::Idle;
        }
    }

    /// Sends `GOAWAY` on an HTTP/2 connection whose handle is known; HTTP/1 connections are left
    /// alone (their next answer carries `Connection: close`).
    fn go_away(&self) {
        let state = self.lock();
        if state.h2
            && let Some(shutdown) = &state.shutdown
        {
            shutdown.graceful_shutdown();
        }
    }
}

#[derive(Debug)]
struct DrainState {
    draining: watch::Sender<bool>,
    /// Connections past their TLS handshake and not yet closed.
    open: watch::Sender<usize>,
    conns: Mutex<Vec<Weak<Conn>>>,
}

/// The drain of one listener: counts its open connections and, once [`Drain::start`]ed, makes
/// every connection close at its client's pace. Cheap to clone (shared state).
#[derive(Clone, Debug)]
pub struct Drain {
    state: Arc<DrainState>,
}

impl Default for Drain {
    fn default() -> Self {
        Self::new()
    }
}

impl Drain {
    /// A listener's drain, not started, no connection open.
    pub fn new() -> Self {
        Self {
            state: Arc::new(DrainState {
                draining: watch::Sender::new(false),
                open: watch::Sender::new(0),
                conns: Mutex::new(Vec::new()),
            }),
        }
    }

    /// Connections open now (past the TLS handshake).
    pub fn open(&self) -> usize {
        *self.state.open.borrow()
    }

    /// Whether [`Drain::start`] was called.
    pub fn is_draining(&self) -> bool {
        *self.state.draining.borrow()
    }

    /// Starts the drain: every later HTTP/1 answer carries `Connection: close`, every HTTP/2
    /// connection gets `GOAWAY` (now, or at its first request when none came yet). Idempotent.
    /// Returns the connections open at that moment.
    pub fn start(&self) -> usize {
        self.state.draining.send_replace(true);
        for conn in self.live() {
            conn.go_away();
        }
        self.open()
    }

    /// Resolves once no connection is open, or after `limit`; returns the connections still
    /// open then (0 when every client closed its own).
    pub async fn closed(&self, limit: Duration) -> usize {
        let mut open = self.state.open.subscribe();
        let _ = tokio::time::timeout(limit, open.wait_for(|n| *n == 0)).await;
        self.open()
    }

    fn live(&self) -> Vec<Arc<Conn>> {
        let conns = self.state.conns.lock().unwrap_or_else(|e| e.into_inner());
        conns.iter().filter_map(Weak::upgrade).collect()
    }

    fn register(&self) -> Arc<Conn> {
        let conn = Arc::new(Conn::new());
        {
            let mut conns = self.state.conns.lock().unwrap_or_else(|e| e.into_inner());
            conns.retain(|c| c.strong_count() > 0);
            conns.push(Arc::downgrade(&conn));
        }
        self.state.open.send_modify(|n| *n += 1);
        conn
    }

    fn closed_one(&self) {
        self.state.open.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// An acceptor that wraps another (TLS, or none) and tracks each accepted connection: its
/// stream becomes a [`Guarded`] (the request-head timeout) and its service a [`Tracked`] (the
/// drain's `Connection: close` and `GOAWAY`).
#[derive(Clone, Debug)]
pub struct Guard<A> {
    inner: A,
    drain: Drain,
    header_read: Duration,
}

impl<A> Guard<A> {
    /// Tracks the connections `inner` accepts in `drain`; a request head must be complete
    /// within `header_read` of its first byte.
    pub fn new(inner: A, drain: Drain, header_read: Duration) -> Self {
        Self {
            inner,
            drain,
            header_read,
        }
    }
}

type Accepted<S, T> = io::Result<(Guarded<S>, Tracked<T>)>;

impl<A, I, S> Accept<I, S> for Guard<A>
where
    A: Accept<I, S>,
    A::Future: Send + 'static,
    A::Stream: Send + 'static,
    A::Service: Send + 'static,
{
    type Stream = Guarded<A::Stream>;
    type Service = Tracked<A::Service>;
    type Future = Pin<Box<dyn Future<Output = Accepted<A::Stream, A::Service>> + Send>>;

    fn accept(&self, stream: I, service: S) -> Self::Future {
        let accepted = self.inner.accept(stream, service);
        let (drain, header_read) = (self.drain.clone(), self.header_read);
        Box::pin(async move {
            let (stream, service) = accepted.await?;
            let conn = drain.register();
            Ok((
                Guarded {
                    inner: stream,
                    conn: conn.clone(),
                    drain: drain.clone(),
                    header_read,
                    timer: Box::pin(tokio::time::sleep(header_read)),
                    timing: false,
                },
                Tracked {
                    inner: service,
                    conn,
                    drain,
                },
            ))
        })
    }
}

/// A connection's stream: fails a read with `TimedOut` when a request head is not complete
/// within `header_read` of its first byte; counts as open in its [`Drain`] until dropped.
#[derive(Debug)]
pub struct Guarded<S> {
    inner: S,
    conn: Arc<Conn>,
    drain: Drain,
    header_read: Duration,
    timer: Pin<Box<Sleep>>,
    /// The timer runs for the head being read.
    timing: bool,
}

impl<S> Drop for Guarded<S> {
    fn drop(&mut self) {
        self.drain.closed_one();
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Guarded<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before && this.conn.bytes_arrived() {
                    let deadline = Instant::now() + this.header_read;
                    this.timer.as_mut().reset(deadline);
                    this.timing = true;
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(err)) => Poll::Ready(Err(err)),
            Poll::Pending => {
                if this.timing {
                    if !this.conn.reading_head() {
                        this.timing = false;
                    } else if this.timer.as_mut().poll(cx).is_ready() {
                        this.timing = false;
                        return Poll::Ready(Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            "request head not complete in time",
                        )));
                    }
                }
                Poll::Pending
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Guarded<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A connection's service: marks the connection busy while a request is served, and while
/// draining answers HTTP/1 with `Connection: close` and HTTP/2 with `GOAWAY`.
#[derive(Clone, Debug)]
pub struct Tracked<S> {
    inner: S,
    conn: Arc<Conn>,
    drain: Drain,
}

/// Ends a request's busy mark even when its future is dropped (the client went away).
struct InFlight(Arc<Conn>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.end();
    }
}

type Answer = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

impl<S, B> tower::Service<Request<B>> for Tracked<S>
where
    S: tower::Service<Request<B>, Response = Response<Body>, Error = Infallible>,
    S::Future: Send + 'static,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Answer;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let version = request.version();
        let shutdown = request.extensions().get::<ConnectionShutdown>().cloned();
        self.conn.begin(version, shutdown.clone());
        let in_flight = InFlight(self.conn.clone());
        let drain = self.drain.clone();
        let answer = self.inner.call(request);
        Box::pin(async move {
            let mut response = answer.await?;
            if drain.is_draining() {
                if version == Version::HTTP_2 {
                    if let Some(shutdown) = shutdown {
                        shutdown.graceful_shutdown();
                    }
                } else {
                    response
                        .headers_mut()
                        .insert(header::CONNECTION, HeaderValue::from_static("close"));
                }
            }
            drop(in_flight);
            Ok(response)
        })
    }
}
