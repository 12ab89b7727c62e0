//! The sync-out program (`outbound.sh`): one framed tar stream per
//! mapping on stdout.

use std::fmt::Write as _;

use super::*;

/// Builds the sync-out program: one framed tar stream per mapping on stdout.
#[derive(Debug, Clone)]
pub struct OutboundScript {
    root: String,
    timeout_ms: u64,
    scratch: String,
    body: String,
    /// Chooses and starts the transport codec, when one is offered.
    codec: Option<String>,
    /// The first mapping's archiving line: `auto` samples what it streams.
    first: Option<String>,
    /// Incremental: lists sources, then reads the host's keep lists.
    listing: String,
    answer: String,
    zip: bool,
}

impl OutboundScript {
    /// Starts a program for remote dir `root` (normalized) that stops
    /// itself shortly before `timeout_ms` (0: no deadline) and stages in
    /// `<root>/<scratch>` (a fresh `.paperclip-upload-*` name).
    pub fn new(root: &str, timeout_ms: u64, scratch: &str) -> Self {
        OutboundScript {
            root: root.to_owned(),
            timeout_ms,
            scratch: scratch.to_owned(),
            body: String::new(),
            codec: None,
            first: None,
            listing: String::new(),
            answer: String::new(),
            zip: false,
        }
    }

    /// Lets the program gzip a big listing (a [`Marker::Listing`] with
    /// `zipped`): for a slow link, on a stream (not in
    /// [`Self::report_program`]'s text).
    pub fn zip_listings(&mut self) {
        self.zip = true;
    }

    /// Lets directory mapping `k` (the index among all mappings, with
    /// source `source`) leave out files the host target already holds:
    /// before anything else (and before the codec's marker, so the host
    /// reads it while the program waits) the program frames the source's
    /// regular files as a [`Marker::Listing`]; once every listing is out it
    /// reads the host's answer for each, in order: a line with a length,
    /// then that many bytes of relative names, one a line, which its
    /// archive then leaves out (see [`Self::dir`]). `follow` is the
    /// mapping's: a tar without `-X` (BusyBox) lists nothing then. With
    /// `digest` (from, to: ctimes as the sandbox prints them), the listing
    /// also digests the files whose ctimes lie in that window (see
    /// [`crate::script::OutboundSink`]).
    ///
    /// # Errors
    /// When the source cannot be quoted (NUL).
    pub fn list_dir(
        &mut self,
        k: usize,
        source: &str,
        follow: bool,
        digest: Option<(&str, &str)>,
    ) -> Result<(), Error> {
        let _ = write!(
            self.listing,
            "_ss_olist {k} {} {}",
            sh_quote(source)?,
            u8::from(follow)
        );
        self.window(digest)?;
        let _ = writeln!(self.answer, "_ss_okeep {k}");
        Ok(())
    }

    /// Ends a listing call with its racy window, if any.
    fn window(&mut self, digest: Option<(&str, &str)>) -> Result<(), Error> {
        if let Some((from, to)) = digest {
            let _ = write!(self.listing, " {} {}", sh_quote(from)?, sh_quote(to)?);
        }
        self.listing.push('\n');
        Ok(())
    }

    /// [`Self::list_dir`] for file mapping `k`'s regular file `source`: its
    /// listing is one line, for `./f`, and a non-empty answer (naming `f`)
    /// makes the program send an empty archive for it (see [`Self::file`]).
    ///
    /// # Errors
    /// When the source cannot be quoted (NUL).
    pub fn list_file(
        &mut self,
        k: usize,
        source: &str,
        digest: Option<(&str, &str)>,
    ) -> Result<(), Error> {
        let _ = write!(self.listing, "_ss_olistf {k} {}", sh_quote(source)?);
        self.window(digest)?;
        let _ = writeln!(self.answer, "_ss_okeep {k}");
        Ok(())
    }

    /// Compresses the output with the first of `prefer` the sandbox can
    /// run: the program first prints a plain [`Marker::Codec`] naming it
    /// (or `none`), then everything else through it. With `sample`, gzip
    /// is used only if the first mapping's archive (as the host's answer
    /// left it: what will be sent) samples as compressible. With `probe`
    /// (bytes, a multiple of 64 KiB; the host answers on stdin), sampled
    /// gzip is also chosen by the link: where that archive passes 4 MiB,
    /// its first that many bytes go first as a [`Marker::Probe`] frame,
    /// which the host times and answers with the link's rate, and gzip
    /// stays only where the sandbox's gzip, timed on them, is faster.
    pub fn offer_compression(&mut self, prefer: &[Codec], sample: bool, probe: Option<u64>) {
        let mut s = String::from("_ss_pick");
        for c in prefer {
            let _ = write!(s, " {}", c.name());
        }
        s.push('\n');
        if let Some(first) = self.first.as_ref().filter(|_| sample) {
            if let Some(p) = probe {
                let _ = writeln!(s, "[ \"$_ss_codec\" != gzip ] || _ss_canprobe {p}");
            }
            // A subshell archives it once more into the sampler, which
            // stops reading after 64 MiB; its errors are the body's to
            // report. A probe's answer comes on stdin, which the sampler
            // reads as fd 6.
            let stdin = if probe.is_some() { " 6<&0" } else { "" };
            let _ = writeln!(
                s,
                "[ \"$_ss_codec\" != gzip ] || {{ ({first}) 2>/dev/null | _ss_worth; }}{stdin} || _ss_codec=none"
            );
        }
        s.push_str("_ss_mark \"codec $_ss_codec\"\n[ \"$_ss_codec\" = none ] || _ss_zstart \"$_ss_codec\"\n");
        self.codec = Some(s);
    }

