//! Turning an accepted exec request into a WebSocket: hand the already-read
//! request head back to tungstenite, negotiate the `channel.k8s.io`
//! subprotocol in its handshake callback, then start the exec session.

// tungstenite's handshake callback fixes the `Result<Response, ErrorResponse>` shape.
#![allow(clippy::result_large_err)]

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_util::stream::{SplitSink, SplitStream};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::http::{header, HeaderValue};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use super::protocol::{negotiate, Protocol, Protocols};
use super::session::serve_exec;
use super::status::{BAD_REQUEST, JSON_CONTENT_TYPE};
use super::Shared;

/// Largest WebSocket message we accept (kube-rs sends stdin in 4 KiB frames).
const MAX_MESSAGE: usize = 1 << 20;

pub(super) type Ws = WebSocketStream<Prefixed<TcpStream>>;
pub(super) type WsSink = SplitSink<Ws, Message>;
pub(super) type WsSource = SplitStream<Ws>;

/// Hands the already-read head back to tungstenite, then the socket.
pub(super) struct Prefixed<S> {
    prefix: Vec<u8>,
    pos: usize,
    inner: S,
}

impl<S: AsyncRead + Unpin> AsyncRead for Prefixed<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.pos < this.prefix.len() {
            let n = buf.remaining().min(this.prefix.len() - this.pos);
            buf.put_slice(&this.prefix[this.pos..this.pos + n]);
            this.pos += n;
            if this.pos == this.prefix.len() {
                this.prefix = Vec::new();
                this.pos = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Prefixed<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// The handshake's answer: the response with the chosen subprotocol, or a
/// `BadRequest` `Status` when none of the offered ones is accepted.
fn answer_handshake(
    req: &Request,
    mut resp: Response,
    supported: Protocols,
) -> Result<(Response, Protocol), ErrorResponse> {
    let offered = req.headers().get(header::SEC_WEBSOCKET_PROTOCOL);
    if let Some(protocol) = negotiate(offered, supported) {
        resp.headers_mut().insert(
            header::SEC_WEBSOCKET_PROTOCOL,
            HeaderValue::from_static(protocol.as_str()),
        );
        return Ok((resp, protocol));
    }
    let body = BAD_REQUEST.json("no supported channel.k8s.io subprotocol was offered");
    let length = HeaderValue::from(body.len());
    let mut err = ErrorResponse::new(Some(body));
    *err.status_mut() = BAD_REQUEST.code;
    let headers = err.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(JSON_CONTENT_TYPE),
    );
    headers.insert(header::CONTENT_LENGTH, length);
    Err(err)
}

/// Completes the WebSocket handshake for a validated exec request (`head`
/// is every byte read so far), after [`Faults::exec_latency`], and serves
/// the exec.
///
/// [`Faults::exec_latency`]: super::Faults::exec_latency
pub(super) async fn upgrade_exec(
    stream: TcpStream,
    head: Vec<u8>,
    argv: Vec<String>,
    shared: Arc<Shared>,
) {
    let faults = shared.faults();
    if let Some(delay) = faults.exec_latency {
        tokio::time::sleep(delay).await;
    }
    let supported = shared.config.protocols;
    let mut chosen = None;
    let negotiate_protocol = |req: &Request, resp: Response| -> Result<Response, ErrorResponse> {
        let (resp, protocol) = answer_handshake(req, resp, supported)?;
        chosen = Some(protocol);
        Ok(resp)
    };
    let config = WebSocketConfig::default()
        .max_message_size(Some(MAX_MESSAGE))
        .max_frame_size(Some(MAX_MESSAGE));
    let prefixed = Prefixed {
        prefix: head,
        pos: 0,
        inner: stream,
    };
    let ws = match tokio_tungstenite::accept_hdr_async_with_config(
        prefixed,
        negotiate_protocol,
        Some(config),
    )
    .await
    {
        Ok(ws) => ws,
        Err(e) => {
            tracing::debug!(error = %e, "exec upgrade failed");
            return;
        }
    };
    let Some(protocol) = chosen else {
        tracing::warn!("upgraded without a subprotocol");
        return;
    };
    shared.record_exec(&argv);
    tracing::debug!(protocol = protocol.as_str(), argv = ?argv, "exec upgraded");
    serve_exec(ws, protocol, argv, shared, faults).await;
}
