//! The wire vocabulary of the `channel.k8s.io` exec protocol: subprotocol
//! names, channel numbers, how a subprotocol is chosen and how a frame is
//! laid out. Every number the session reads or writes is named here, so the
//! session code never spells a channel as a literal.

use tokio_tungstenite::tungstenite::http::HeaderValue;

/// Channel ids, from
/// <https://github.com/kubernetes/kubernetes/blob/master/staging/src/k8s.io/apimachinery/pkg/util/remotecommand/constants.go>.
pub(super) const STDIN_CHANNEL: u8 = 0;
pub(super) const STDOUT_CHANNEL: u8 = 1;
pub(super) const STDERR_CHANNEL: u8 = 2;
/// Carries one `metav1.Status` (JSON) once the process has ended.
pub(super) const STATUS_CHANNEL: u8 = 3;
/// Terminal size changes (only meaningful with `tty=true`).
pub(super) const RESIZE_CHANNEL: u8 = 4;
/// v5 only: "this channel is at EOF"; the payload is the channel id.
pub(super) const CLOSE_CHANNEL: u8 = 255;

/// The `Sec-WebSocket-Protocol` token of [`Protocol::V4`].
pub(super) const V4_PROTOCOL: &str = "v4.channel.k8s.io";
/// The `Sec-WebSocket-Protocol` token of [`Protocol::V5`].
pub(super) const V5_PROTOCOL: &str = "v5.channel.k8s.io";

/// Which WebSocket subprotocols the server accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Protocols {
    /// Accept `v5.channel.k8s.io` (stdin CLOSE frames).
    pub v5: bool,
    /// Accept `v4.channel.k8s.io`.
    pub v4: bool,
}

/// A negotiated subprotocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// `v4.channel.k8s.io`.
    V4,
    /// `v5.channel.k8s.io`.
    V5,
}

impl Protocol {
    /// The `Sec-WebSocket-Protocol` token.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::V4 => V4_PROTOCOL,
            Protocol::V5 => V5_PROTOCOL,
        }
    }
}

/// Picks the subprotocol as the API server's handshake does
/// (`wsstream`): the first one the client offers that is enabled, so the
/// client's order decides.
pub(super) fn negotiate(offered: Option<&HeaderValue>, supported: Protocols) -> Option<Protocol> {
    let offered = offered.and_then(|v| v.to_str().ok()).unwrap_or_default();
    offered.split(',').map(str::trim).find_map(|token| {
        if supported.v5 && token == V5_PROTOCOL {
            Some(Protocol::V5)
        } else if supported.v4 && token == V4_PROTOCOL {
            Some(Protocol::V4)
        } else {
            None
        }
    })
}

/// A binary message: the channel byte, then the payload.
pub(super) fn frame(channel: u8, payload: &[u8]) -> Vec<u8> {
    let mut frame = Vec::with_capacity(payload.len() + 1);
    frame.push(channel);
    frame.extend_from_slice(payload);
    frame
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation_takes_the_first_enabled_protocol_the_client_offers() {
        let offered = HeaderValue::from_static("v5.channel.k8s.io, v4.channel.k8s.io");
        let both = Protocols { v5: true, v4: true };
        let v4_only = Protocols {
            v5: false,
            v4: true,
        };
        let v5_only = Protocols {
            v5: true,
            v4: false,
        };
        assert_eq!(negotiate(Some(&offered), both), Some(Protocol::V5));
        assert_eq!(negotiate(Some(&offered), v4_only), Some(Protocol::V4));
        let old = HeaderValue::from_static("v4.channel.k8s.io");
        assert_eq!(negotiate(Some(&old), v5_only), None);
        assert_eq!(negotiate(None, both), None);
        // The client's order decides, as in the API server's handshake.
        let v4_first = HeaderValue::from_static("v4.channel.k8s.io, v5.channel.k8s.io");
        assert_eq!(negotiate(Some(&v4_first), both), Some(Protocol::V4));
        assert_eq!(negotiate(Some(&v4_first), v5_only), Some(Protocol::V5));
        let unknown_first = HeaderValue::from_static("v6.channel.k8s.io, v5.channel.k8s.io");
        assert_eq!(negotiate(Some(&unknown_first), both), Some(Protocol::V5));
    }
}