    fn mark(&mut self, m: &Marker) {
        let _ = writeln!(self.body, "_ss_mark '{}'", m.words());
    }

    /// Streams the regular file `source` (snapshotted through a pinned fd),
    /// or an empty archive where the host's answer for `listed` (the index
    /// [`Self::list_file`] was given) keeps it.
    ///
    /// # Errors
    /// When the path cannot be quoted (NUL).
    pub fn file(
        &mut self,
        op: usize,
        map: usize,
        source: &str,
        listed: Option<usize>,
    ) -> Result<(), Error> {
        self.mark(&Marker::Mapping { op, map });
        let keep = listed.map(|k| k.to_string()).unwrap_or_default();
        let line = format!("_ss_kf={keep}; _ss_ofile {}", sh_quote(source)?);
        self.archive(line);
        Ok(())
    }

    /// Streams the directory `source` (entered through a pinned fd),
    /// leaving out what the host's answer for `listed` names (the index
    /// [`Self::list_dir`] was given).
    ///
    /// # Errors
    /// When a path or pattern cannot be quoted (NUL).
    pub fn dir(
        &mut self,
        op: usize,
        map: usize,
        source: &str,
        follow: bool,
        exclude: &[String],
        listed: Option<usize>,
    ) -> Result<(), Error> {
        self.mark(&Marker::Mapping { op, map });
        let keep = listed.map(|k| k.to_string()).unwrap_or_default();
        let line = format!(
            "_ss_kf={keep}; _ss_odir {}",
            dir_args(source, follow, exclude)?
        );
        self.archive(line);
        Ok(())
    }

    fn archive(&mut self, line: String) {
        let _ = writeln!(self.body, "{line}");
        self.first.get_or_insert(line);
    }

    /// Marks operation `op` complete.
    pub fn op_done(&mut self, op: usize) {
        self.mark(&Marker::OpDone(op));
    }

    /// Finishes the program.
    ///
    /// # Errors
    /// When the root cannot be quoted.
    pub fn finish(self) -> Result<String, Error> {
        self.finish_with(None)
    }

    /// The listings alone, as a program of its own, for a transport on
    /// which the host must answer before the program starts (a toolbox
    /// sandbox, whose commands take no stdin): the listings
    /// ([`Self::list_dir`], [`Self::list_file`]) as text, each between
    /// `<TAG> list <k> <probe>` and `<TAG> listed <k>` lines (see
    /// [`parse_outbound_report`](super::parse_outbound_report)), in a scratch dir
    /// `scratch` of its own, which it leaves, with the listings, to the
    /// program that reads the host's answer ([`Self::finish_answered`]).
    /// `None` when nothing is listed.
    ///
    /// # Errors
    /// When the root cannot be quoted or `scratch` is not a scratch name.
    pub fn report_program(&self, scratch: &str) -> Result<Option<String>, Error> {
        if self.listing.is_empty() {
            return Ok(None);
        }
        let mut s = preamble(&self.root, self.timeout_ms, scratch)?;
        s.push_str(OUTBOUND);
        s.push_str("_ss_report=1\n");
        if self.zip {
            // The report is the command's output, text.
            s.push_str("_ss_zlist=b64\n");
        }
        s.push_str(KEEP_DETECT);
        s.push_str(&self.listing);
        s.push_str("_ss_handon\n");
        Ok(Some(s))
    }

    /// [`Self::finish`] for a program whose listings a report program in
    /// scratch dir `report` printed ([`Self::report_program`]): it lists
    /// nothing, takes over the report's listings, and takes the host's
    /// `answer` (what it would have read from stdin: per listed mapping a
    /// length line and that many bytes of line ranges) from its own text.
    ///
    /// # Errors
    /// When the root or the answer cannot be quoted (NUL), or `report` is
    /// not a scratch name.
    pub fn finish_answered(self, answer: &[u8], report: &str) -> Result<String, Error> {
        check_scratch(report)?;
        self.finish_with(Some((answer, report)))
    }

    fn finish_with(mut self, answer: Option<(&[u8], &str)>) -> Result<String, Error> {
        self.mark(&Marker::End);
        let mut s = preamble(&self.root, self.timeout_ms, &self.scratch)?;
        s.push_str(OUTBOUND);
        if !self.listing.is_empty() {
            if let Some((_, report)) = answer {
                let _ = writeln!(s, "_ss_adopt {report}");
            }
            s.push_str(KEEP_DETECT);
            match answer {
                None => {
                    if self.zip {
                        s.push_str("_ss_zlist=1\n");
                    }
                    s.push_str(&self.listing);
                }
                Some((bytes, _)) => {
                    let text = std::str::from_utf8(bytes)
                        .map_err(|_| Error::invalid("a keep list that is not UTF-8"))?;
                    let _ = writeln!(
                        s,
                        "printf '%s' {} >\"$_ss_S/a\" || _ss_die \"$_ss_E_EXTRACT\" 'cannot write the keep lists'\n\
exec <\"$_ss_S/a\"",
                        sh_quote(text)?
                    );
                }
            }
            s.push_str(&self.answer);
        }
        if let Some(codec) = &self.codec {
            s.push_str(codec);
        }
        s.push_str(&self.body);
        if self.codec.is_some() {
            s.push_str("[ \"$_ss_codec\" = none ] || _ss_zend\n");
        }
        Ok(s)
    }
}

/// Whether this sandbox can leave kept files out of its archive, and the
/// filesystem's clock before any listing (`_ss_okeepable`, outbound.sh).
const KEEP_DETECT: &str = "_ss_okeepable\n";
