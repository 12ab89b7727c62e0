//! Request and result shapes in the seed's camelCase JSON.

use serde::{Deserialize, Serialize};

use crate::bindings::types as wit;

/// What a mapping moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MappingKind {
    /// A single file, replaced atomically.
    File,
    /// A directory tree, destroy-then-replace.
    Directory,
}

/// `PluginSyncFileMapping`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FileMapping {
    /// Absolute source path.
    pub source_path: String,
    /// Absolute target path.
    pub target_path: String,
    /// File or directory.
    pub kind: MappingKind,
    /// POSIX mode to apply at the target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<u32>,
    /// Glob excludes for a directory mapping.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exclude: Option<Vec<String>>,
    /// Dereference symlinks (tar `-h`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub follow_symlinks: Option<bool>,
}

/// `PluginPostUploadCommand`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PostUploadCommand {
    /// Run verbatim with `sh -c`.
    pub command: String,
    /// Absolute sandbox cwd under the remote dir.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Per-command timeout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

/// `PluginSyncOperation`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SyncOperation {
    /// Opaque id.
    pub operation_id: String,
    /// Ordered mappings.
    pub files: Vec<FileMapping>,
    /// Commands run after the mappings (sync-in only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub post_upload_commands: Option<Vec<PostUploadCommand>>,
}

/// One entry of `PluginEnvironmentSyncResult.operations`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OperationResult {
    /// The operation's id.
    pub operation_id: String,
    /// Files (and symlinks) moved.
    pub files_transferred: u64,
    /// Bytes moved (file contents; archive bytes for directories).
    pub bytes_transferred: u64,
    /// Sync-out: symlinks left out because they leave their mapping, the
    /// first [`SkippedLinks::NAMED`] by sandbox path (absent: none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped_links: Vec<String>,
    /// How many symlinks were left out in all (absent: none).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub skipped_link_count: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl From<wit::OperationResult> for OperationResult {
    fn from(r: wit::OperationResult) -> Self {
        OperationResult {
            operation_id: r.operation_id,
            files_transferred: r.files_transferred,
            bytes_transferred: r.bytes_transferred,
            skipped_links: Vec::new(),
            skipped_link_count: 0,
        }
    }
}

/// The symlinks an operation's sync-out left out, as the component
/// reported them (`sync-report.links-skipped`), bounded whatever it sends.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SkippedLinks {
    /// The operation.
    pub operation_id: String,
    /// The first [`Self::NAMED`], as (sandbox path, target).
    pub links: Vec<(String, String)>,
    /// How many in all.
    pub total: u64,
}

impl SkippedLinks {
    /// Most links an operation names (the orchestrator's module logs as
    /// many, then a count).
    pub const NAMED: usize = 20;

    /// Adds them to their operation's result.
    pub fn apply(list: &[SkippedLinks], results: &mut [OperationResult]) {
        for s in list {
            if let Some(r) = results
                .iter_mut()
                .find(|r| r.operation_id == s.operation_id)
            {
                r.skipped_link_count = r.skipped_link_count.saturating_add(s.total);
                let room = Self::NAMED.saturating_sub(r.skipped_links.len());
                r.skipped_links
                    .extend(s.links.iter().take(room).map(|(path, _)| path.clone()));
            }
        }
    }
}

impl SyncOperation {
    pub(crate) fn to_wit(&self) -> wit::SyncOperation {
        wit::SyncOperation {
            operation_id: self.operation_id.clone(),
            files: self
                .files
                .iter()
                .map(|f| wit::FileMapping {
                    source_path: f.source_path.clone(),
                    target_path: f.target_path.clone(),
                    kind: match f.kind {
                        MappingKind::File => wit::MappingKind::File,
                        MappingKind::Directory => wit::MappingKind::Directory,
                    },
                    mode: f.mode,
                    exclude: f.exclude.clone().unwrap_or_default(),
                    follow_symlinks: f.follow_symlinks.unwrap_or(false),
                })
                .collect(),
            post_upload_commands: self
                .post_upload_commands
                .iter()
                .flatten()
                .map(|c| wit::PostUploadCommand {
                    command: c.command.clone(),
                    cwd: c.cwd.clone(),
                    timeout_ms: c.timeout_ms,
                })
                .collect(),
        }
    }
}
