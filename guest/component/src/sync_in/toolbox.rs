//! Host -> a toolbox sandbox (Daytona): two calls, whatever the number of
//! operations. One upload streams the program, the host's answer and the
//! archive into one scratch file (headers from the guest, contents spliced
//! host-side, as on a streaming exec); one command opens that file as the
//! program's stdin, unlinks it, and runs the program, which extracts,
//! applies modes, promotes and runs the post-upload commands as it does
//! anywhere.
//!
//! The sandbox cannot report before the host answers, so the answer is
//! decided without it: nothing is kept (every file is sent), and a
//! compressed archive uses gzip, which nearly every image has (zstd only
//! when asked for). A sandbox without the decompressor exits `NO_CODEC`
//! before reading anything, and the call is made once more with the next
//! choice (gzip after zstd, then plain): two more calls, on such a
//! sandbox only.

use sandbox_sync_core::script::{self, exit as code, toolbox as wrapper, Codec};
use sandbox_sync_core::tar_write;

use sandbox_sync_driver::bindings::sandbox_sync::provider::host_fs::GrantedDir;
use sandbox_sync_driver::bindings::sandbox_sync::provider::sandbox_exec::{Compression, Execution};
use sandbox_sync_driver::bindings::sandbox_sync::provider::types::{
    OperationResult, SyncError, SyncRequest,
};
use sandbox_sync_driver::bindings::wasi::io::streams::OutputStream;
use sandbox_sync_driver::codec;
use sandbox_sync_driver::io;

use super::archive::ArchiveWriter;
use super::report::parse_statuses;
use super::{conclude, prepare, Plan, Sent, Walker};
use crate::toolbox::{self, Ran};

pub fn run(req: &SyncRequest, sources: &[&GrantedDir]) -> Result<Vec<OperationResult>, SyncError> {
    let mut plan = prepare(req, sources, false)?;
    // The whole archive is planned first: its length goes in the answer.
    let mut walker = Walker::new(std::mem::take(&mut plan.walks));
    let walked = walker.fill(&mut plan.members, usize::MAX);
    walker.count_into(&mut plan.results);
    walked?;
    let policy = codec::policy();
    let compress = plan.commit.is_some()
        && !plan.offer.is_empty()
        && codec::worth_it(policy, &plan.members, sources);
    // What to try, in order: a sandbox without the decompressor exits
    // NO_CODEC before it reads a byte, and the next is tried.
    let tries: &[Option<Codec>] = match (compress, policy) {
        (false, _) => &[None],
        (true, Compression::Zstd) => &[Some(Codec::Zstd), Some(Codec::Gzip), None],
        (true, _) => &[Some(Codec::Gzip), None],
    };
    let upload = format!("{}/{}.in", plan.root.trim_end_matches('/'), plan.scratch);
    let mut ran = None;
    for &chosen in tries {
        let this = attempt(req, &plan, &upload, chosen)?;
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
    Ok(std::mem::take(&mut plan.results))
}

/// One upload and one command, with `chosen` compressing the archive.
fn attempt(
    req: &SyncRequest,
    plan: &Plan<'_>,
    upload: &str,
    chosen: Option<Codec>,
) -> Result<Ran, SyncError> {
    let limits = &req.limits;
    let exec = toolbox::upload(upload, limits.timeout_ms, limits.max_stderr_bytes)?;
    let stdin = exec.stdin().map_err(SyncError::Transport)?;
    let written = write(&exec, &stdin, plan, chosen);
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
    chosen: Option<Codec>,
) -> Result<(), Sent> {
    io::write_all(stdin, plan.program.as_bytes()).map_err(Sent::Stream)?;
    let Some(commit) = &plan.commit else {
        return io::flush(stdin).map_err(Sent::Stream);
    };
    let len = match chosen {
        Some(_) => 0,
        None => tar_write::archive_len(plan.members_len()),
    };
    let answer = format!("{} {len}\n", script::choice_name(chosen));
    io::write_all(stdin, answer.as_bytes()).map_err(Sent::Stream)?;
    let fatal = |e: String| Sent::Fatal(SyncError::Transport(e));
    if let Some(c) = chosen {
        exec.compress_stdin(codec::to_wit(c)).map_err(fatal)?;
    }
    let mut out = ArchiveWriter::new(exec, stdin, plan.sources);
    for p in plan.members.iter() {
        out.push(&p)?;
    }
    out.push(commit)?;
    out.finish()?;
    if chosen.is_some() {
        exec.finish_compressed_stdin().map_err(fatal)?;
        io::flush(stdin).map_err(Sent::Stream)?;
    }
    Ok(())
}
