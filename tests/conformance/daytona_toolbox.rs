//! The Daytona toolbox client (`sandbox_sync_host::daytona`) against the
//! fake toolbox (`daytona_server`), whose requests run as real processes
//! on GNU and in a BusyBox root: every call, and every typed failure the
//! issue names (401, no sandbox, 408, 5xx, a command that never returns,
//! a download cut before its closing boundary, an upload whose source
//! breaks mid-body).

use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use bytes::Bytes;
use sandbox_sync_host::exec::daytona::{Client, ToolboxError};
use sandbox_sync_tests::daytona_server::{collect_stream, Faults, ToolboxServer};
use sandbox_sync_tests::*;

const KEY: &str = "test-key";
const ID: &str = "sbx-1";

fn serve(sb: &Sandbox) -> (ToolboxServer, Client) {
    let server = block_on(ToolboxServer::start(sb.backend(), ID, KEY)).unwrap();
    let toolbox = Client::new(&server.url, ID, KEY).unwrap();
    (server, toolbox)
}

fn chunks(
    parts: Vec<Result<Bytes, std::io::Error>>,
) -> impl futures_util::Stream<Item = Result<Bytes, std::io::Error>> + Send + Sync + 'static {
    futures_util::stream::iter(parts)
}

fn execute_runs_a_script_with_combined_output(u: Env) {
    let sb = Sandbox::new(u);
    let (server, tb) = serve(&sb);
    let dir = sb.remote("");
    let r = block_on(tb.execute(
        "sh -c 'echo out; echo err >&2; pwd; exit 3'",
        Some(&dir),
        Some(Duration::from_secs(30)),
    ))
    .unwrap();
    assert_eq!(r.exit_code, 3);
    assert!(
        r.output.contains("out\n") && r.output.contains("err\n"),
        "{r:?}"
    );
    assert!(r.output.contains(&dir), "{r:?}");
    // A cwd that cannot be entered: the daemon's start failure.
    let r = block_on(tb.execute("true", Some("/no/such/dir"), None)).unwrap();
    assert_eq!(r.exit_code, -1, "{r:?}");
    assert_eq!(server.calls(), ["POST /process/execute"; 2]);
}

