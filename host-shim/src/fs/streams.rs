//! `wasi:io` streams over regular host files.
//!
//! Regular files never block for long, so these read and write synchronously
//! in the non-blocking calls and are always ready: no task per file, no
//! channel hop, one copy per chunk.

use std::io::{Read, Write};

use bytes::Bytes;
use wasmtime_wasi::p2::{InputStream, OutputStream, Pollable, StreamError, StreamResult};

/// Largest chunk handed over per call.
const CHUNK: usize = 1 << 20;

/// Reads a host file.
pub struct FileInputStream {
    file: std::fs::File,
    eof: bool,
}

impl FileInputStream {
    pub fn new(file: std::fs::File) -> Self {
        FileInputStream { file, eof: false }
    }
}

#[async_trait::async_trait]
impl Pollable for FileInputStream {
    async fn ready(&mut self) {}
}

impl InputStream for FileInputStream {
    fn read(&mut self, size: usize) -> StreamResult<Bytes> {
        if self.eof {
            return Err(StreamError::Closed);
        }
        let mut buf = vec![0u8; size.min(CHUNK)];
        match self.file.read(&mut buf) {
            Ok(0) if !buf.is_empty() => {
                self.eof = true;
                Err(StreamError::Closed)
            }
            Ok(n) => {
                buf.truncate(n);
                Ok(Bytes::from(buf))
            }
            Err(e) => Err(StreamError::LastOperationFailed(
                wasmtime::Error::from(e).context("read"),
            )),
        }
    }
}

/// Writes a host file created by `host-fs.create-exclusive`.
pub struct FileOutputStream {
    file: std::fs::File,
}

impl FileOutputStream {
    pub fn new(file: std::fs::File) -> Self {
        FileOutputStream { file }
    }
}

#[async_trait::async_trait]
impl Pollable for FileOutputStream {
    async fn ready(&mut self) {}
}

impl OutputStream for FileOutputStream {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.file.write_all(&bytes).map_err(|e| {
            StreamError::LastOperationFailed(wasmtime::Error::from(e).context("write"))
        })
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(CHUNK)
    }
}
