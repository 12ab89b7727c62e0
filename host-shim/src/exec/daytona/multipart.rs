//! The multipart bodies of `bulk-upload` (written here, streamed) and
//! `bulk-download` (parsed with `multer`, streamed).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use futures_util::Stream;

use super::{Download, ToolboxError};

/// The daemon's fixed boundary for `bulk-download` answers.
pub const DOWNLOAD_BOUNDARY: &str = "DAYTONA-FILE-BOUNDARY";

/// Chunks the parser hands over ahead of the reader.
const AHEAD: usize = 4;
/// Most bytes of the answer read but not yet handed on as file data: the
/// preamble, a part's headers, a boundary split across reads. multer
/// buffers (and rescans) those without a limit of its own.
const MAX_HELD: u64 = 1 << 20;
/// multer reads its stream until it is pending before it looks at what it
/// read, so a fast toolbox would fill it without bound: the stream pauses
/// after this many bytes, and multer hands them on.
const BURST: u64 = 256 << 10;

/// A fresh random boundary for an upload: the data must never hold it,
/// and an archive carries bytes the sandbox may once have written.
///
/// # Errors
/// When the system's random source cannot be read.
pub fn boundary() -> Result<String, ToolboxError> {
    use std::io::Read;
    let mut b = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .map_err(|e| ToolboxError::Transport(format!("no random boundary: {e}")))?;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    Ok(format!("sandbox-sync-{hex}"))
}

/// The bytes before and after one file's data in a `bulk-upload` body:
/// the `files[0].path` part (it must come first), then the `files[0].file`
/// part's headers; after the data, the closing boundary.
///
/// # Errors
/// A destination that cannot be a form value or a quoted filename.
pub fn upload_frame(boundary: &str, dest: &str) -> Result<(Bytes, Bytes), ToolboxError> {
    if !dest.starts_with('/')
        || dest
            .chars()
            .any(|c| c.is_control() || c == '"' || c == '\\')
    {
        return Err(ToolboxError::Malformed(format!(
            "{dest:?} cannot be an upload destination"
        )));
    }
    let head = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"files[0].path\"\r\n\r\n{dest}\r\n\
--{boundary}\r\nContent-Disposition: form-data; name=\"files[0].file\"; filename=\"{dest}\"\r\n\
Content-Type: application/octet-stream\r\n\r\n"
    );
    let tail = format!("\r\n--{boundary}--\r\n");
    Ok((Bytes::from(head), Bytes::from(tail)))
}

/// The one file part of a `bulk-download` answer for `path`, as a stream
/// of its bytes. The stream ends with an error where the part is an error
/// part, is shorter than its `Content-Length`, or the closing boundary
/// never comes (the daemon ends a failed transfer that way).
pub fn single_file<S, E>(body: S, boundary: String, path: String) -> Download
where
    S: Stream<Item = Result<Bytes, E>> + Send + 'static,
    E: Into<Box<dyn std::error::Error + Send + Sync>> + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(AHEAD);
    let meter = Arc::new(Meter::default());
    let body = Metered {
        inner: Box::pin(body),
        meter: Arc::clone(&meter),
        burst: 0,
    };
    tokio::spawn(async move {
        let mut parts = multer::Multipart::new(body, boundary);
        if let Err(e) = parse(&mut parts, &path, &meter, &tx).await {
            let e = if meter.tripped.load(Ordering::Relaxed) {
                ToolboxError::TooLarge {
                    call: "bulk-download",
                    limit: MAX_HELD as usize,
                }
            } else {
                e
            };
            let _ = tx.send(Err(e)).await;
        }
    });
    Box::pin(futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    }))
}

type Sender = tokio::sync::mpsc::Sender<Result<Bytes, ToolboxError>>;

/// The answer's body as multer reads it: counted, paused every [`BURST`]
/// bytes, and failed once multer holds more than [`MAX_HELD`].
struct Metered<S> {
    inner: std::pin::Pin<Box<S>>,
    meter: Arc<Meter>,
    burst: u64,
}

