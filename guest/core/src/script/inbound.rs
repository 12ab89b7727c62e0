//! The sync-in program (`inbound.sh`): extract one archive into the
//! scratch dir, then apply operations in order.

use std::fmt::Write as _;

use super::*;

/// Builds the sync-in program: extract one archive into the scratch dir,
/// then apply operations in order.
#[derive(Debug)]
pub struct InboundScript {
    root: String,
    timeout_ms: u64,
    scratch: String,
    preflight: String,
    ops: String,
    compression: bool,
    /// Listings of targets a re-sync may keep files from, and the steps
    /// that keep them; whether what lands is recorded.
    listing: String,
    keeping: String,
    record: bool,
    zip: bool,
    /// The report program's scratch dir, whose listings this one takes
    /// over (a toolbox sandbox).
    adopt: Option<String>,
}

impl InboundScript {
    /// Starts a program for remote dir `root` (normalized) that stops
    /// itself shortly before `timeout_ms` (0: no deadline) and stages in
    /// `<root>/<scratch>` (a fresh `.paperclip-upload-*` name).
    pub fn new(root: &str, timeout_ms: u64, scratch: &str) -> Self {
        InboundScript {
            root: root.to_owned(),
            timeout_ms,
            scratch: scratch.to_owned(),
            preflight: String::new(),
            ops: String::new(),
            compression: false,
            listing: String::new(),
            keeping: String::new(),
            record: false,
            zip: false,
            adopt: None,
        }
    }

    /// Lets directory mapping `k` (staged as `d<k>`) keep files its target
    /// already holds (see [`crate::incremental`]): before extracting, the
    /// program lists the target's files still exactly as a sync-in landed
    /// them (`<TAG> list <k>`, then `<token> ./<path>` lines, then `<TAG>
    /// listed <k>`; see [`ListingParser`](super::ListingParser)). Where the
    /// archive then brings a member `k<k>` (the listed files the host
    /// keeps, as ascending `<first> <last>` ranges of the listing's lines) and anything is kept, the target is updated
    /// in place: what the new tree does not hold goes, the staged tree is
    /// linked in over what stays, and the kept files are not touched;
    /// without one nothing is kept and the staged tree replaces the target
    /// as ever. Once the operation landed, before its commands, the program
    /// records a fact for every file the token member `t<k>` (`<token>
    /// ./<path>` lines) names.
    ///
    /// # Errors
    /// When the target cannot be quoted (NUL).
    pub fn reuse_dir(&mut self, k: usize, target: &str) -> Result<(), Error> {
        // The remote dir itself holds provider scratch, which is not its.
        let root = if target == self.root { " root" } else { "" };
        let target = sh_quote(target)?;
        let _ = writeln!(self.listing, "_ss_list {k} {target}{root}");
        let _ = writeln!(self.keeping, "_ss_keep {k} {target}");
        Ok(())
    }

    /// Offers a compressed archive: before extracting, the program prints
    /// which codecs it can run (a `caps` line, see
    /// [`parse_caps`](super::parse_caps)) and reads the host's choice
    /// (`none`, `gzip` or `zstd`) as one line from stdin. A compressed
    /// archive is the rest of stdin, which the host then closes.
    pub fn offer_compression(&mut self) {
        self.compression = true;
    }

    /// Confines `target`'s deepest existing ancestor before any data is read,
    /// so an escaping target fails before the transfer, not after.
    ///
    /// # Errors
    /// When `target` cannot be quoted (NUL).
    pub fn preflight(&mut self, target: &str) -> Result<(), Error> {
        let _ = writeln!(self.preflight, "_ss_confine_ancestor {}", sh_quote(target)?);
        Ok(())
    }

    /// Promotes staged file `staged` onto `parent/base` with `mode`.
    ///
    /// # Errors
    /// When a path cannot be quoted (NUL).
    pub fn put_file(
        &mut self,
        staged: &str,
        parent: &str,
        base: &str,
        mode: Option<u32>,
    ) -> Result<(), Error> {
        self.put("_ss_file", staged, parent, base, mode)
    }

