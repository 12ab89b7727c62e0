//! What a sync-in sends, decided from the request before the exec
//! starts: the program, the archive's members (the directory walks' added
//! while the program starts), and what the call reports.

use std::collections::BTreeMap;

use sandbox_sync_core::plan::{file_source, mtime, DirWalk, Planned, PlannedKind, Stamp};
use sandbox_sync_core::plan_log::PlanLog;
use sandbox_sync_core::sandbox_path::{confine, normalize_remote_dir, split_parent};
use sandbox_sync_core::script::{Codec, InboundScript};
use sandbox_sync_core::KEEP_FILE_MIN;

use sandbox_sync_driver::bindings::sandbox_sync::provider::host_fs::GrantedDir;
use sandbox_sync_driver::bindings::sandbox_sync::provider::sandbox_exec;
use sandbox_sync_driver::bindings::sandbox_sync::provider::types::{
    MappingKind, OperationResult, SyncError, SyncRequest,
};
use sandbox_sync_driver::codec;
use sandbox_sync_driver::io;
use sandbox_sync_driver::plan::{check_modes, command_cwd};
use sandbox_sync_driver::request::{self, Mapping};

/// The call: the program, decided from the request alone before the exec
/// starts, and the archive's members, the directory walks' among them
/// added while the program starts.
pub struct Plan<'a> {
    pub root: String,
    pub scratch: String,
    /// Archive members in order, but for the commit token.
    pub members: PlanLog,
    /// The commit token's member, the archive's last (none: no archive).
    pub commit: Option<Planned>,
    /// The host's grants, one per mapping.
    pub sources: &'a [&'a GrantedDir],
    /// Directory mappings still to walk, each with its operation.
    pub walks: Vec<(usize, DirWalk<'a, GrantedDir>)>,
    /// What the call reports on success.
    pub results: Vec<OperationResult>,
    /// Codecs the program offers, most wanted first; empty: no compression.
    pub offer: &'static [Codec],
    /// The operation of each mapping.
    pub mapping_op: Vec<usize>,
    /// File mappings whose target may be kept, with the mode it lands with.
    pub file_modes: BTreeMap<usize, u32>,
    /// The host's clock before any source identity was read.
    pub walked_at: (i64, u32),
}

impl Plan<'_> {
    /// The members' bytes in the archive (the commit token's included, the
    /// end marker and padding not).
    pub fn members_len(&self) -> u64 {
        self.members.tally().archive_bytes
            + self.commit.as_ref().map_or(0, |c| c.member().archive_len())
    }
}

/// Validates every path and builds the program before the exec starts.
/// Directory sources are checked here ([`DirWalk::new`]: they exist, are
/// directories, their excludes parse) but walked only once the program
/// runs ([`Walker`]).
pub fn prepare<'a>(
    req: &'a SyncRequest,
    sources: &'a [&'a GrantedDir],
    incremental: bool,
) -> Result<(Plan<'a>, Unfinished), SyncError> {
    let root = normalize_remote_dir(&req.remote_dir)?;
    check_modes(req)?;
    let mappings = request::mapping_count(req);
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
    let mut mapping_op = Vec::with_capacity(sources.len());
    let mut file_modes = BTreeMap::new();
    if incremental {
        script.record();
        // Over a link a listing's bytes cost more than gzip in the sandbox.
        if sandbox_exec::transfer_remote() {
            script.zip_listings();
        }
    }
    for (i, op, op_mappings) in request::operations(req) {
        let (mut files, mut bytes) = (0u64, 0u64);
        for Mapping {
            grant: k, spec: m, ..
        } in op_mappings
        {
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
                    // A kept file lands as a sent one does, so another
                    // mapping writing the same path (through any name)
                    // changes nothing.
                    if incremental && meta.size >= KEEP_FILE_MIN {
                        script.reuse_file(k, &target)?;
                        file_modes.insert(k, m.mode.unwrap_or(meta.mode & 0o777));
                    }
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
                    let name = format!("d{k}");
                    let walk = DirWalk::new(
                        grant,
                        k,
                        &name,
                        &m.source_path,
                        &m.exclude,
                        m.follow_symlinks,
                    )?;
                    if target == root {
                        script.put_root(&name, m.mode)?;
                    } else {
                        script.put_dir(&name, parent, base, m.mode)?;
                    }
                    if incremental {
                        script.reuse_dir(k, &target)?;
                    }
                    walks.push((i, walk));
                }
            }
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
    let plan = Plan {
        root,
        scratch,
        members,
        commit,
        sources,
        walks,
        results,
        offer,
        mapping_op,
        file_modes,
        walked_at: io::now(),
    };
    Ok((
        plan,
        Unfinished {
            script,
            archive,
            token,
        },
    ))
}

