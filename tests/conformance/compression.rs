//! Negotiated transport compression: the same trees land byte for byte
//! whichever codec the sandbox has, `auto` leaves incompressible data and
//! local links alone, and a compressed stream from a compromised sandbox
//! is held to the same guards as a plain one (a bomb stops at the output
//! guard, bytes after the stream or a lying codec frame fail loud).

use std::io::Write as _;
use std::os::unix::fs::symlink;
use std::sync::Arc;

use sandbox_sync_host::exec::scripted::ScriptedBackend;
use sandbox_sync_host::provider::{Compress, CompressionReport};
use sandbox_sync_tests::hostile::{self, mark};
use sandbox_sync_tests::*;

fn text(len: usize) -> Vec<u8> {
    let line = b"2026-12-01T05:00:00Z INFO agent step=42 status=ok\n";
    (0..len).map(|i| line[i % line.len()]).collect()
}

/// A tree with text, incompressible bytes, a link, an empty dir and modes.
fn tree(sb: &Sandbox) -> std::path::PathBuf {
    sb.write_host("ws/logs/run.log", &text(3 << 20));
    sb.write_host("ws/blob.bin", &incompressible(300_000));
    sb.write_host("ws/small.txt", b"small\n");
    std::fs::create_dir_all(sb.host.join("ws/empty")).unwrap();
    symlink("logs/run.log", sb.host.join("ws/latest")).unwrap();
    let tool = sb.write_host("ws/bin/tool", b"#!/bin/sh\necho hi\n");
    std::fs::set_permissions(&tool, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    sb.host.join("ws")
}

/// The codec the sandbox should end up with: what was asked for if it has
/// it, else the other one (BusyBox has only gzip).
fn expected_codec(u: Env, asked: Compress) -> &'static str {
    match (u.userland, asked) {
        (Userland::BusyBox, _) | (_, Compress::Gzip) => "gzip",
        _ => "zstd",
    }
}

fn assert_compressed(report: &[CompressionReport], stream: &str, codec: &str) {
    // The last: on a toolbox sandbox a first choice the sandbox lacked
    // was sent, and then the next.
    let r = report
        .iter()
        .rfind(|r| r.stream == stream)
        .unwrap_or_else(|| panic!("no compressed {stream}: {report:?}"));
    assert_eq!(r.codec, codec, "{report:?}");
    assert!(r.wire_bytes * 2 < r.plain_bytes, "{report:?}");
}

fn round_trip(u: Env, asked: Compress) {
    if !compresses() {
        return;
    }
    let sb = Sandbox::new(u);
    let src = tree(&sb);
    let mut opts = sb.options();
    opts.compress = asked;
    let out = sb
        .sync_in_with(&[op("in", vec![dir(&src, sb.remote("ws"))])], &opts)
        .expect("sync-in");
    // On a toolbox sandbox a sync this big first asks what the target
    // holds, and learns the codecs too; without incremental the upload is
    // compressed blind, with gzip.
    let blind = u.transport == Transport::Daytona && !opts.incremental;
    assert_execs(out.execs, big_sync_in_execs(u, opts.incremental));
    let codec = expected_codec(u, asked);
    if u.transport == Transport::Kube(k8s_server::Protocol::V4) {
        // v4 cannot end stdin, which the sandbox's decompressor needs.
        assert!(out.compression.is_empty(), "{:?}", out.compression);
    } else if blind {
        assert_compressed(&out.compression, "stdin", "gzip");
    } else {
        assert_compressed(&out.compression, "stdin", codec);
    }
    assert_same_tree(&src, &sb.remote_on_host("ws"));

    let back = sb.host.join("back");
    let out = sb
        .sync_out_with(&[op("out", vec![dir_out(sb.remote("ws"), &back)])], &opts)
        .expect("sync-out");
    assert_compressed(&out.compression, "stdout", codec);
    assert_same_tree(&src, &back);
    assert!(sb.scratch_left().is_empty(), "{:?}", sb.scratch_left());
}

fn gzip_round_trip(u: Env) {
    round_trip(u, Compress::Gzip);
}

fn zstd_round_trip(u: Env) {
    round_trip(u, Compress::Zstd);
}

