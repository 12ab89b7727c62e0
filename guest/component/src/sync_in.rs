//! Host -> sandbox: plan, one exec, headers from the guest, contents spliced
//! host-side, then conclude from what the program reported. When the data
//! is worth it, the program first says which codecs it has, and the host
//! compresses the archive for the one chosen.

use sandbox_sync_core::outcome::{self, Operation};
use std::fmt::Write as _;

use sandbox_sync_core::plan::{
    file_source, mtime, plan_dir, HostDir, Kind, Planned, PlannedKind, Stamp,
};
use sandbox_sync_core::plan_log::PlanLog;
use sandbox_sync_core::sandbox_path::{confine, normalize_remote_dir, split_parent};
use sandbox_sync_core::script::{self, Codec, InboundScript, Listing, ListingParser, Status};
use sandbox_sync_core::tar_write;
use sandbox_sync_driver::codec;
use sandbox_sync_driver::errors::exit;
use sandbox_sync_driver::plan::{check_modes, command_cwd};
use sandbox_sync_driver::scratch::cleanup_if_killed;

use sandbox_sync_driver::bindings::sandbox_sync::provider::host_fs::GrantedDir;
use sandbox_sync_driver::bindings::sandbox_sync::provider::sandbox_exec::{
    Execution, FileSend, SendError,
};
use sandbox_sync_driver::bindings::sandbox_sync::provider::types::{
    FileMapping, MappingKind, OperationResult, SyncError, SyncRequest,
};
use sandbox_sync_driver::bindings::wasi::io::streams::{InputStream, OutputStream};
use sandbox_sync_driver::io::{self, StreamError};

/// Most bytes of status lines accepted from the inbound program.
const MAX_STATUS_BYTES: u64 = 1 << 20;
/// Header bytes buffered before a write.
const HEADER_BATCH: usize = 64 * 1024;
/// Most host files handed to one `send-files` call.
const FILES_PER_CALL: usize = 1024;

pub fn run(req: &SyncRequest, sources: &[&GrantedDir]) -> Result<Vec<OperationResult>, SyncError> {
    let mut plan = prepare(req, sources)?;
    let started = sandbox_sync_driver::exec::start(
        plan.program.len(),
        req.limits.timeout_ms,
        req.limits.max_stderr_bytes,
    )?;
    let (exec, stdin, stdout) = (started.exec, started.stdin, started.stdout);
    let (root, scratch) = (plan.root.clone(), plan.scratch.clone());
    let cleanup = |status| {
        cleanup_if_killed(status, &root, &scratch, req.limits.max_stderr_bytes);
    };

    // A failure to feed stdin usually means the program stopped early; its
    // exit status explains why, so keep it and decide after `finish`.
    let mut early = Vec::new();
    match send(&exec, &stdin, &stdout, &mut plan, sources, &mut early) {
        sent @ (Ok(_) | Err(Sent::Stream(_))) => {
            let mut results = std::mem::take(&mut plan.results);
            if let Ok(s) = &sent {
                // Kept files were not transferred.
                for &(k, bytes) in &s.kept {
                    if let Some(r) = plan.mapping_op.get(k).and_then(|&i| results.get_mut(i)) {
                        r.files_transferred = r.files_transferred.saturating_sub(1);
                        r.bytes_transferred = r.bytes_transferred.saturating_sub(bytes);
                    }
                }
            }
            // Plain, stdin stays open until the status (the sandbox never
            // needs EOF); a compressed archive ends with stdin.
            let stdin = match &sent {
                Ok(Delivery { codec: Some(_), .. }) => {
                    drop(stdin);
                    None
                }
                _ => Some(stdin),
            };
            let statuses = read_status(&stdout, early);
            let status = exec.finish().map_err(SyncError::Transport)?;
            drop(stdin);
            cleanup(&status);
            let stdin_failed = match &sent {
                Err(Sent::Stream(e)) => Some(e.to_string()),
                _ => None,
            };
            let ops: Vec<Operation<'_>> = req
                .operations
                .iter()
                .map(|o| Operation {
                    id: &o.operation_id,
                    command_timeouts: o
                        .post_upload_commands
                        .iter()
                        .map(|c| c.timeout_ms)
                        .collect(),
                })
                .collect();
            outcome::conclude_inbound(
                &ops,
                &statuses,
                &exit(&status),
                stdin_failed.as_deref(),
                req.limits.timeout_ms,
            )?;
            Ok(results)
        }
        Err(Sent::Refused(e)) => {
            // The walk failed before any archive byte: the program was
            // told so and stops (its trap removes its scratch); let it.
            drop(stdin);
            let _ = read_status(&stdout, early);
            drop(stdout);
            if let Ok(status) = exec.finish() {
                cleanup(&status);
            }
            Err(e)
        }
        Err(Sent::SourceChanged(e) | Sent::Fatal(e)) => {
            // The program never sees its commit marker, so it cannot apply
            // anything; stop it now (any transport) and sweep its scratch.
            exec.abort();
            drop(stdin);
            drop(stdout);
            if let Ok(status) = exec.finish() {
                cleanup(&status);
            }
            Err(e)
        }
    }
}