/// The program, to be finished the way its transport runs it.
pub struct Unfinished {
    script: InboundScript,
    /// There is an archive to send.
    archive: bool,
    /// The commit token the archive ends with.
    token: String,
}

impl Unfinished {
    /// The program for a streaming exec, which reports in its own run.
    pub fn finish(self) -> Result<String, SyncError> {
        Ok(self.script.finish(self.archive, &self.token)?)
    }

    /// The report as a program of its own, staging its listings in
    /// `scratch` (a toolbox sandbox, where the report must come before the
    /// program starts); none when nothing is listed.
    pub fn report_program(&self, scratch: &str) -> Result<Option<String>, SyncError> {
        Ok(self.script.report_program(scratch)?)
    }

    /// The program that takes over a report's listings from `scratch`.
    pub fn finish_reported(self, scratch: &str) -> Result<String, SyncError> {
        Ok(self
            .script
            .finish_reported(self.archive, &self.token, scratch)?)
    }
}
/// The directory mappings' members, walked one at a time, and what each
/// operation's results count for them.
pub struct Walker<'a> {
    walks: std::vec::IntoIter<(usize, DirWalk<'a, GrantedDir>)>,
    current: Option<(usize, DirWalk<'a, GrantedDir>)>,
    /// Per operation: (files, archive bytes) walked.
    counted: Vec<(usize, u64, u64)>,
}

impl<'a> Walker<'a> {
    pub fn new(walks: Vec<(usize, DirWalk<'a, GrantedDir>)>) -> Self {
        Walker {
            walks: walks.into_iter(),
            current: None,
            counted: Vec::new(),
        }
    }

    /// Moves up to `n` members into `log`. Returns true when the walk is
    /// done.
    pub fn fill(&mut self, log: &mut PlanLog, n: usize) -> Result<bool, SyncError> {
        for _ in 0..n {
            match self.next() {
                Some(p) => log.push(&p?),
                None => return Ok(true),
            }
        }
        Ok(false)
    }

    /// Adds what was walked to the operations' results.
    pub fn count_into(&self, results: &mut [OperationResult]) {
        for &(op, files, bytes) in &self.counted {
            if let Some(r) = results.get_mut(op) {
                r.files_transferred += files;
                r.bytes_transferred += bytes;
            }
        }
    }
}

impl Iterator for Walker<'_> {
    type Item = Result<Planned, SyncError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let (op, walk) = match &mut self.current {
                Some(current) => current,
                None => self.current.insert(self.walks.next()?),
            };
            match walk.next() {
                Some(Ok(p)) => {
                    let file = u64::from(!matches!(p.kind, PlannedKind::Dir));
                    let bytes = p.member().archive_len();
                    match self.counted.last_mut() {
                        Some(c) if c.0 == *op => {
                            c.1 += file;
                            c.2 += bytes;
                        }
                        _ => self.counted.push((*op, file, bytes)),
                    }
                    return Some(Ok(p));
                }
                Some(Err(e)) => {
                    // Nothing is walked after a failure.
                    self.walks = Vec::new().into_iter();
                    self.current = None;
                    return Some(Err(e.into()));
                }
                None => self.current = None,
            }
        }
    }
}
