//! `sandbox-sync:provider/sync-report` for the component: the features
//! the sandbox turned off and the symlinks a sync-out left out, kept for
//! the call's result.

use crate::bindings::sync_report::{Host, SkippedLink};
use crate::provider::Degraded;
use crate::request::SkippedLinks;
use crate::state::ShimState;

/// Most features one call reports, and most names of what each lacks,
/// of at most `MAX_NAME` bytes (any component may call this).
const MAX_DEGRADED: usize = 16;
const MAX_MISSING: usize = 8;
const MAX_NAME: usize = 64;
/// Most operations whose skipped links one call keeps, and the longest
/// sandbox path it names (a name and its mapping's source, each capped
/// at 4096 bytes).
const MAX_SKIPPING_OPS: usize = 4096;
const MAX_PATH: usize = 2 * 4096 + 1;

impl Host for ShimState {
    async fn degraded(&mut self, feature: String, missing: Vec<String>) -> wasmtime::Result<()> {
        if feature.len() <= MAX_NAME
            && self.degraded.len() < MAX_DEGRADED
            && !self.degraded.iter().any(|d| d.feature == feature)
        {
            let missing = missing
                .into_iter()
                .filter(|m| m.len() <= MAX_NAME)
                .take(MAX_MISSING)
                .collect::<Vec<_>>();
            tracing::info!(feature, ?missing, "the sandbox turned a feature off");
            self.degraded.push(Degraded { feature, missing });
        }
        Ok(())
    }

    async fn links_skipped(
        &mut self,
        operation_id: String,
        source_path: String,
        links: Vec<SkippedLink>,
        total: u64,
    ) -> wasmtime::Result<()> {
        let at = match self
            .skipped
            .iter()
            .position(|s| s.operation_id == operation_id)
        {
            Some(at) => at,
            None if self.skipped.len() < MAX_SKIPPING_OPS => {
                self.skipped.push(SkippedLinks {
                    operation_id,
                    ..SkippedLinks::default()
                });
                self.skipped.len() - 1
            }
            None => return Ok(()),
        };
        let entry = &mut self.skipped[at];
        let top = source_path.trim_end_matches('/');
        let named = links.len() as u64;
        for SkippedLink { path, target } in links {
            let full = format!("{top}/{path}");
            if entry.links.len() < SkippedLinks::NAMED
                && full.len() <= MAX_PATH
                && target.len() <= MAX_PATH
            {
                entry.links.push((full, target));
            }
        }
        // A component counts at least what it names.
        entry.total = entry.total.saturating_add(total.max(named));
        tracing::warn!(
            operation = entry.operation_id,
            source = top,
            total,
            "symlinks that leave their mapping were left out"
        );
        Ok(())
    }
}
