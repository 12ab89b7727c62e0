//! Sandbox -> host from a toolbox sandbox (Daytona): one command runs the
//! program with its framed stream going into a new 0600 scratch file
//! (sources pinned as on any sandbox); one download streams that file
//! into the same validating reader a streaming exec feeds, and the host
//! deletes the file as soon as the transfer has begun. Nothing lands
//! before the whole stream validated; the output guard counts what
//! crosses the wire as it streams.
//!
//! Incremental, a command cannot take the host's answer while it runs, so
//! the listings come first, from a report command of their own (the host
//! walks its targets meanwhile): the host judges them as on a stream (see
//! [`keep`](super::keep)) and the program carries its answer in its own
//! text.

use std::collections::HashMap;

use sandbox_sync_core::incremental::Facts;
use sandbox_sync_core::outcome::{conclude_outbound, Producer};
use sandbox_sync_core::script::parse_outbound_report;
use sandbox_sync_core::script::toolbox::{self as wrapper, Program, INLINE_MAX};

use sandbox_sync_driver::bindings::sandbox_sync::provider::host_fs::GrantedDir;
use sandbox_sync_driver::bindings::sandbox_sync::provider::types::{
    OperationResult, SyncError, SyncRequest,
};
use sandbox_sync_driver::codec;
use sandbox_sync_driver::errors::{ended, exit, from_status};
use sandbox_sync_driver::io;
use sandbox_sync_driver::request::Mapping;

use super::keep::{self, decide, Keeping};
use super::plan::{prepare, Prepared};
use super::receive::{how_read, land, Channel, Receiver};
use crate::toolbox::{self, Ran, UploadStopped};

pub fn run(req: &SyncRequest, targets: &[&GrantedDir]) -> Result<Vec<OperationResult>, SyncError> {
    let Prepared {
        root,
        scratch,
        mappings,
        text,
        offered,
        listed,
        facts,
        program,
        ..
    } = prepare(req, targets, codec::incremental(), false)?;
    let limits = &req.limits;
    let base = root.trim_end_matches('/');
    let out = format!("{base}/{scratch}.out");
    let program_file = format!("{base}/{scratch}.sh");
    // The report's listings, which the program takes over once it runs:
    // removed here where it may not run.
    let report_scratch = sandbox_sync_driver::scratch::fresh();
    let handed = format!("{base}/{report_scratch}");
    let (text, decided) = match program.report_program(&report_scratch)? {
        None => (text, None),
        Some(report) => {
            let started =
                toolbox::start_program(&report, limits.timeout_ms, limits.max_stderr_bytes)?;
            // The host's side is walked while the sandbox lists its own.
            let walked = keep::prewalk(&listed, targets, &mappings);
            let answered = started.wait().and_then(|ran| {
                let (answer, keeping) =
                    match judge(req, &ran, walked?, targets, &mappings, &listed, &facts)? {
                        Some(judged) => judged,
                        None => ("0\n".repeat(listed.len()).into_bytes(), Keeping::default()),
                    };
                let text = program.finish_answered(&answer, &report_scratch)?;
                Ok((text, Some(keeping)))
            });
            answered.inspect_err(|_| toolbox::remove(&[handed.as_str()], limits.timeout_ms))?
        }
    };
    let mut given = vec![out.as_str(), program_file.as_str()];
    given.extend(decided.as_ref().map(|_| handed.as_str()));
    // A program too long to be one argument is uploaded first.
    let program = if text.len() <= INLINE_MAX {
        Program::Inline(&text)
    } else {
        toolbox::upload(
            &program_file,
            "uploading the program",
            limits.timeout_ms,
            limits.max_stderr_bytes,
            |_, stdin| {
                io::write_all(stdin, text.as_bytes())
                    .and_then(|()| io::flush(stdin))
                    .map_err(|e| UploadStopped::Stream(e.to_string()))
            },
        )
        .inspect_err(|_| toolbox::remove(&given[2..], limits.timeout_ms))?;
        Program::Uploaded {
            path: &program_file,
            len: text.len(),
        }
    };
    let sep = toolbox::separator();
    let command = wrapper::outbound(program, &out, &sep, limits.max_stderr_bytes)?;
    let ran = match toolbox::run(&command, &sep, limits.timeout_ms, limits.max_stderr_bytes) {
        Ok(ran) => ran,
        Err(e) => {
            // The command may never have run, to unlink what it was given
            // or to remove what it wrote.
            toolbox::remove(&given, limits.timeout_ms);
            return Err(e);
        }
    };
    let last = req
        .operations
        .last()
        .map_or("(none)", |o| o.operation_id.as_str());
    if !exit(&ran.status).succeeded() {
        if exit(&ran.status).was_killed() {
            // Killed: neither its trap nor the wrapper removed anything.
            toolbox::cleanup(&root, &scratch, &given, limits.timeout_ms);
        }
        return Err(from_status(&ran.status, last, limits.timeout_ms));
    }

    let exec = toolbox::download_and_remove(&out, limits.timeout_ms, limits.max_stderr_bytes)?;
    let stdin = exec.stdin().map_err(SyncError::Transport)?;
    let stdout = exec.stdout().map_err(SyncError::Transport)?;
    let mut receiver = Receiver::new(req, targets, &mappings, stdout);
    let received = receiver.receive(Channel {
        exec: &exec,
        stdin: &stdin,
        offered,
        probes: false,
        listed: &listed,
        facts: &facts,
        decided,
    });
    // Stops the transfer if the stream was refused midway.
    let (cut, blame, staged) = receiver.end();
    drop(stdin);
    let status = exec.finish();
    drop(exec);
    let read = how_read(&received, cut);
    let results = conclude_outbound(
        received,
        read,
        ended(&status),
        Producer::Download,
        blame,
        limits.timeout_ms,
    );
    land(results, staged)
}

/// The host's answer to the report `ran` and what it keeps, judged against
/// the targets (walked while it ran); `None` where it told nothing (a
/// source that does not exist yet, say: nothing kept, nothing recorded,
/// and the program says what is wrong).
///
/// # Errors
/// More listed files than `--max-entries`; a host walk failure.
fn judge(
    req: &SyncRequest,
    ran: &Ran,
    walked: keep::Prewalked,
    targets: &[&GrantedDir],
    mappings: &[Mapping<'_>],
    listed: &[usize],
    facts: &HashMap<usize, Facts>,
) -> Result<Option<(Vec<u8>, Keeping)>, SyncError> {
    let listings = exit(&ran.status)
        .succeeded()
        .then(|| {
            parse_outbound_report(
                &ran.stdout,
                keep::MAX_LISTING,
                usize::try_from(req.limits.max_entries).unwrap_or(usize::MAX),
            )
        })
        .filter(|l| l.iter().map(|x| x.0).eq(listed.iter().copied()));
    let Some(listings) = listings else {
        return Ok(None);
    };
    let mut named = Vec::with_capacity(listings.len());
    for (k, files) in listings {
        named.push((k, files.map_err(keep::too_many)?));
    }
    decide(named, targets, mappings, facts, walked).map(Some)
}
