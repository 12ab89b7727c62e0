//! Host -> sandbox over a streaming exec: the program starts first; the
//! host walks its sources while the program starts and reports, answers,
//! and sends the archive in the same exec.

use sandbox_sync_core::script::Codec;

use sandbox_sync_driver::bindings::sandbox_sync::provider::host_fs::GrantedDir;
use sandbox_sync_driver::bindings::sandbox_sync::provider::sandbox_exec::{Compression, Execution};
use sandbox_sync_driver::bindings::sandbox_sync::provider::types::{
    OperationResult, SyncError, SyncRequest,
};
use sandbox_sync_driver::bindings::wasi::io::streams::{InputStream, OutputStream};
use sandbox_sync_driver::codec::{self, AUTO_MIN_BYTES};
use sandbox_sync_driver::io;
use sandbox_sync_driver::report::noted;
use sandbox_sync_driver::scratch::cleanup_if_killed;

use super::archive::{send_archive, Archive};
use super::keep::Keeper;
use super::plan::{prepare, Plan, Walker};
use super::report::{read_report, read_status};
use super::{conclude, SendStopped};

/// Most members walked before the program's report is read (about 2 MiB
/// of plan). When its tar can take an archive of unknown length the rest is
/// walked while sending, so a plan never holds more; otherwise the whole
/// tree is walked first (its length goes first).
///
/// The walk also stops, at a step's end, once the report has begun to
/// arrive: a host whose walk is slower than the program's start (the Node
/// host: each entry is looked up through /proc/self/fd) then answers at
/// once, and the sandbox's tar extracts the first files while the host
/// walks the rest. The Rust host walks a small tree whole before the
/// report arrives.
const LOOKAHEAD: usize = 1 << 16;

/// Members walked between looks at whether the report has begun.
const WALK_STEP: usize = 256;

