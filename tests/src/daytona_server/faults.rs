//! The failures a test injects into the fake toolbox.

use super::*;

/// Failures the fake injects.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    /// Every request (or, with `status_on`, every request to that
    /// endpoint) is answered with this status and a JSON error.
    pub status: Option<u16>,
    /// The endpoint (`"/process/execute"`, ...) `status` applies to.
    pub status_on: Option<&'static str>,
    /// `bulk-upload` stops reading a file part after this many bytes and
    /// answers as the daemon does a truncated body (the bytes so far stay
    /// in the sandbox).
    pub cut_upload_after: Option<u64>,
    /// Upload and download file bytes, commands and their answers are
    /// paced to this many bytes a second (a throttled link).
    pub bytes_per_sec: Option<u64>,
    /// Every request waits this long before it is served (the round trips
    /// through the proxy and the runner).
    pub latency: Option<Duration>,
    /// `process/execute` never answers.
    pub execute_hangs: bool,
    /// `bulk-download` stops after this many bytes of file data and ends
    /// the answer without its closing boundary (a failed read, as the
    /// daemon ends it).
    pub cut_download_after: Option<u64>,
    /// The first answer of one kind is a flood of this many bytes that
    /// never becomes a valid answer (a hostile or broken toolbox),
    /// streamed as it is made.
    pub flood: Option<(Flood, u64)>,
}

/// An answer a hostile toolbox floods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flood {
    /// `process/execute`: 200, a JSON `result` string that never ends.
    Execute,
    /// `process/execute`: 500 with an endless body.
    ExecuteError,
    /// `bulk-upload`: 200, a confirmation that never ends.
    Upload,
    /// `DELETE /files`: 400 with an endless body.
    Delete,
    /// `bulk-download`: 500 with an endless body.
    DownloadError,
    /// `bulk-download`: 200 multipart whose preamble never ends.
    DownloadPreamble,
    /// `bulk-download`: 200 multipart whose first part's headers never end.
    DownloadHeaders,
    /// `bulk-download`: 200, an `error` part that never ends.
    DownloadErrorPart,
}

impl Flood {
    pub(super) fn endpoint(self) -> &'static str {
        match self {
            Flood::Execute | Flood::ExecuteError => "/process/execute",
            Flood::Upload => "/files/bulk-upload",
            Flood::Delete => "/files",
            _ => "/files/bulk-download",
        }
    }
}

/// `head`, then `n` bytes of `fill`, made as they are sent.
pub(super) fn flood_body(head: String, fill: u8, n: u64) -> Body {
    let chunk = Bytes::from(vec![fill; 64 << 10]);
    let rest = futures_util::stream::unfold(n, move |left| {
        let chunk = chunk.clone();
        async move {
            let k = usize::try_from(left.min(chunk.len() as u64)).ok()?;
            (k > 0).then(|| (Ok(Frame::data(chunk.slice(..k))), left - k as u64))
        }
    });
    let head = futures_util::stream::once(async move { Ok(Frame::data(Bytes::from(head))) });
    BoxBody::new(StreamBody::new(head.chain(rest)))
}

/// The flood `f` of `n` bytes, as an answer; `path` is the file asked for.
pub(super) fn flood_answer(f: Flood, n: u64, path: &str) -> Response<Body> {
    let multipart = format!("multipart/form-data; boundary={BOUNDARY}");
    let (status, kind, head, fill) = match f {
        Flood::Execute => (200, "application/json", "{\"exitCode\":0,\"result\":\"".into(), b'A'),
        Flood::ExecuteError | Flood::Delete | Flood::DownloadError => {
            (if f == Flood::Delete { 400 } else { 500 }, "text/plain", String::new(), b'x')
        }
        Flood::Upload => (200, "application/json", "{\"files\":[{\"path\":\"".into(), b'p'),
        Flood::DownloadPreamble => (200, multipart.as_str(), String::new(), b'-'),
        Flood::DownloadHeaders => (
            200,
            multipart.as_str(),
            format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{path}\"\r\nX-Pad: "),
            b'h',
        ),
        Flood::DownloadErrorPart => (
            200,
            multipart.as_str(),
            format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"error\"; filename=\"{path}\"\r\n\r\n"),
            b'e',
        ),
    };
    Response::builder()
        .status(status)
        .header(http::header::CONTENT_TYPE, kind.to_owned())
        .body(flood_body(head, fill, n))
        .unwrap_or_else(|_| Response::new(empty()))
}