/// `auto`: text over a remote link is compressed, random data is not (the
/// component samples it; the sandbox samples before it settles for gzip).
fn auto_samples(u: Env) {
    if !compresses() {
        return;
    }
    let sb = Sandbox::new(u);
    let text_src = sb.write_host("t/app.log", &text(2 << 20));
    let random_src = sb.write_host("r/data.bin", &incompressible(2 << 20));
    let mut opts = sb.options();
    opts.compress = Compress::Auto;
    let local = u.transport == Transport::Local;
    let v4 = u.transport == Transport::Kube(k8s_server::Protocol::V4);
    let out = sb
        .sync_in_with(
            &[op("t", vec![file(&text_src, sb.remote("app.log"))])],
            &opts,
        )
        .expect("text in");
    if local || v4 {
        assert!(out.compression.is_empty(), "{:?}", out.compression);
    } else if u.transport == Transport::Daytona && !opts.incremental {
        // Without asking the sandbox first (incremental off), the host
        // compresses blind: gzip, which nearly every image has.
        assert_compressed(&out.compression, "stdin", "gzip");
    } else {
        assert_compressed(&out.compression, "stdin", expected_codec(u, Compress::Auto));
    }
    let out = sb
        .sync_in_with(
            &[op("r", vec![file(&random_src, sb.remote("data.bin"))])],
            &opts,
        )
        .expect("random in");
    assert!(out.compression.is_empty(), "{:?}", out.compression);
    assert_eq!(
        std::fs::read(sb.remote_on_host("data.bin")).unwrap(),
        std::fs::read(&random_src).unwrap()
    );
    // Out: BusyBox (gzip only) samples the random source and sends it plain.
    let back = sb.host.join("back.bin");
    let out = sb
        .sync_out_with(
            &[op("o", vec![file_out(sb.remote("data.bin"), &back)])],
            &opts,
        )
        .expect("random out");
    if local || u.userland == Userland::BusyBox {
        assert!(out.compression.is_empty(), "{:?}", out.compression);
    }
    assert_eq!(
        std::fs::read(&back).unwrap(),
        std::fs::read(&random_src).unwrap()
    );
    // Binaries first, text after: the sample spans the archive, so the
    // bulk decides (a first-MiB sample sent all of it plain).
    let mut mixed = incompressible(2 << 20);
    mixed.extend(text(8 << 20));
    let mixed_src = sb.write_host("m/mixed.bin", &mixed);
    sb.sync_in_with(
        &[op("m", vec![file(&mixed_src, sb.remote("mixed.bin"))])],
        &opts,
    )
    .expect("mixed in");
    let back = sb.host.join("back-mixed.bin");
    let out = sb
        .sync_out_with(
            &[op("o", vec![file_out(sb.remote("mixed.bin"), &back)])],
            &opts,
        )
        .expect("mixed out");
    if local {
        assert!(out.compression.is_empty(), "{:?}", out.compression);
    } else if u.userland == Userland::BusyBox && u.transport != Transport::Daytona {
        // gzip alone, over an exec: the link's measured speed decides
        // (the tests below pace it); the bytes land either way.
    } else {
        assert_compressed(
            &out.compression,
            "stdout",
            expected_codec(u, Compress::Auto),
        );
    }
    assert_eq!(std::fs::read(&back).unwrap(), mixed);
}

for_each_userland!(gzip_round_trip, zstd_round_trip, auto_samples);

/// The probe of the link `auto` sends before a sync-out's gzip
/// (`LINK_PROBE` in the component).
const PROBE: usize = 512 << 10;

/// A BusyBox pod (gzip, no zstd) over kube, its stdout paced to `rate`.
fn paced_busybox(protocol: k8s_server::Protocol, rate: u64) -> Sandbox {
    let sb = Sandbox::new(Env {
        userland: Userland::BusyBox,
        transport: Transport::Kube(protocol),
    });
    sb.server
        .as_ref()
        .expect("a kube sandbox")
        .set_faults(k8s_server::Faults {
            stdout_bytes_per_sec: Some(rate),
            ..k8s_server::Faults::default()
        });
    sb
}

