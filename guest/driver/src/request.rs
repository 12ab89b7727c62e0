//! A request's mappings, each with the index of its grant: the host grants
//! one directory per mapping, in request order, so a mapping's grant is
//! its position among all the request's mappings.

use crate::bindings::sandbox_sync::provider::types::{FileMapping, SyncOperation, SyncRequest};

/// One mapping of a request.
#[derive(Debug, Clone, Copy)]
pub struct Mapping<'a> {
    /// Its operation's index.
    pub op: usize,
    /// Its index in its operation.
    pub index: usize,
    /// Its index among all mappings: its grant's.
    pub grant: usize,
    /// The mapping itself.
    pub spec: &'a FileMapping,
}

/// Each operation with its index and its mappings.
pub fn operations(
    req: &SyncRequest,
) -> impl Iterator<Item = (usize, &SyncOperation, impl Iterator<Item = Mapping<'_>>)> {
    req.operations
        .iter()
        .enumerate()
        .scan(0usize, |first, (op, o)| {
            let start = *first;
            *first += o.files.len();
            let mappings = o
                .files
                .iter()
                .enumerate()
                .map(move |(index, spec)| Mapping {
                    op,
                    index,
                    grant: start + index,
                    spec,
                });
            Some((op, o, mappings))
        })
}

/// Every mapping of the request, in grant order.
pub fn mappings(req: &SyncRequest) -> impl Iterator<Item = Mapping<'_>> {
    operations(req).flat_map(|(_, _, m)| m)
}

/// How many mappings the request has (so how many grants it needs).
pub fn mapping_count(req: &SyncRequest) -> usize {
    req.operations.iter().map(|o| o.files.len()).sum()
}
