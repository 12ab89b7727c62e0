//! The Kubernetes exec wire protocol's numbers: channel numbers of the
//! `v4`/`v5.channel.k8s.io` subprotocols (the first byte of every binary
//! WebSocket frame), as `k8s.io/apimachinery/pkg/util/httpstream/wsstream/conn.go`
//! defines them and kube-rs names them (`remote_command.rs`).

/// The container's stdin.
pub(super) const STDIN_CHANNEL: u8 = 0;
/// The container's stdout.
pub(super) const STDOUT_CHANNEL: u8 = 1;
/// The container's stderr.
pub(super) const STDERR_CHANNEL: u8 = 2;
/// The exec's status (a `v1.Status` JSON) once it ended.
pub(super) const STATUS_CHANNEL: u8 = 3;
/// v5 only: the payload names a channel its sender will not write again.
pub(super) const CLOSE_CHANNEL: u8 = 255;