    /// Lets file mapping `k` keep the file its target `target` already
    /// holds: before extracting, the program reports `<TAG> file <k>
    /// <token>` when the target is a regular file inside the remote dir
    /// still exactly as a sync-in landed it (see
    /// [`ListingParser`](super::ListingParser)). Where the archive then
    /// brings an empty member `kf<k>` instead of `f<k>`, the program
    /// links the target, once checked, into the scratch dir as `f<k>`, and
    /// [`Self::put_file`] lands it as it lands a sent file (so an earlier
    /// mapping of the same sync that replaced the path through another
    /// name changes nothing); a sent file's token rides in `tf<k>`.
    ///
    /// # Errors
    /// When the target cannot be quoted (NUL).
    pub fn reuse_file(&mut self, k: usize, target: &str) -> Result<(), Error> {
        let target = sh_quote(target)?;
        let _ = writeln!(self.listing, "_ss_listf {k} {target}");
        let _ = writeln!(self.keeping, "_ss_keepf {k} {target}");
        Ok(())
    }

    /// Lets the program record what it lands for the next sync-in to keep
    /// (where the sandbox has the tools: `awk`, `find`, `stat`); it then
    /// says `record` in its caps, and the host sends tokens.
    pub fn record(&mut self) {
        self.record = true;
    }

    /// Lets the program gzip a big listing (`zlist`, see
    /// [`ListingParser`](super::ListingParser)): for a slow link, on a
    /// stream (a toolbox's text answers cannot carry it).
    pub fn zip_listings(&mut self) {
        self.zip = true;
    }

    /// Replaces directory `parent/base` with the staged tree `staged`.
    ///
    /// # Errors
    /// When a path cannot be quoted (NUL).
    pub fn put_dir(
        &mut self,
        staged: &str,
        parent: &str,
        base: &str,
        mode: Option<u32>,
    ) -> Result<(), Error> {
        self.put("_ss_dir", staged, parent, base, mode)
    }

    fn put(
        &mut self,
        function: &str,
        staged: &str,
        parent: &str,
        base: &str,
        mode: Option<u32>,
    ) -> Result<(), Error> {
        let _ = writeln!(
            self.ops,
            "{function} {} {} {} {}",
            sh_quote(staged)?,
            sh_quote(parent)?,
            sh_quote(base)?,
            sh_quote(&mode_arg(mode))?
        );
        Ok(())
    }

    /// Replaces the contents of the remote dir itself with the staged tree
    /// (the remote dir is often a mount point, and it holds the scratch dir).
    ///
    /// # Errors
    /// When a path cannot be quoted (NUL).
    pub fn put_root(&mut self, staged: &str, mode: Option<u32>) -> Result<(), Error> {
        let _ = writeln!(
            self.ops,
            "_ss_dir_root {} {}",
            sh_quote(staged)?,
            sh_quote(&mode_arg(mode))?
        );
        Ok(())
    }

    /// Runs the staged command `staged` (operation `op`, index `k`) in `cwd`.
    ///
    /// # Errors
    /// When a path cannot be quoted (NUL).
    pub fn command(
        &mut self,
        op: usize,
        k: usize,
        staged: &str,
        cwd: &str,
        timeout_ms: Option<u64>,
    ) -> Result<(), Error> {
        let timeout = timeout_ms.map(seconds).unwrap_or_default();
        // What the operation landed is recorded before any command runs.
        self.ops.push_str("_ss_recop\n");
        let _ = writeln!(
            self.ops,
            "_ss_cmd {op} {k} {} {} {}",
            sh_quote(staged)?,
            sh_quote(cwd)?,
            sh_quote(&timeout)?
        );
        Ok(())
    }

    /// Reports operation `op` as complete.
    pub fn op_done(&mut self, op: usize) {
        self.ops.push_str("_ss_recop\n");
        let _ = writeln!(self.ops, "printf '%s op %s\\n' \"$_ss_TAG\" {op}");
    }