/// The call: the program, decided from the request alone before the exec
/// starts, and the archive's members, the directory walks' among them
/// added while the program starts.
struct Plan<'a> {
    root: String,
    scratch: String,
    /// The program's text.
    program: String,
    /// Archive members in order, but for the commit token.
    members: PlanLog,
    /// The commit token's member, the archive's last (none: no archive).
    commit: Option<Planned>,
    /// Directory mappings still to walk.
    walks: Vec<Walk<'a>>,
    /// What the call reports on success.
    results: Vec<OperationResult>,
    /// Codecs the program offers, most wanted first; empty: no compression.
    offer: &'static [Codec],
    /// The operation of each mapping.
    mapping_op: Vec<usize>,
}

/// A directory mapping to walk: mapping `k` of operation `op`.
struct Walk<'a> {
    k: usize,
    op: usize,
    mapping: &'a FileMapping,
}

impl Plan<'_> {
    /// Walks the directory mappings into the plan, and counts them into
    /// the results.
    fn walk(&mut self, sources: &[&GrantedDir]) -> Result<(), SyncError> {
        for w in std::mem::take(&mut self.walks) {
            let m = w.mapping;
            let before = self.members.tally();
            plan_dir(
                sources[w.k],
                w.k,
                &format!("d{}", w.k),
                &m.source_path,
                &m.exclude,
                m.follow_symlinks,
                &mut self.members,
            )?;
            let added = before.since(self.members.tally());
            if let Some(r) = self.results.get_mut(w.op) {
                r.files_transferred += added.files;
                r.bytes_transferred += added.archive_bytes;
            }
        }
        Ok(())
    }

    /// The members' bytes in the archive (the commit token's included, the
    /// end marker and padding not).
    fn members_len(&self) -> u64 {
        self.members.tally().archive_bytes
            + self.commit.as_ref().map_or(0, |c| c.member().archive_len())
    }
}

