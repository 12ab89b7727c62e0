//! `sandbox-sync:provider/sync-state` for the component: the call's
//! [`RecordStore`](crate::records::RecordStore), if it has one.

use crate::bindings::sync_state::Host;
use crate::records::MAX_RECORD_BYTES;
use crate::state::ShimState;

impl Host for ShimState {
    async fn load(&mut self, key: String) -> wasmtime::Result<Option<Vec<u8>>> {
        Ok(self.records.as_ref().and_then(|r| r.load(&key)))
    }

    async fn store(&mut self, key: String, value: Vec<u8>) -> wasmtime::Result<Result<(), String>> {
        Ok(match &self.records {
            Some(r) => r.store(&key, &value),
            None => Err("this host keeps no records".into()),
        })
    }

    async fn max_record_bytes(&mut self) -> wasmtime::Result<u64> {
        Ok(if self.records.is_some() {
            MAX_RECORD_BYTES
        } else {
            0
        })
    }
}
