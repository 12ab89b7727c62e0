//! What a call reports beside its results, through the host's
//! `sync-report`: features a sandbox program turned off for want of a tool
//! (read off its stderr, `<TAG> off <feature> <missing...>` lines, see
//! [`sandbox_sync_core::script::split_off`], and left out of the stderr
//! that errors quote), and the symlinks a sync-out left out.

use crate::bindings::sandbox_sync::provider::sandbox_exec::ExecStatus;
use crate::bindings::sandbox_sync::provider::sync_report;
use crate::bindings::sandbox_sync::provider::types::FileMapping;
use crate::extract::Skipped;

/// Reports what `status`'s program turned off, and removes those lines.
pub fn take_degraded(status: &mut ExecStatus) {
    let (offs, rest) = sandbox_sync_core::script::split_off(&status.stderr);
    if offs.is_empty() {
        return;
    }
    for off in &offs {
        sync_report::degraded(&off.feature, &off.missing);
    }
    status.stderr = rest;
}

/// [`take_degraded`] on a finished exec's status.
pub fn noted(status: Result<ExecStatus, String>) -> Result<ExecStatus, String> {
    status.map(|mut s| {
        take_degraded(&mut s);
        s
    })
}

/// Reports the links mapping `m` of operation `op` left out, if any.
pub fn links_skipped(op: &str, m: &FileMapping, skipped: &Skipped) {
    if skipped.total > 0 {
        sync_report::links_skipped(op, &m.source_path, &skipped.links, skipped.total);
    }
}