/// Validates every path and builds the program before the exec starts.
/// Directory sources are checked here (they exist, are directories, their
/// excludes parse) but walked only once the program runs ([`Plan::walk`]).
fn prepare<'a>(req: &'a SyncRequest, sources: &[&GrantedDir]) -> Result<Plan<'a>, SyncError> {
    let root = normalize_remote_dir(&req.remote_dir)?;
    check_modes(req)?;
    let mappings: usize = req.operations.iter().map(|o| o.files.len()).sum();
    if mappings != sources.len() {
        return Err(SyncError::InvalidRequest(format!(
            "host granted {} source directories for {mappings} mappings",
            sources.len()
        )));
    }
    let mut members = PlanLog::new();
    let scratch = sandbox_sync_driver::scratch::fresh();
    let mut script = InboundScript::new(&root, req.limits.timeout_ms, &scratch);
    let mut results = Vec::with_capacity(req.operations.len());
    let mut walks = Vec::new();
    let mut k = 0;
    let incremental = codec::incremental();
    let mut mapping_op = Vec::with_capacity(sources.len());
    for (i, op) in req.operations.iter().enumerate() {
        let (mut files, mut bytes) = (0u64, 0u64);
        for m in &op.files {
            let grant = sources[k];
            let target = confine(&root, &m.target_path, "target")?;
            script.preflight(&target)?;
            let (parent, base) = split_parent(&target);
            mapping_op.push(i);
            match m.kind {
                MappingKind::File => {
                    let (path, meta) = file_source(grant, &m.source_path, &target, &root)?;
                    let name = format!("f{k}");
                    files += 1;
                    bytes += meta.size;
                    script.put_file(&name, parent, base, m.mode)?;
                    members.push(&Planned {
                        name: name.into(),
                        mode: meta.mode & 0o777,
                        mtime: mtime(&meta),
                        kind: PlannedKind::HostFile {
                            grant: k,
                            path: path.into(),
                            stamp: Stamp::from(&meta),
                        },
                    });
                }
                MappingKind::Directory => {
                    check_dir_source(grant, &m.source_path, &m.exclude)?;
                    let name = format!("d{k}");
                    if target == root {
                        script.put_root(&name, m.mode)?;
                    } else {
                        script.put_dir(&name, parent, base, m.mode)?;
                    }
                    if incremental {
                        script.reuse_dir(k, &target)?;
                    }
                    walks.push(Walk {
                        k,
                        op: i,
                        mapping: m,
                    });
                }
            }
            k += 1;
        }
        for (j, c) in op.post_upload_commands.iter().enumerate() {
            let cwd = command_cwd(&root, c.cwd.as_deref(), &c.command)?;
            let name = format!("c{i}.{j}");
            script.command(i, j, &name, &cwd, c.timeout_ms)?;
            members.push(&Planned {
                name: name.into(),
                kind: PlannedKind::Inline(c.command.clone().into_bytes()),
                mode: 0o600,
                mtime: 0,
            });
        }
        script.op_done(i);
        results.push(OperationResult {
            operation_id: op.operation_id.clone(),
            files_transferred: files,
            bytes_transferred: bytes,
        });
    }

    let token = io::random_hex(16);
    // Every directory mapping has at least its own member.
    let archive = !members.is_empty() || !walks.is_empty();
    let commit = archive.then(|| Planned {
        name: "commit".into(),
        kind: PlannedKind::Inline(token.clone().into_bytes()),
        mode: 0o600,
        mtime: 0,
    });
    // Offered whenever the policy allows; whether the data is worth it is
    // sampled once the walk is done.
    let offer = codec::preference(codec::policy());
    if archive && !offer.is_empty() {
        script.offer_compression();
    }
    let program = script.finish(archive, &token)?;
    Ok(Plan {
        root,
        scratch,
        program,
        members,
        commit,
        walks,
        results,
        offer,
        mapping_op,
    })
}

/// The cheap checks of a directory source, before the exec: it exists, it
/// is a directory, and its exclude patterns parse.
fn check_dir_source(grant: &GrantedDir, source: &str, exclude: &[String]) -> Result<(), SyncError> {
    sandbox_sync_core::exclude::Excluder::new(exclude)?;
    let top = HostDir::stat_follow(grant, "").map_err(|e| e.source(source))?;
    if top.kind != Kind::Directory {
        return Err(SyncError::InvalidRequest(format!(
            "directory mapping source {source} is not a directory"
        )));
    }
    Ok(())
}

enum Sent {
    /// Stdin failed; the exec status will say why.
    Stream(StreamError),
    /// The walk refused the request before any archive byte was sent.
    Refused(SyncError),
    /// A host source changed while it was being sent.
    SourceChanged(SyncError),
    /// A host-side failure unrelated to the sandbox.
    Fatal(SyncError),
}

/// What [`send`] did.
struct Delivery {
    /// The codec the archive was compressed with.
    codec: Option<Codec>,
    /// Files kept in the sandbox instead of sent: (mapping, bytes).
    kept: Vec<(usize, u64)>,
}

