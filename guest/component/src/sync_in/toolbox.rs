//! Host -> a toolbox sandbox (Daytona): two calls, whatever the number of
//! operations. One upload streams the program, the host's answer and the
//! archive into one scratch file (headers from the guest, contents spliced
//! host-side, as on a streaming exec); one command opens that file as the
//! program's stdin, unlinks it, and runs the program, which extracts,
//! applies modes, promotes and runs the post-upload commands as it does
//! anywhere.
//!
//! The program cannot report before the host answers: a command takes no
//! stdin. So where keeping files could pay (incremental, and at least
//! [`REPORT_MIN_BYTES`] to send), a first command runs the report alone
//! (what the targets hold, which codecs the sandbox has) and the archive
//! leaves out what they hold: three calls. Otherwise nothing is kept, and
//! the codec is chosen blind: gzip, which nearly every image has. A
//! sandbox without it exits `NO_CODEC` before reading anything, and the
//! call is made once more, plain.

use sandbox_sync_core::plan::Planned;
use sandbox_sync_core::script::{self, exit as code, toolbox as wrapper, Caps, Codec, Listing};
use sandbox_sync_core::tar_write;

use sandbox_sync_driver::bindings::sandbox_sync::provider::host_fs::GrantedDir;
use sandbox_sync_driver::bindings::sandbox_sync::provider::sandbox_exec::Execution;
use sandbox_sync_driver::bindings::sandbox_sync::provider::types::{
    OperationResult, SyncError, SyncRequest,
};
use sandbox_sync_driver::bindings::wasi::io::streams::OutputStream;
use sandbox_sync_driver::codec;
use sandbox_sync_driver::errors::exit;
use sandbox_sync_driver::io;

use super::archive::ArchiveWriter;
use super::keep::Keeper;
use super::report::{parse_report, parse_statuses};
use super::{conclude, prepare, Plan, Sent, Walker};
use crate::toolbox::{self, Ran};

/// Below this many archive bytes a re-sync sends everything rather than
/// pay a round trip to learn what the targets hold (1 MiB takes 0.2 s at
/// 5 MB/s, about what that round trip and its listing cost).
pub const REPORT_MIN_BYTES: u64 = 1 << 20;

pub fn run(req: &SyncRequest, sources: &[&GrantedDir]) -> Result<Vec<OperationResult>, SyncError> {
    let mut plan = prepare(req, sources, codec::incremental(), true)?;
    // The whole archive is planned first: its length goes in the answer.
    let mut walker = Walker::new(std::mem::take(&mut plan.walks));
    let walked = walker.fill(&mut plan.members, usize::MAX);
    walker.count_into(&mut plan.results);
    walked?;
    // No earlier than the sandbox ran anything: bounds its clock's skew.
    let sent_at = io::unix_now();
    let (caps, listing) = match &plan.report_program {
        Some(p) if plan.commit.is_some() && plan.members_len() >= REPORT_MIN_BYTES => {
            report(req, p)
        }
        _ => (None, Listing::default()),
    };
    let mut keeper = Keeper::new(&listing, &plan.file_modes, sent_at);
    let skip: Vec<bool> = if keeper.is_idle() {
        Vec::new()
    } else {
        plan.members.iter().map(|p| keeper.keeps(&p)).collect()
    };
    let lists: Vec<Planned> = keeper.lists().collect();
    let archive = Archive {
        skip: &skip,
        lists: &lists,
        len: plan.members_len() - keeper.dropped_len()
            + lists.iter().map(|p| p.member().archive_len()).sum::<u64>(),
    };
    let policy = codec::policy();
    let compress = plan.commit.is_some()
        && !plan.offer.is_empty()
        && codec::worth_it(policy, &plan.members, sources);
    // What to try, in order. A sandbox that reported its codecs gets the
    // first it has of those asked for. Otherwise the choice is blind:
    // gzip, which nearly every image has, whatever was preferred (zstd
    // would cost a sandbox without it two more calls every sync); one
    // without gzip exits NO_CODEC before it reads a byte, and gets it
    // plain.
    let reported: [Option<Codec>; 1];
    let tries: &[Option<Codec>] = match (compress, &caps) {
        (false, _) => &[None],
        (true, Some(caps)) => {
            reported = [codec::choose(plan.offer, &caps.codecs)];
            &reported
        }
        (true, None) => &[Some(Codec::Gzip), None],
    };
    let upload = format!("{}/{}.in", plan.root.trim_end_matches('/'), plan.scratch);
    let mut ran = None;
    for &chosen in tries {
        let this = attempt(req, &plan, &archive, &upload, chosen)?;
        let lacks_codec = chosen.is_some() && this.status.exit_code == Some(code::NO_CODEC);
        ran = Some(this);
        if !lacks_codec {
            break;
        }
    }
    let Some(ran) = ran else {
        return Err(SyncError::Transport("no attempt was made".into()));
    };
    if matches!(ran.status.exit_code, None | Some(137)) {
        // Killed (a deadline): its cleanup trap never ran.
        toolbox::cleanup(&plan.root, &plan.scratch, &[&upload], req.limits.timeout_ms);
    }
    conclude(req, &parse_statuses(&ran.stdout), &ran.status, None)?;
    let mut results = std::mem::take(&mut plan.results);
    // Kept files were not transferred.
    for &(k, bytes) in &keeper.counted {
        if let Some(r) = plan.mapping_op.get(k).and_then(|&i| results.get_mut(i)) {
            r.files_transferred = r.files_transferred.saturating_sub(1);
            r.bytes_transferred = r.bytes_transferred.saturating_sub(bytes);
        }
    }
    Ok(results)
}