fn a_command_past_its_timeout_is_a_typed_timeout(u: Env) {
    let sb = Sandbox::new(u);
    let (_server, tb) = serve(&sb);
    let started = Instant::now();
    let err = block_on(tb.execute("sleep 30", None, Some(Duration::from_secs(1)))).unwrap_err();
    assert!(matches!(err, ToolboxError::Timeout(_)), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}

fn upload_and_download_stream_a_file(u: Env) {
    let sb = Sandbox::new(u);
    let (server, tb) = serve(&sb);
    let data = incompressible(3 << 20);
    let parts: Vec<_> = data
        .chunks(100_000)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    let dest = sb.remote("deep/new/.paperclip-upload-x");
    let sent = block_on(tb.upload(&dest, chunks(parts))).unwrap();
    assert_eq!(sent, data.len() as u64);
    let landed = sb.remote_on_host("deep/new/.paperclip-upload-x");
    assert_eq!(std::fs::read(&landed).unwrap(), data);
    assert_eq!(
        std::fs::metadata(&landed).unwrap().permissions().mode() & 0o777,
        0o644
    );
    let got = block_on(async { collect_stream(tb.download(&dest).await?).await }).unwrap();
    assert_eq!(got, data);
    // Missing files and directories are typed file errors.
    for (path, code) in [
        (sb.remote("missing"), "FILE_NOT_FOUND"),
        (sb.remote("deep"), "INVALID_FILE_PATH"),
    ] {
        let err = block_on(async { collect_stream(tb.download(&path).await?).await }).unwrap_err();
        match err {
            ToolboxError::File { code: c, .. } => assert_eq!(c, code, "{path}"),
            other => panic!("{path}: {other}"),
        }
    }
    // Remove: recursive, and quiet about what is already gone.
    block_on(tb.remove(&sb.remote("deep"))).unwrap();
    assert!(!sb.remote_on_host("deep").exists());
    block_on(tb.remove(&sb.remote("deep"))).unwrap();
    assert_eq!(
        server.calls(),
        [
            "POST /files/bulk-upload",
            "POST /files/bulk-download",
            "POST /files/bulk-download",
            "POST /files/bulk-download",
            "DELETE /files",
            "DELETE /files",
        ]
    );
}

fn a_cut_download_fails_loud(u: Env) {
    let sb = Sandbox::new(u);
    let (server, tb) = serve(&sb);
    let data = incompressible(1 << 20);
    sb.write_remote("big.bin", &data);
    for after in [0, 1000, (1 << 20) - 1] {
        server.set_faults(Faults {
            cut_download_after: Some(after),
            ..Faults::default()
        });
        let err =
            block_on(async { collect_stream(tb.download(&sb.remote("big.bin")).await?).await })
                .unwrap_err();
        assert!(matches!(err, ToolboxError::Cut(_)), "after {after}: {err}");
    }
}

fn an_upload_whose_source_breaks_is_cut(u: Env) {
    let sb = Sandbox::new(u);
    let (_server, tb) = serve(&sb);
    let parts = vec![
        Ok(Bytes::from(vec![b'a'; 200_000])),
        Err(std::io::Error::other("the source broke")),
    ];
    let err = block_on(tb.upload(&sb.remote(".paperclip-upload-y"), chunks(parts))).unwrap_err();
    assert!(matches!(err, ToolboxError::Cut(_)), "{err}");
}

fn refusals_are_typed(u: Env) {
    let sb = Sandbox::new(u);
    let (server, _) = serve(&sb);
    let bad_key = Client::new(&server.url, ID, "wrong").unwrap();
    let err = block_on(bad_key.execute("true", None, None)).unwrap_err();
    assert!(matches!(err, ToolboxError::Unauthorized(_)), "{err}");
    let no_sandbox = Client::new(&server.url, "sbx-gone", KEY).unwrap();
    let err = block_on(no_sandbox.execute("true", None, None)).unwrap_err();
    assert!(
        matches!(err, ToolboxError::NoSandbox { status: 404, .. }),
        "{err}"
    );
    let tb = Client::new(&server.url, ID, KEY).unwrap();
    server.set_faults(Faults {
        status: Some(503),
        ..Faults::default()
    });
    let err = block_on(tb.execute("true", None, None)).unwrap_err();
    assert!(
        matches!(err, ToolboxError::Status { status: 503, .. }),
        "{err}"
    );
    let err = block_on(tb.upload(&sb.remote(".paperclip-upload-z"), chunks(vec![]))).unwrap_err();
    assert!(
        matches!(err, ToolboxError::Status { status: 503, .. }),
        "{err}"
    );
    let unreachable = Client::new("http://127.0.0.1:9/toolbox", ID, KEY).unwrap();
    let err = block_on(unreachable.execute("true", None, None)).unwrap_err();
    assert!(matches!(err, ToolboxError::Transport(_)), "{err}");
}

#[test]
fn a_command_that_never_returns_is_cut_off_by_the_client() {
    let sb = Sandbox::new(Env {
        userland: Userland::Gnu,
        transport: Transport::Local,
    });
    let (server, tb) = serve(&sb);
    server.set_faults(Faults {
        execute_hangs: true,
        ..Faults::default()
    });
    let started = Instant::now();
    let err = block_on(tb.execute("true", None, Some(Duration::from_secs(1)))).unwrap_err();
    assert!(matches!(err, ToolboxError::Timeout(_)), "{err}");
    // The command's timeout and the client's margin (5 s), no more.
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
}

for_each_userland!(
    local: execute_runs_a_script_with_combined_output,
    a_command_past_its_timeout_is_a_typed_timeout,
    upload_and_download_stream_a_file,
    a_cut_download_fails_loud,
    an_upload_whose_source_breaks_is_cut,
    refusals_are_typed,
);
