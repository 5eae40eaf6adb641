//! Local mode's HTTP server: axum's router over hyper, with the limits `axum::serve` leaves out.
//!
//! - At most [`Limits::max_connections`] connections at once; one more is closed as soon as it
//!   is accepted, so a flood of idle connections cannot take every file descriptor and stop
//!   the server answering at all.
//! - A client must send a request's headers within [`Limits::header_read`] (hyper's
//!   `header_read_timeout`), so stalled connections, and idle ones between requests, are closed
//!   instead of held for ever.
//!
//! Stopping is graceful: no new connection is taken, each open one finishes the request it is
//! serving (hyper's `graceful_shutdown`), and event streams end on the same signal.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;

/// The server's limits.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections served at once.
    pub max_connections: usize,
    /// Time a client has to send a request's headers (and an idle connection to start its
    /// next request).
    pub header_read: Duration,
}

/// Connections refused because the cap was reached (for the log and tests).
pub static REFUSED_CONNECTIONS: AtomicU64 = AtomicU64::new(0);

/// Serves `app` on `listener` until `stop` resolves, then lets open connections finish.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    stop: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let (stopping, stopped) = watch::channel(false);
    let mut connections = JoinSet::new();
    let mut stop = std::pin::pin!(stop);
    loop {
        let accepted = tokio::select! {
            () = &mut stop => break,
            accepted = listener.accept() => accepted,
            // Reap finished connections as they go, so the set stays as small as the load.
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            // Out of descriptors, or a connection reset before it was taken: keep serving.
            Err(error) => {
                tracing::warn!(%error, "accepting a connection failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            let n = REFUSED_CONNECTIONS.fetch_add(1, Ordering::Relaxed) + 1;
            tracing::warn!(
                %peer,
                limit = limits.max_connections,
                refused_so_far = n,
                "connection refused: too many open connections"
            );
            drop(stream);
            continue;
        };
        let service = TowerToHyperService::new(app.clone());
        let mut stopped = stopped.clone();
        connections.spawn(async move {
            let _permit = permit;
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_read);
            let connection = builder.serve_connection(TokioIo::new(stream), service);
            let mut connection = std::pin::pin!(connection);
            let result = tokio::select! {
                result = connection.as_mut() => result,
                () = async { drop(stopped.wait_for(|stop| *stop).await) } => {
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
            };
            if let Err(error) = result {
                tracing::debug!(%peer, %error, "connection ended with an error");
            }
        });
    }
    drop(listener);
    let _ = stopping.send(true);
    while connections.join_next().await.is_some() {}
    Ok(())
}