/// `auto` with only gzip in the pod, over a link (2 MB/s) slower than the
/// pod's gzip: the probe finds it so, and the stream is gzipped; a first
/// archive under 4 MiB is gzipped as before, unprobed. The bytes land
/// exactly, over both protocols.
#[test]
fn a_slow_link_keeps_gzip() {
    if !compresses() {
        return;
    }
    for protocol in [k8s_server::Protocol::V4, k8s_server::Protocol::V5] {
        let sb = paced_busybox(protocol, 2_000_000);
        let mut opts = sb.options();
        opts.compress = Compress::Auto;
        for len in [300_000, 6 << 20] {
            let data = text(len);
            sb.write_remote("log.txt", &data);
            let back = sb.host.join(format!("back-{len}.txt"));
            let out = sb
                .sync_out_with(
                    &[op("o", vec![file_out(sb.remote("log.txt"), &back)])],
                    &opts,
                )
                .unwrap_or_else(|e| panic!("{protocol:?} {len}: {}", e.error));
            assert_compressed(&out.compression, "stdout", "gzip");
            assert!(out.degraded.is_empty(), "{:?}", out.degraded);
            assert_eq!(std::fs::read(&back).unwrap(), data, "{protocol:?} {len}");
        }
    }
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

/// A compromised sandbox's sync-out output, played back as if compressed
/// with `words` naming the codec.
fn scripted_out(stdout: Vec<u8>, max_output: u64) -> (SyncFailure, tempfile::TempDir) {
    let (out, tmp) = scripted(stdout, max_output, Compress::Gzip);
    (out.expect_err("the sync fails"), tmp)
}

/// `stdout` played back as a sync-out's under `compress`.
fn scripted(
    stdout: Vec<u8>,
    max_output: u64,
    compress: Compress,
) -> (Result<(), SyncFailure>, tempfile::TempDir) {
    let tmp = tempfile::tempdir().unwrap();
    let ops = [op("o", vec![file_out("/ws/f", tmp.path().join("t/f"))])];
    let mut opts = SyncOptions::new("/ws");
    opts.compress = compress;
    opts.max_output_bytes = max_output;
    let backend = Arc::new(ScriptedBackend::new(stdout, 0).remote());
    let out = block_on(runtime().sync_out(&ops, &opts, backend)).map(|_| ());
    (out, tmp)
}

/// A probe frame of `len` bytes, as the program sends it before its
/// codec frame.
fn probe(len: usize) -> Vec<u8> {
    let mut v = mark(&format!("probe {len}"));
    v.extend(text(len));
    v
}

/// The stream was refused as broken or unsafe.
fn assert_refused(err: &SyncFailure) {
    assert!(
        matches!(
            err.error.kind,
            ErrorKind::Transport | ErrorKind::UnsafeArchive
        ),
        "{}",
        err.error
    );
}

fn nothing_landed(tmp: &tempfile::TempDir) {
    assert!(!tmp.path().join("t/f").exists());
    let left: Vec<_> = std::fs::read_dir(tmp.path().join("t"))
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "{left:?}");
}

fn framed_file(data: &[u8]) -> Vec<u8> {
    let mut v = mark("map 0 0");
    v.extend(hostile::end(hostile::file(b"f", data)));
    v.extend(mark("op 0"));
    v.extend(mark("end"));
    v
}

/// 64 MiB of zeros in a 64 KiB gzip stream stops at a 4 MiB output guard.
#[test]
fn a_decompression_bomb_stops_at_the_output_guard() {
    if !compresses() {
        return;
    }
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    e.write_all(&mark("map 0 0")).unwrap();
    e.write_all(&hostile::header(b"f", b'0', 64 << 20, 0o644, b""))
        .unwrap();
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..64 {
        e.write_all(&zeros).unwrap();
    }
    let mut stdout = mark("codec gzip");
    stdout.extend(e.finish().unwrap());
    let started = std::time::Instant::now();
    let (err, tmp) = scripted_out(stdout, 4 << 20);
    assert_eq!(err.error.kind, ErrorKind::LimitExceeded, "{}", err.error);
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    nothing_landed(&tmp);
}

