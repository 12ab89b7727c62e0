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
//! (what the targets hold, which codecs the sandbox has), started as soon
//! as the walk has found that much and run while the walk goes on, and
//! the archive leaves out what they hold: three calls. Otherwise nothing
//! is kept, and the codec is chosen blind: gzip, which nearly every image
//! has. A sandbox without it exits `NO_CODEC` before reading anything, and
//! the call is made once more, plain.

use sandbox_sync_core::script::{exit as code, toolbox as wrapper, Caps, Codec, Listing};

use sandbox_sync_driver::bindings::sandbox_sync::provider::host_fs::GrantedDir;
use sandbox_sync_driver::bindings::sandbox_sync::provider::types::{
    OperationResult, SyncError, SyncRequest,
};
use sandbox_sync_driver::codec;
use sandbox_sync_driver::errors::exit;
use sandbox_sync_driver::io;

use super::archive::{send_archive, Archive};
use super::keep::Keeper;
use super::plan::{prepare, Plan, Walker};
use super::report::{parse_report, parse_statuses};
use super::{conclude, SendStopped};
use crate::toolbox::{self, Ran, UploadStopped};

/// Below this many archive bytes a re-sync sends everything rather than
/// pay a round trip to learn what the targets hold (1 MiB takes 0.2 s at
/// 5 MB/s, about what that round trip and its listing cost).
pub const REPORT_MIN_BYTES: u64 = 1 << 20;

/// Members walked between two looks at whether the report pays yet.
const WALK_STEP: usize = 32;

pub fn run(req: &SyncRequest, sources: &[&GrantedDir]) -> Result<Vec<OperationResult>, SyncError> {
    let walked_at = io::now();
    let (mut plan, unfinished) = prepare(req, sources, codec::incremental())?;
    plan.walked_at = walked_at;
    // The report's listings, which the program takes over.
    let report_scratch = sandbox_sync_driver::scratch::fresh();
    let report_program = unfinished.report_program(&report_scratch)?;
    let program = match &report_program {
        Some(_) => unfinished.finish_reported(&report_scratch)?,
        None => unfinished.finish()?,
    };
    // The whole archive is planned first: its length goes in the answer.
    // The report starts as soon as the walk has found enough to send for
    // it to pay, and runs while the rest is walked.
    let may_report = report_program.as_deref().filter(|_| plan.commit.is_some());
    let handed = format!("{}/{report_scratch}", plan.root.trim_end_matches('/'));
    let mut walker = Walker::new(std::mem::take(&mut plan.walks));
    let mut started = None;
    let walked = loop {
        let done = match walker.fill(&mut plan.members, WALK_STEP) {
            Ok(done) => done,
            Err(e) => break Err(e),
        };
        if let Some(p) = may_report.filter(|_| started.is_none()) {
            if plan.members_len() >= REPORT_MIN_BYTES {
                started = Some(toolbox::start_program(
                    p,
                    req.limits.timeout_ms,
                    req.limits.max_stderr_bytes,
                )?);
            }
        }
        if done {
            break Ok(());
        }
    };
    walker.count_into(&mut plan.results);
    let reported = started.map(|s| {
        let reported = s.wait().map(|ran| read_report(&ran));
        if walked.is_err() || reported.is_err() {
            toolbox::remove(&[handed.as_str()], req.limits.timeout_ms);
        }
        reported
    });
    walked?;
    // The report's listings, removed wherever the program may not have run.
    let handed: Vec<&str> = reported
        .as_ref()
        .map(|_| handed.as_str())
        .into_iter()
        .collect();
    let (caps, listing) = match reported {
        Some(r) => r?,
        None => (None, Listing::default()),
    };
    // Without a report the sandbox's tools are unknown: the tokens go
    // anyway, and a sandbox that cannot record ignores them.
    let records = caps.as_ref().is_none_or(|c| c.records);
    let mut keeper = Keeper::new(&listing, sources, &plan.file_modes, plan.walked_at, records);
    let skip = keeper.skips(&plan.members);
    let len = keeper.archive_len(plan.members_len());
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
        let archive = plan.commit.as_ref().map(|commit| Archive {
            members: &plan.members,
            skip: &skip,
            commit,
            promised: Some(len),
        });
        let this = attempt(
            req,
            &plan,
            &program,
            archive.as_ref(),
            &mut keeper,
            &upload,
            chosen,
        )
        .inspect_err(|_| toolbox::remove(&handed, req.limits.timeout_ms))?;
        let lacks_codec = chosen.is_some() && this.status.exit_code == Some(code::NO_CODEC);
        ran = Some(this);
        if !lacks_codec {
            break;
        }
    }
    let Some(ran) = ran else {
        return Err(SyncError::Transport("no attempt was made".into()));
    };
    if exit(&ran.status).was_killed() {
        // Killed (a deadline): its cleanup trap never ran.
        toolbox::cleanup(
            &plan.root,
            &plan.scratch,
            &[&[upload.as_str()], handed.as_slice()].concat(),
            req.limits.timeout_ms,
        );
    }
    conclude(req, &parse_statuses(&ran.stdout), &ran.status, None)?;
    let mut results = std::mem::take(&mut plan.results);
    Keeper::uncount(&keeper.counted, &plan.mapping_op, &mut results);
    Ok(results)
}

/// What the report `ran` says: what the targets hold and which codecs
/// the sandbox has. A report that failed (a remote dir that does not exist
/// yet, say) means nothing is known, and the program itself will say what
/// is wrong.
fn read_report(ran: &Ran) -> (Option<Caps>, Listing) {
    let reported = exit(&ran.status)
        .succeeded()
        .then(|| parse_report(&ran.stdout))
        .flatten();
    match reported {
        Some((caps, listing)) => (Some(caps), listing),
        None => (None, Listing::default()),
    }
}

/// One upload (the program, then the answer and `archive`, compressed with
/// `chosen`) and one command.
fn attempt(
    req: &SyncRequest,
    plan: &Plan<'_>,
    program: &str,
    archive: Option<&Archive<'_>>,
    keeper: &mut Keeper<'_>,
    upload: &str,
    chosen: Option<Codec>,
) -> Result<Ran, SyncError> {
    let limits = &req.limits;
    toolbox::upload(
        upload,
        "the upload",
        limits.timeout_ms,
        limits.max_stderr_bytes,
        |exec, stdin| {
            let sent = io::write_all(stdin, program.as_bytes())
                .map_err(SendStopped::Stream)
                .and_then(|()| match archive {
                    Some(archive) => send_archive(
                        exec,
                        stdin,
                        plan.sources,
                        archive,
                        std::iter::empty(),
                        keeper,
                        chosen,
                    ),
                    None => io::flush(stdin).map_err(SendStopped::Stream),
                });
            sent.map_err(|e| match e {
                SendStopped::Refused(e) | SendStopped::SourceChanged(e) | SendStopped::Fatal(e) => {
                    UploadStopped::Own(e)
                }
                SendStopped::Stream(e) => UploadStopped::Stream(e.to_string()),
            })
        },
    )?;
    let sep = toolbox::separator();
    let command = wrapper::inbound(upload, program.len(), chosen, &sep, limits.max_stderr_bytes)?;
    let ran = toolbox::run(&command, &sep, limits.timeout_ms, limits.max_stderr_bytes);
    if ran.is_err() {
        // The command may never have run, to unlink the upload.
        toolbox::remove(&[upload], limits.timeout_ms);
    }
    ran
}