/// Writes the program, then walks the directory sources while it starts.
/// With an archive to send, reads what the program reports (its codecs,
/// what its targets hold; any status lines go to `early`), drops the files
/// the targets already hold, and answers with the codec and the archive's
/// length. Then writes the archive.
fn send(
    exec: &Execution,
    stdin: &OutputStream,
    stdout: &InputStream,
    plan: &mut Plan<'_>,
    sources: &[&GrantedDir],
    early: &mut Vec<u8>,
) -> Result<Delivery, Sent> {
    // No earlier than the sandbox ran anything: bounds its clock's skew.
    let sent_at = io::unix_now();
    io::write_all(stdin, plan.program.as_bytes()).map_err(Sent::Stream)?;
    io::flush(stdin).map_err(Sent::Stream)?;
    if let Err(e) = plan.walk(sources) {
        // Any answer but a codec stops the program.
        let _ = io::write_all(stdin, b"refused 0\n").and_then(|()| io::flush(stdin));
        return Err(Sent::Refused(e));
    }
    let no_archive = Delivery {
        codec: None,
        kept: Vec::new(),
    };
    if plan.commit.is_none() {
        return Ok(no_archive);
    }
    let (caps, listing) = read_report(stdout, early);
    let keep = keep_unchanged(&plan.members, &listing, sent_at);
    drop(listing);
    let members_len = keep.members_len(plan.members_len());
    let kept = keep.counted.clone();
    // Without an end to stdin the sandbox's decompressor would never finish.
    let worth_it = !plan.offer.is_empty()
        && exec.stdin_ends()
        && codec::worth_it(codec::policy(), &plan.members, sources);
    let chosen = codec::choose(if worth_it { plan.offer } else { &[] }, &caps);
    let answer = format!(
        "{} {}\n",
        script::choice_name(chosen),
        tar_write::archive_len(members_len)
    );
    io::write_all(stdin, answer.as_bytes()).map_err(Sent::Stream)?;
    let members = keep.members(plan);
    let Some(chosen) = chosen else {
        send_archive(exec, stdin, members, members_len, sources)?;
        return Ok(Delivery { codec: None, kept });
    };
    let fatal = |e: String| Sent::Fatal(SyncError::Transport(e));
    exec.compress_stdin(codec::to_wit(chosen)).map_err(fatal)?;
    send_archive(exec, stdin, members, members_len, sources)?;
    exec.finish_compressed_stdin().map_err(fatal)?;
    io::flush(stdin).map_err(Sent::Stream)?;
    Ok(Delivery {
        codec: Some(chosen),
        kept,
    })
}

/// Most bytes of listings kept (about 100 bytes a file); past it the
/// listing is dropped and every file is sent.
const MAX_LISTING_BYTES: usize = 64 << 20;

/// Reads what the program reports before it waits for the answer: its
/// listings, then its codec line. It prints nothing else meanwhile (status
/// lines, should any come, go to `early`). A program that ended first (a
/// failed preflight) reports no codecs and no listings.
fn read_report(stdout: &InputStream, early: &mut Vec<u8>) -> (Vec<Codec>, Listing) {
    let mut parser = ListingParser::default();
    let mut pending: Vec<u8> = Vec::new();
    let mut listed = 0usize;
    let mut dropped = false;
    loop {
        let Ok(chunk) = stdout.blocking_read(64 << 10) else {
            return (Vec::new(), Listing::default());
        };
        pending.extend_from_slice(&chunk);
        let mut start = 0;
        while let Some(n) = pending[start..].iter().position(|&b| b == b'\n') {
            let line = &pending[start..start + n + 1];
            start += n + 1;
            let text = std::str::from_utf8(&line[..n]).unwrap_or("");
            if let Some(caps) = script::parse_caps(text) {
                let listing = if dropped {
                    Listing::default()
                } else {
                    parser.finish()
                };
                return (caps, listing);
            }
            listed += line.len();
            dropped |= listed > MAX_LISTING_BYTES;
            if dropped {
                parser = ListingParser::default();
            } else if !parser.line(text) && script::parse_status(text).is_some() {
                early.extend_from_slice(line);
            }
        }
        pending.drain(..start);
        if pending.len() > MAX_LISTING_BYTES {
            // One endless line: not a listing.
            pending.clear();
            dropped = true;
        }
    }
}

