//! `sandbox-sync:provider/sync-report` for the component: the features
//! the sandbox turned off, kept for the call's result.

use crate::bindings::sync_report::Host;
use crate::provider::Degraded;
use crate::state::ShimState;

/// Most features one call reports, and most names of what each lacks,
/// of at most `MAX_NAME` bytes (any component may call this).
const MAX_DEGRADED: usize = 16;
const MAX_MISSING: usize = 8;
const MAX_NAME: usize = 64;

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
}