impl<S, E> Stream for Metered<S>
where
    S: Stream<Item = Result<Bytes, E>>,
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Item = Result<Bytes, Box<dyn std::error::Error + Send + Sync>>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        use std::task::Poll;
        if self.burst >= BURST {
            self.burst = 0;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let chunk = match self.inner.as_mut().poll_next(cx) {
            Poll::Ready(Some(Ok(chunk))) => chunk,
            Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(None) => return Poll::Ready(None),
            Poll::Pending => return Poll::Pending,
        };
        self.burst += chunk.len() as u64;
        self.meter
            .pulled
            .fetch_add(chunk.len() as u64, Ordering::Relaxed);
        if self.meter.held() > MAX_HELD {
            self.meter.tripped.store(true, Ordering::Relaxed);
            return Poll::Ready(Some(Err(
                "the answer holds too much that is not file data".into()
            )));
        }
        Poll::Ready(Some(Ok(chunk)))
    }
}

/// What the parser pulled from the answer and handed on.
#[derive(Default)]
struct Meter {
    pulled: AtomicU64,
    handed: AtomicU64,
    tripped: AtomicBool,
}

impl Meter {
    /// Bytes pulled but not handed on: what multer holds.
    fn held(&self) -> u64 {
        self.pulled
            .load(Ordering::Relaxed)
            .saturating_sub(self.handed.load(Ordering::Relaxed))
    }

    fn hand(&self, n: usize) {
        self.handed.fetch_add(n as u64, Ordering::Relaxed);
    }
}