/// Drops from the archive the host files of directory mappings whose
/// targets already hold them and names them in a `k<k>` member instead,
/// which the program copies from the old target into the staged tree.
///
/// A target file is the source's when size, mode and mtime (seconds) match
/// and it is not "racy" (as git calls it): it landed at least a whole
/// second after its mtime, so a later write to the source, however soon,
/// changed the mtime. When it landed is bounded by its ctime, in the
/// sandbox's clock, less the most the sandbox's clock can be ahead of ours
/// (its `now` against `sent_at`, our clock before it ran anything).
///
/// Names with a newline or backslash are always sent (the program's file
/// list is one name a line, and GNU tar unquotes backslashes). A sandbox
/// that lies here can only make us skip a file whose bytes it already
/// controls: the copy comes from its own target, and every name and the
/// tree's shape still come from the plan.
fn keep_unchanged(members: &PlanLog, listing: &Listing, sent_at: i64) -> Kept {
    let mut kept = Kept {
        skip: Vec::new(),
        lists: Vec::new(),
        counted: Vec::new(),
    };
    let Some(now) = listing.now.filter(|_| !listing.dirs.is_empty()) else {
        return kept;
    };
    // The most the sandbox's clock can be ahead of ours (a second for each
    // clock's rounding).
    let ahead = now.saturating_sub(sent_at).saturating_add(2);
    let mut lists: std::collections::BTreeMap<usize, Vec<u8>> = Default::default();
    let mut prefix = String::new();
    for (i, p) in members.iter().enumerate() {
        let PlannedKind::HostFile { grant, stamp, .. } = &p.kind else {
            continue;
        };
        let Some(files) = listing.dirs.get(grant) else {
            continue;
        };
        prefix.clear();
        let _ = write!(prefix, "d{grant}/");
        let Some(rel) = p.name.strip_prefix(prefix.as_str()) else {
            continue;
        };
        let same = files.get(rel).is_some_and(|l| {
            l.size == stamp.size
                && l.mode == p.mode
                && l.mtime == stamp.mtime_sec
                && l.ctime.saturating_sub(ahead) > stamp.mtime_sec.saturating_add(1)
        });
        if same && !rel.contains(['\n', '\\']) {
            let list = lists.entry(*grant).or_default();
            list.extend_from_slice(b"./");
            list.extend_from_slice(rel.as_bytes());
            list.push(b'\n');
            if kept.skip.is_empty() {
                kept.skip = vec![false; members.len()];
            }
            kept.skip[i] = true;
            // What `tally` counted for it.
            kept.counted.push((*grant, p.member().archive_len()));
        }
    }
    kept.lists = lists
        .into_iter()
        .map(|(k, list)| Planned {
            name: format!("k{k}").into(),
            kind: PlannedKind::Inline(list),
            mode: 0o600,
            mtime: 0,
        })
        .collect();
    kept
}

/// Files [`keep_unchanged`] leaves out of the archive.
struct Kept {
    /// Per planned member: kept, so not sent (empty: none kept).
    skip: Vec<bool>,
    /// The `k<k>` members naming them.
    lists: Vec<Planned>,
    /// (mapping, archive bytes) of each, for the reported totals.
    counted: Vec<(usize, u64)>,
}

impl Kept {
    /// The members to send: the plan less the kept files, then the keep
    /// lists, then the commit token.
    fn members<'a>(&'a self, plan: &'a Plan) -> impl Iterator<Item = Planned> + 'a {
        plan.members
            .iter()
            .enumerate()
            .filter(|(i, _)| !self.skip.get(*i).copied().unwrap_or(false))
            .map(|(_, p)| p)
            .chain(self.lists.iter().cloned())
            .chain(plan.commit.clone())
    }