pub fn run(req: &SyncRequest, sources: &[&GrantedDir]) -> Result<Vec<OperationResult>, SyncError> {
    // Before any identity is read: what the host sends is named by
    // identities settled against this clock.
    let walked_at = io::now();
    let (mut plan, program) = prepare(req, sources, codec::incremental())?;
    let program = program.finish()?;
    plan.walked_at = walked_at;
    let started = sandbox_sync_driver::exec::start(
        program.len(),
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
    match send(&exec, &stdin, &stdout, &program, &mut plan, &mut early) {
        sent @ (Ok(_) | Err(SendStopped::Stream(_))) => {
            let mut results = std::mem::take(&mut plan.results);
            if let Ok(s) = &sent {
                Keeper::uncount(&s.kept, &plan.mapping_op, &mut results);
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
            let status = noted(exec.finish()).map_err(SyncError::Transport)?;
            drop(stdin);
            cleanup(&status);
            let stdin_failed = match &sent {
                Err(SendStopped::Stream(e)) => Some(e.to_string()),
                _ => None,
            };
            conclude(req, &statuses, &status, stdin_failed.as_deref())?;
            Ok(results)
        }
        Err(SendStopped::Refused(e)) => {
            // The walk failed before any archive byte: the program was
            // told so and stops (its trap removes its scratch); let it.
            drop(stdin);
            let _ = read_status(&stdout, early);
            drop(stdout);
            if let Ok(status) = noted(exec.finish()) {
                cleanup(&status);
            }
            Err(e)
        }
        Err(SendStopped::SourceChanged(e) | SendStopped::Fatal(e)) => {
            // The program never sees its commit marker, so it cannot apply
            // anything; stop it now (any transport) and sweep its scratch.
            exec.abort();
            drop(stdin);
            drop(stdout);
            if let Ok(status) = noted(exec.finish()) {
                cleanup(&status);
            }
            Err(e)
        }
    }
}

/// What [`send`] did.
struct Delivery {
    /// The codec the archive was compressed with.
    codec: Option<Codec>,
    /// Files kept in the sandbox instead of sent: (mapping, bytes).
    kept: Vec<(usize, u64)>,
}

/// Writes the program, then walks the directory sources while it starts.
/// With an archive to send, reads what the program reports (its caps,
/// what its targets hold; any status lines go to `early`), drops the files
/// the targets already hold, answers with the codec and the archive's
/// length, and sends the archive, walking the rest of the tree meanwhile
/// when the program's tar can take an archive of unknown length.
fn send(
    exec: &Execution,
    stdin: &OutputStream,
    stdout: &InputStream,
    program: &str,
    plan: &mut Plan<'_>,
    early: &mut Vec<u8>,
) -> Result<Delivery, SendStopped> {
    io::write_all(stdin, program.as_bytes()).map_err(SendStopped::Stream)?;
    io::flush(stdin).map_err(SendStopped::Stream)?;
    let mut walker = Walker::new(std::mem::take(&mut plan.walks));
    let delivered = deliver(exec, stdin, stdout, plan, &mut walker, early);
    // Whatever happened: the results count what was walked.
    walker.count_into(&mut plan.results);
    delivered
}

/// [`send`] past the program: walk (all of it, or the lookahead), read the
/// report, answer, send the archive (walking the rest when streaming).
fn deliver(
    exec: &Execution,
    stdin: &OutputStream,
    stdout: &InputStream,
    plan: &mut Plan<'_>,
    walker: &mut Walker<'_>,
    early: &mut Vec<u8>,
) -> Result<Delivery, SendStopped> {
    let Some(commit) = plan.commit.clone() else {
        return Ok(Delivery {
            codec: None,
            kept: Vec::new(),
        });
    };
    let sources = plan.sources;
    let refuse = |e: SyncError| {
        // Any answer but a codec stops the program, changing nothing.
        let _ = io::write_all(stdin, b"refused 0\n").and_then(|()| io::flush(stdin));
        SendStopped::Refused(e)
    };
    // While the program starts: the walk's first members, until its report
    // begins to arrive (see LOOKAHEAD).
    let mut done = false;
    let mut walked = 0;
    while !done && walked < LOOKAHEAD {
        done = walker.fill(&mut plan.members, WALK_STEP).map_err(refuse)?;
        walked += WALK_STEP;
        if stdout.subscribe().ready() {
            break;
        }
    }
    let (caps, listing) = read_report(stdout, early);
    let policy = codec::policy();
    // Without an end to stdin the sandbox's decompressor would never finish.
    let may_compress = !plan.offer.is_empty() && exec.stdin_ends();
    if may_compress && policy == Compression::Auto {
        // `auto` samples at least this much, where there is that much.
        while !done && plan.members.tally().archive_bytes < AUTO_MIN_BYTES {
            done = walker.fill(&mut plan.members, LOOKAHEAD).map_err(refuse)?;
        }
    }
    let worth_it = may_compress && codec::worth_it(policy, &plan.members, sources);
    let chosen = codec::choose(if worth_it { plan.offer } else { &[] }, &caps.codecs);
    let streaming = !done && (caps.streams || chosen.is_some());
    if !done && !streaming {
        walker.fill(&mut plan.members, usize::MAX).map_err(refuse)?;
    }
    let mut keeper = Keeper::new(
        &listing,
        sources,
        &plan.file_modes,
        plan.walked_at,
        caps.records,
    );
    let skip = keeper.skips(&plan.members);
    // Only a whole plan has a length; a streamed one ends at its marker.
    let promised = (!streaming).then(|| keeper.archive_len(plan.members_len()));
    let rest = walker.by_ref().map(|p| {
        // Past the first byte a failed walk is like a changed source: the
        // program never sees its commit token.
        p.map_err(SendStopped::Fatal)
    });
    let archive = Archive {
        members: &plan.members,
        skip: &skip,
        commit: &commit,
        promised,
    };
    send_archive(exec, stdin, sources, &archive, rest, &mut keeper, chosen)?;
    Ok(Delivery {
        codec: chosen,
        kept: keeper.counted,
    })
}