async fn parse(
    parts: &mut multer::Multipart<'static>,
    path: &str,
    meter: &Meter,
    tx: &Sender,
) -> Result<(), ToolboxError> {
    let cut = |e: multer::Error| ToolboxError::Cut(format!("download of {path}: {e}"));
    let mut field = parts
        .next_field()
        .await
        .map_err(cut)?
        .ok_or_else(|| ToolboxError::Malformed(format!("download of {path}: no part")))?;
    if field.file_name() != Some(path) {
        return Err(ToolboxError::Malformed(format!(
            "download of {path}: a part for {:?}",
            field.file_name()
        )));
    }
    let declared = field
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let name = field.name().map(str::to_owned);
    match name.as_deref() {
        Some("file") => {
            let mut got = 0u64;
            while let Some(chunk) = field.chunk().await.map_err(cut)? {
                got += chunk.len() as u64;
                meter.hand(chunk.len());
                if tx.send(Ok(chunk)).await.is_err() {
                    // The reader went away: nothing more to do.
                    return Ok(());
                }
            }
            if declared.is_some_and(|n| n != got) {
                return Err(ToolboxError::Cut(format!(
                    "download of {path}: {got} of {declared:?} bytes"
                )));
            }
        }
        Some("error") => {
            let mut body = Vec::new();
            while let Some(chunk) = field.chunk().await.map_err(cut)? {
                meter.hand(chunk.len());
                if body.len() + chunk.len() > super::MAX_ANSWER {
                    return Err(ToolboxError::TooLarge {
                        call: "bulk-download",
                        limit: super::MAX_ANSWER,
                    });
                }
                body.extend_from_slice(&chunk);
            }
            let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
            let text = |k: &str| {
                v.get(k)
                    .and_then(serde_json::Value::as_str)
                    .map(str::to_owned)
            };
            return Err(ToolboxError::File {
                path: path.to_owned(),
                code: text("code").unwrap_or_else(|| "UNKNOWN".into()),
                message: text("message")
                    .unwrap_or_else(|| String::from_utf8_lossy(&body).into_owned()),
            });
        }
        other => {
            return Err(ToolboxError::Malformed(format!(
                "download of {path}: a part named {other:?}"
            )))
        }
    }
    // multer hands out one field at a time.
    drop(field);
    match parts.next_field().await.map_err(cut)? {
        None => Ok(()),
        Some(_) => Err(ToolboxError::Malformed(format!(
            "download of {path}: more than one part"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::StreamExt;

    fn body(parts: &[&'static [u8]]) -> impl Stream<Item = Result<Bytes, std::io::Error>> {
        let parts: Vec<Result<Bytes, std::io::Error>> =
            parts.iter().map(|p| Ok(Bytes::from_static(p))).collect();
        futures_util::stream::iter(parts)
    }

    async fn read(d: Download) -> Result<Vec<u8>, ToolboxError> {
        let mut out = Vec::new();
        let mut d = d;
        while let Some(c) = d.next().await {
            out.extend_from_slice(&c?);
        }
        Ok(out)
    }

    #[tokio::test]
    async fn a_whole_part_streams_and_a_cut_one_fails() {
        let whole: &[u8] = b"--DAYTONA-FILE-BOUNDARY\r\nContent-Disposition: form-data; name=\"file\"; filename=\"/w/f\"\r\nContent-Length: 5\r\n\r\nhello\r\n--DAYTONA-FILE-BOUNDARY--\r\n";
        let d = single_file(body(&[whole]), DOWNLOAD_BOUNDARY.into(), "/w/f".into());
        assert_eq!(read(d).await.unwrap(), b"hello");
        // The same without its closing boundary.
        let cut = &whole[..whole.len() - 30];
        let d = single_file(body(&[cut]), DOWNLOAD_BOUNDARY.into(), "/w/f".into());
        assert!(matches!(read(d).await, Err(ToolboxError::Cut(_))));
        // A part shorter than it said.
        let short: &[u8] = b"--DAYTONA-FILE-BOUNDARY\r\nContent-Disposition: form-data; name=\"file\"; filename=\"/w/f\"\r\nContent-Length: 9\r\n\r\nhello\r\n--DAYTONA-FILE-BOUNDARY--\r\n";
        let d = single_file(body(&[short]), DOWNLOAD_BOUNDARY.into(), "/w/f".into());
        assert!(matches!(read(d).await, Err(ToolboxError::Cut(_))));
    }

    #[tokio::test]
    async fn an_error_part_is_a_typed_file_error() {
        let err: &[u8] = b"--DAYTONA-FILE-BOUNDARY\r\nContent-Disposition: form-data; name=\"error\"; filename=\"/w/f\"\r\nContent-Type: application/json; charset=utf-8\r\n\r\n{\"statusCode\":404,\"message\":\"file not found: /w/f\",\"code\":\"FILE_NOT_FOUND\"}\r\n--DAYTONA-FILE-BOUNDARY--\r\n";
        let d = single_file(body(&[err]), DOWNLOAD_BOUNDARY.into(), "/w/f".into());
        match read(d).await {
            Err(ToolboxError::File { code, .. }) => assert_eq!(code, "FILE_NOT_FOUND"),
            other => panic!("{other:?}"),
        }
    }

    /// A stream that is always ready (a fast toolbox): a big file part
    /// streams whole, and a preamble that never ends is refused at the cap.
    #[tokio::test]
    async fn a_fast_big_part_streams_and_an_endless_preamble_is_refused() {
        fn chunk(b: u8) -> Result<Bytes, std::io::Error> {
            Ok(Bytes::from(vec![b; 64 << 10]))
        }
        let head = b"--DAYTONA-FILE-BOUNDARY\r\nContent-Disposition: form-data; name=\"file\"; filename=\"/w/f\"\r\n\r\n";
        let parts = std::iter::once(Ok(Bytes::from_static(head)))
            .chain((0..128).map(|_| chunk(b'x')))
            .chain(std::iter::once(Ok(Bytes::from_static(
                b"\r\n--DAYTONA-FILE-BOUNDARY--\r\n",
            ))));
        let d = single_file(
            futures_util::stream::iter(parts),
            DOWNLOAD_BOUNDARY.into(),
            "/w/f".into(),
        );
        assert_eq!(read(d).await.unwrap().len(), 8 << 20);
        let endless = futures_util::stream::iter((0..1024).map(|_| chunk(b'-')));
        let d = single_file(endless, DOWNLOAD_BOUNDARY.into(), "/w/f".into());
        assert!(matches!(
            read(d).await,
            Err(ToolboxError::TooLarge {
                limit: MAX_HELD_USIZE,
                ..
            })
        ));
    }

    const MAX_HELD_USIZE: usize = MAX_HELD as usize;

    #[test]
    fn upload_frames_refuse_unquotable_paths() {
        assert!(upload_frame("b", "/w/ok").is_ok());
        for bad in ["relative", "/w/a\"b", "/w/a\nb", "/w/a\\b"] {
            assert!(upload_frame("b", bad).is_err(), "{bad:?}");
        }
    }
}
