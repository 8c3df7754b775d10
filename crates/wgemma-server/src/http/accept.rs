//! The accept loop: HTTP/1.1 connections served with a header-read deadline, a write
//! deadline ([`crate::http::deadline`]), at most
//! `--max-connections` at once, and a shutdown that waits only for requests in flight.

use crate::error::ApiError;
use crate::http::deadline::{WriteDeadline, WRITE_STALL};
use crate::http::limits::ConnectionLimits;
use anyhow::Result;
use axum::body::{Body, HttpBody as _};
use axum::response::Response;
use axum::Router;
use futures_util::StreamExt as _;
use hyper::body::Incoming;
use hyper::service::Service as _;
use hyper_util::service::TowerToHyperService;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How long shutdown waits for requests in flight before closing their connections.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

/// Serves `router` on `listener` until `shutdown` resolves: HTTP/1.1 with a header-read
/// deadline, at most `max_connections` at once. At shutdown the listener closes, idle
/// connections close at once, and requests in flight get [`SHUTDOWN_GRACE`] to finish.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    limits: ConnectionLimits,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<()> {
    let permits = Arc::new(tokio::sync::Semaphore::new(limits.max_connections));
    let (closing_tx, closing_rx) = tokio::sync::watch::channel(false);
    let mut connections = tokio::task::JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                // Out of file descriptors and the like: the next accept may work.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        while connections.try_join_next().is_some() {}
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            refuse_busy(&stream, limits.max_connections);
            continue;
        };
        let in_flight = Arc::new(AtomicUsize::new(0));
        let service = {
            let (router, in_flight) = (router.clone(), in_flight.clone());
            hyper::service::service_fn(move |req: axum::http::Request<Incoming>| {
                let held = InFlight::enter(&in_flight);
                let call = TowerToHyperService::new(router.clone()).call(req);
                async move { call.await.map(|response| held.until_sent(response)) }
            })
        };
        let mut closing = closing_rx.clone();
        let header_timeout = limits.header_timeout;
        connections.spawn(async move {
            let _permit = permit;
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(header_timeout);
            // A response the client stops reading ends the connection (and frees its
            // place under --max-connections).
            let io = WriteDeadline::new(stream, WRITE_STALL);
            let conn = builder.serve_connection(hyper_util::rt::TokioIo::new(io), service);
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                _ = closing.changed() => {
                    // No new request on this connection; one in flight finishes. A
                    // connection with none (idle, or half a request's headers) is dropped
                    // rather than waited for.
                    conn.as_mut().graceful_shutdown();
                    loop {
                        tokio::select! {
                            _ = conn.as_mut() => break,
                            () = tokio::time::sleep(Duration::from_millis(50)) => {
                                if in_flight.load(Ordering::SeqCst) == 0 {
                                    break;
                                }
                            }
                        }
                    }
                }
            }
        });
    }
    drop(listener);
    let _ = closing_tx.send(true);
    let drained = tokio::time::timeout(SHUTDOWN_GRACE, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        eprintln!(
            "wgemma serve: closing {} connection(s) still busy after {} s",
            connections.len(),
            SHUTDOWN_GRACE.as_secs()
        );
        connections.shutdown().await;
    }
    Ok(())
}

/// Counts a connection's requests from the service call until their response body is
/// sent (a streamed body: until the stream ends or is dropped), for shutdown to tell a
/// busy connection from an idle one.
struct InFlight(Arc<AtomicUsize>);

impl InFlight {
    fn enter(count: &Arc<AtomicUsize>) -> InFlight {
        count.fetch_add(1, Ordering::SeqCst);
        InFlight(count.clone())
    }

    fn until_sent(self, response: Response) -> Response {
        if response.body().size_hint().exact().is_some() {
            // A body already in memory: it is written as soon as the response is.
            return response;
        }
        let (parts, body) = response.into_parts();
        let stream = body.into_data_stream().map(move |chunk| {
            let _held = &self;
            chunk
        });
        Response::from_parts(parts, Body::from_stream(stream))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A connection over the cap: one 503 written if the socket takes it now, then closed
/// (nothing is read from it and nothing waits on it).
fn refuse_busy(stream: &tokio::net::TcpStream, cap: usize) {
    let body = ApiError::overloaded(
        format!("the server is busy: {cap} connections are open (--max-connections); retry later"),
        1,
    )
    .to_json()
    .to_string();
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
         retry-after: 1\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.try_write(response.as_bytes());
}