/// Runs the report alone: what the targets hold and which codecs the
/// sandbox has. Anything but a whole report (a remote dir that does not
/// exist yet, say) means nothing is known, and the program itself will
/// say what is wrong.
fn report(req: &SyncRequest, program: &str) -> (Option<Caps>, Listing) {
    let limits = &req.limits;
    let sep = toolbox::separator();
    let reported = wrapper::plain(
        wrapper::Program::Inline(program),
        &sep,
        limits.max_stderr_bytes,
    )
    .ok()
    .and_then(|command| {
        toolbox::run(&command, &sep, limits.timeout_ms, limits.max_stderr_bytes).ok()
    })
    .filter(|ran| exit(&ran.status).succeeded())
    .and_then(|ran| parse_report(&ran.stdout));
    match reported {
        Some((caps, listing)) => (Some(caps), listing),
        None => (None, Listing::default()),
    }
}

/// What the archive holds of the plan.
struct Archive<'a> {
    /// Per planned member: the target holds it, so it is left out (empty:
    /// nothing is).
    skip: &'a [bool],
    /// The keep lists' members.
    lists: &'a [Planned],
    /// The members' archive bytes, the commit token's included.
    len: u64,
}

/// One upload and one command, with `chosen` compressing the archive.
fn attempt(
    req: &SyncRequest,
    plan: &Plan<'_>,
    archive: &Archive<'_>,
    upload: &str,
    chosen: Option<Codec>,
) -> Result<Ran, SyncError> {
    let limits = &req.limits;
    let exec = toolbox::upload(upload, limits.timeout_ms, limits.max_stderr_bytes)?;
    let stdin = exec.stdin().map_err(SyncError::Transport)?;
    let written = write(&exec, &stdin, plan, archive, chosen);
    if written.is_err() {
        // Not a byte more: a cut body is never confirmed.
        exec.abort();
    }
    // The end of stdin ends the upload's body.
    drop(stdin);
    let status = exec.finish();
    drop(exec);
    let failed = match (written, status) {
        (Ok(()), Ok(s)) if s.exit_code == Some(0) => None,
        (Err(Sent::Refused(e) | Sent::SourceChanged(e) | Sent::Fatal(e)), _) => Some(e),
        (_, Err(e)) => Some(SyncError::Transport(format!("the upload failed: {e}"))),
        (Err(Sent::Stream(e)), Ok(_)) => {
            Some(SyncError::Transport(format!("the upload failed: {e}")))
        }
        (Ok(()), Ok(s)) => Some(SyncError::Transport(format!(
            "the upload failed: {}",
            String::from_utf8_lossy(&s.stderr)
        ))),
    };
    if let Some(e) = failed {
        // The toolbox may have kept what arrived.
        toolbox::remove(&[upload], limits.timeout_ms);
        return Err(e);
    }
    let sep = toolbox::separator();
    let command = wrapper::inbound(
        upload,
        plan.program.len(),
        chosen,
        &sep,
        limits.max_stderr_bytes,
    )?;
    let ran = toolbox::run(&command, &sep, limits.timeout_ms, limits.max_stderr_bytes);
    if ran.is_err() {
        // The command may never have run, to unlink the upload.
        toolbox::remove(&[upload], limits.timeout_ms);
    }
    ran
}

/// The upload's bytes: the program, then (with an archive) the answer and
/// the archive, compressed after the answer when `chosen` says so.
fn write(
    exec: &Execution,
    stdin: &OutputStream,
    plan: &Plan<'_>,
    archive: &Archive<'_>,
    chosen: Option<Codec>,
) -> Result<(), Sent> {
    io::write_all(stdin, plan.program.as_bytes()).map_err(Sent::Stream)?;
    let Some(commit) = &plan.commit else {
        return io::flush(stdin).map_err(Sent::Stream);
    };
    let len = match chosen {
        Some(_) => 0,
        None => tar_write::archive_len(archive.len),
    };
    let answer = format!("{} {len}\n", script::choice_name(chosen));
    io::write_all(stdin, answer.as_bytes()).map_err(Sent::Stream)?;
    let fatal = |e: String| Sent::Fatal(SyncError::Transport(e));
    if let Some(c) = chosen {
        exec.compress_stdin(codec::to_wit(c)).map_err(fatal)?;
    }
    let mut out = ArchiveWriter::new(exec, stdin, plan.sources);
    for (i, p) in plan.members.iter().enumerate() {
        if !archive.skip.get(i).copied().unwrap_or(false) {
            out.push(&p)?;
        }
    }
    for p in archive.lists {
        out.push(p)?;
    }
    out.push(commit)?;
    let sent = out.finish()?;
    if sent != archive.len {
        return Err(fatal(format!(
            "the archive came to {sent} bytes, not the {} announced",
            archive.len
        )));
    }
    if chosen.is_some() {
        exec.finish_compressed_stdin().map_err(fatal)?;
        io::flush(stdin).map_err(Sent::Stream)?;
    }
    Ok(())
}