    /// Finishes the program. With an `archive` to extract it first reports
    /// (its listings and codecs, see [`InboundScript::reuse_dir`] and
    /// [`InboundScript::offer_compression`]), then reads the host's answer
    /// line, `<codec> <archive length>` (codec `none`, `gzip` or `zstd`;
    /// anything else makes it stop, changing nothing; the length only
    /// bounds a plain archive for a tar that cannot stream), extracts the
    /// archive, and refuses to apply anything unless the member `commit`
    /// holds `token`.
    ///
    /// The host plans while the program starts and reports: nothing in the
    /// program depends on what the host's walk finds.
    ///
    /// A plain archive's length is whole tar records
    /// ([`tar_write::archive_len`](crate::tar_write::archive_len)): GNU tar
    /// then reads exactly the archive by itself (it reads whole records and
    /// stops at the end marker), saving the `head -c` hop that copies every
    /// byte once more; other tars are bounded by `head -c`.
    ///
    /// # Errors
    /// When the root or token cannot be quoted.
    pub fn finish(self, archive: bool, token: &str) -> Result<String, Error> {
        self.finish_with(archive, token, true)
    }

    /// The report alone, as a program of its own, for a transport on which
    /// the host must have the report before it starts the program (a
    /// toolbox sandbox, whose commands take no stdin): the preflights, the
    /// listings (see [`InboundScript::reuse_dir`]), then the `caps` line.
    /// It changes nothing but its own scratch dir `scratch` (a fresh name),
    /// which it leaves behind holding its listings for the program that
    /// follows ([`InboundScript::finish_reported`]), or removes when it
    /// fails. `None` when nothing is listed.
    ///
    /// # Errors
    /// When the root cannot be quoted or `scratch` is not a scratch name.
    pub fn report_program(&self, scratch: &str) -> Result<Option<String>, Error> {
        if self.listing.is_empty() {
            return Ok(None);
        }
        let mut s = preamble(&self.root, self.timeout_ms, scratch)?;
        s.push_str(INBOUND);
        s.push_str(&self.preflight);
        if self.record {
            s.push_str("_ss_recordable\n");
        }
        if self.zip {
            // The report is the command's output, text.
            s.push_str("_ss_zlist=b64\n");
        }
        s.push_str(&self.listing);
        s.push_str("_ss_reported\n");
        Ok(Some(s))
    }

    /// [`InboundScript::finish`] for a program whose report ran before it
    /// ([`InboundScript::report_program`] with scratch dir `report`): it
    /// lists nothing itself, takes over the report's listings, and keeps
    /// what the archive's members say as ever.
    ///
    /// # Errors
    /// As [`InboundScript::finish`], or when `report` is not a scratch name.
    pub fn finish_reported(
        mut self,
        archive: bool,
        token: &str,
        report: &str,
    ) -> Result<String, Error> {
        check_scratch(report)?;
        self.adopt = Some(report.to_owned());
        self.finish_with(archive, token, false)
    }

    fn finish_with(self, archive: bool, token: &str, lists: bool) -> Result<String, Error> {
        let mut s = preamble(&self.root, self.timeout_ms, &self.scratch)?;
        s.push_str(INBOUND);
        if let Some(report) = &self.adopt {
            let _ = writeln!(s, "_ss_adopt {report}");
        }
        s.push_str(&self.preflight);
        if self.record {
            s.push_str("_ss_recordable\n");
        }
        if self.zip {
            s.push_str("_ss_zlist=1\n");
        }
        if archive {
            if lists {
                s.push_str(&self.listing);
            }
            let _ = writeln!(
                s,
                "_ss_extract {} {}\n_ss_commit {}",
                u8::from(self.compression),
                crate::tar_write::RECORD / 512,
                sh_quote(token)?
            );
            s.push_str(&self.keeping);
        }
        s.push_str(&self.ops);
        if archive {
            s.push_str("_ss_savestate\n");
        }
        Ok(s)
    }
}
