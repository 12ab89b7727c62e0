//! A writer through a shared mapping, as numpy.memmap, LMDB with
//! `MDB_WRITEMAP` or a database's buffer pool write: Python's own `mmap`
//! in a process of its own, which keeps the file mapped until dropped.
//! Linux stamps the file's ctime and mtime only when such a writer first
//! writes a clean page; later writes to that page leave both as they are
//! until writeback cleans it.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

/// `python3` mapping one file `MAP_SHARED`, writing what it is told.
pub struct MappedWriter {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

/// The writer, shared with the Node suite.
const PROGRAM: &str = include_str!("../mapped_writer.py");

impl MappedWriter {
    /// Maps the file at `path` (which must not be empty) for writing.
    ///
    /// # Panics
    /// Without `python3`, or when it cannot map the file.
    pub fn open(path: &Path) -> Self {
        use std::os::unix::ffi::OsStrExt as _;
        let hex: String = path
            .as_os_str()
            .as_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let mut child = Command::new("python3")
            .args(["-c", PROGRAM, &hex])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start python3 (the mapped writer)");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut w = MappedWriter {
            child,
            stdin,
            stdout,
        };
        assert_eq!(
            w.answer(),
            "mapped",
            "python3 could not map {}",
            path.display()
        );
        w
    }

    /// Writes `bytes` at `offset` through the mapping (no `msync`: the
    /// page stays dirty, as a writer's pages do between its flushes), cut
    /// at the file's end (a file shortened since is not written past).
    ///
    /// # Panics
    /// When the writer fails.
    pub fn write(&mut self, offset: u64, bytes: &[u8]) {
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let stdin = self.stdin.as_mut().expect("the writer is open");
        writeln!(stdin, "{offset} {hex}").expect("tell the mapped writer");
        assert_eq!(self.answer(), "ok", "the mapped writer failed");
    }

    fn answer(&mut self) -> String {
        let mut line = String::new();
        self.stdout
            .read_line(&mut line)
            .expect("hear the mapped writer");
        line.trim_end().to_owned()
    }
}

impl Drop for MappedWriter {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}
