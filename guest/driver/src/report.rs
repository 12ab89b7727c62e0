//! Features a sandbox program turned off for want of a tool: read off its
//! stderr (`<TAG> off <feature> <missing...>` lines, see
//! [`sandbox_sync_core::script::split_off`]), handed to the host's
//! `sync-report` for the call's result, and left out of the stderr that
//! errors quote.

use crate::bindings::sandbox_sync::provider::sandbox_exec::ExecStatus;
use crate::bindings::sandbox_sync::provider::sync_report;

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