    /// Their bytes in the archive, from the whole plan's.
    fn members_len(&self, planned: u64) -> u64 {
        let dropped: u64 = self.counted.iter().map(|c| c.1).sum();
        let lists: u64 = self.lists.iter().map(|p| p.member().archive_len()).sum();
        planned - dropped + lists
    }
}

/// Writes the archive: headers from guest memory, file contents handed to
/// the host in batches.
fn send_archive(
    exec: &Execution,
    stdin: &OutputStream,
    members: impl Iterator<Item = Planned>,
    members_len: u64,
    sources: &[&GrantedDir],
) -> Result<(), Sent> {
    // Bytes not yet handed over: they become the prefix of the next host
    // file, or are written after the last one.
    let mut buf: Vec<u8> = Vec::with_capacity(HEADER_BATCH + 1024);
    let mut batch = FileBatch::default();
    for p in members {
        p.member()
            .write_header(&mut buf)
            .map_err(|e| Sent::Fatal(e.into()))?;
        match &p.kind {
            PlannedKind::HostFile { grant, path, stamp } => {
                if batch.grant != Some(*grant) || batch.files.len() >= FILES_PER_CALL {
                    batch.send(exec, sources)?;
                    batch.grant = Some(*grant);
                }
                batch.files.push(FileSend {
                    prefix: std::mem::take(&mut buf),
                    path: path.to_string(),
                    size: stamp.size,
                    mtime_sec: stamp.mtime_sec,
                    mtime_nsec: stamp.mtime_nsec,
                    device: stamp.device,
                    inode: stamp.inode,
                });
                tar_write::write_padding(&mut buf, stamp.size);
            }
            PlannedKind::Inline(bytes) => {
                buf.extend_from_slice(bytes);
                tar_write::write_padding(&mut buf, bytes.len() as u64);
            }
            PlannedKind::Dir | PlannedKind::Symlink(_) => {}
        }
        if batch.files.is_empty() && buf.len() >= HEADER_BATCH {
            io::write_all(stdin, &buf).map_err(Sent::Stream)?;
            buf.clear();
        }
    }
    batch.send(exec, sources)?;
    if members_len > 0 {
        tar_write::write_end(&mut buf, members_len);
    }
    io::write_all(stdin, &buf).map_err(Sent::Stream)?;
    io::flush(stdin).map_err(Sent::Stream)
}

/// Consecutive host files from one grant, sent by the host in one call
/// (which re-checks each file's identity, size and mtime after sending it).
#[derive(Default)]
struct FileBatch {
    grant: Option<usize>,
    files: Vec<FileSend>,
}

impl FileBatch {
    fn send(&mut self, exec: &Execution, sources: &[&GrantedDir]) -> Result<(), Sent> {
        let files = std::mem::take(&mut self.files);
        let Some(grant) = self.grant else {
            return Ok(());
        };
        if files.is_empty() {
            return Ok(());
        }
        exec.send_files(sources[grant], &files)
            .map_err(|e| match e {
                SendError::SourceChanged(m) => Sent::SourceChanged(SyncError::SourceChanged(m)),
                SendError::ReadFailed(m) => Sent::Fatal(SyncError::Io(m)),
                SendError::StdinFailed(m) => Sent::Stream(StreamError::Failed(m)),
            })
    }
}

/// Reads the inbound program's status lines until stdout ends (after
/// `early`, what was read before).
fn read_status(stdout: &InputStream, early: Vec<u8>) -> Vec<Status> {
    let mut bytes = early;
    while let Ok(chunk) = stdout.blocking_read(64 * 1024) {
        if bytes.len() as u64 + chunk.len() as u64 > MAX_STATUS_BYTES {
            break;
        }
        bytes.extend_from_slice(&chunk);
    }
    String::from_utf8_lossy(&bytes)
        .lines()
        .filter_map(script::parse_status)
        .collect()
}