/// Plain bytes after the compressed stream (a second, unchecked archive)
/// fail the sync, as bytes after a plain stream's end marker do; what they
/// carry never lands.
#[test]
fn bytes_after_the_compressed_stream_fail_loud() {
    if !compresses() {
        return;
    }
    let mut stdout = mark("codec gzip");
    stdout.extend(gzip(&framed_file(b"good")));
    stdout.extend(framed_file(b"smuggled"));
    let (err, tmp) = scripted_out(stdout, 1 << 30);
    assert_refused(&err);
    let landed = std::fs::read(tmp.path().join("t/f")).unwrap_or_default();
    assert_ne!(landed, b"smuggled");
}

/// A codec frame that lies (plain data, or a codec never offered) fails.
#[test]
fn a_lying_codec_frame_fails_loud() {
    if !compresses() {
        return;
    }
    let mut plain = mark("codec gzip");
    plain.extend(framed_file(b"not compressed"));
    let (err, tmp) = scripted_out(plain, 1 << 30);
    assert_refused(&err);
    nothing_landed(&tmp);
    let mut unknown = mark("codec lz4");
    unknown.extend(framed_file(b"x"));
    let (err, tmp) = scripted_out(unknown, 1 << 30);
    assert_eq!(err.error.kind, ErrorKind::UnsafeArchive, "{}", err.error);
    nothing_landed(&tmp);
    // A gzip stream that turns to garbage in the middle of a big file:
    // the stream's failure, not a host file's.
    let mut zipped = gzip(&framed_file(&incompressible(4 << 20)));
    let half = zipped.len() / 2;
    zipped.truncate(half);
    zipped.extend(incompressible(1 << 20));
    let mut corrupt = mark("codec gzip");
    corrupt.extend(zipped);
    let (err, tmp) = scripted_out(corrupt, 1 << 30);
    assert_eq!(err.error.kind, ErrorKind::Transport, "{}", err.error);
    nothing_landed(&tmp);
    // A stream that skips the codec frame entirely.
    let (err, tmp) = scripted_out(framed_file(b"x"), 1 << 30);
    assert_eq!(err.error.kind, ErrorKind::UnsafeArchive, "{}", err.error);
    nothing_landed(&tmp);
}

/// A probe of the link is dropped, and held to what the program was
/// written to send: under `auto` only, of exactly the asked length, once,
/// and followed by the codec frame; a probe cut short is a cut stream.
#[test]
fn a_probe_is_held_to_what_was_asked() {
    if !compresses() {
        return;
    }
    let data = text(100_000);
    for plain in [true, false] {
        let mut stdout = probe(PROBE);
        if plain {
            stdout.extend(mark("codec none"));
            stdout.extend(framed_file(&data));
        } else {
            stdout.extend(mark("codec gzip"));
            stdout.extend(gzip(&framed_file(&data)));
        }
        let (out, tmp) = scripted(stdout, 1 << 30, Compress::Auto);
        out.unwrap_or_else(|e| panic!("plain {plain}: {}", e.error));
        assert_eq!(std::fs::read(tmp.path().join("t/f")).unwrap(), data);
    }
    let then = |mut v: Vec<u8>, rest: &[u8]| {
        v.extend_from_slice(rest);
        v
    };
    let none_then_file = then(mark("codec none"), &framed_file(b"x"));
    for (name, stdout, compress) in [
        (
            "another length",
            then(probe(PROBE - 512), &none_then_file),
            Compress::Auto,
        ),
        (
            "not asked for",
            then(probe(PROBE), &none_then_file),
            Compress::Gzip,
        ),
        (
            "twice",
            then(then(probe(PROBE), &probe(PROBE)), &none_then_file),
            Compress::Auto,
        ),
        (
            "no codec frame",
            then(probe(PROBE), &framed_file(b"x")),
            Compress::Auto,
        ),
    ] {
        let (out, tmp) = scripted(stdout, 1 << 30, compress);
        let err = out.expect_err(name);
        assert_eq!(
            err.error.kind,
            ErrorKind::UnsafeArchive,
            "{name}: {}",
            err.error
        );
        nothing_landed(&tmp);
    }
    let mut cut = probe(PROBE);
    cut.truncate(PROBE / 2);
    let (out, tmp) = scripted(cut, 1 << 30, Compress::Auto);
    assert_refused(&out.expect_err("a cut probe"));
    nothing_landed(&tmp);
}
