//! `POST /process/execute`: the command text as a shell's stdin.

use super::*;

pub(super) async fn execute(
    state: &State,
    req: Request<Incoming>,
    faults: &Faults,
    path: &str,
) -> Response<Body> {
    let Ok(body) = req.into_body().collect().await.map(|b| b.to_bytes()) else {
        return json_error(
            StatusCode::BAD_REQUEST,
            "bad request: body",
            path,
            "BAD_REQUEST",
        );
    };
    // A command's text and its output cross the link too.
    let mut pacer = Pacer::new(faults.bytes_per_sec);
    pacer.pace(body.len() as u64).await;
    state.count(body.len());
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(&body) else {
        return json_error(
            StatusCode::BAD_REQUEST,
            "bad request: invalid request body",
            path,
            "BAD_REQUEST",
        );
    };
    let command = v["command"].as_str().unwrap_or_default().to_owned();
    if command.trim().is_empty() {
        return json_error(
            StatusCode::BAD_REQUEST,
            "bad request: command cannot be empty or whitespace-only",
            path,
            "BAD_REQUEST",
        );
    }
    if faults.execute_hangs {
        tokio::time::sleep(MAX_TIMEOUT).await;
    }
    let timeout = v["timeout"]
        .as_u64()
        .filter(|&t| t > 0)
        .map_or(MAX_TIMEOUT, Duration::from_secs);
    // The command is the shell's stdin; its stderr joins its stdout.
    let mut argv = vec!["/bin/sh".to_owned(), "-c".to_owned()];
    match v["cwd"].as_str() {
        Some(cwd) => argv.extend([
            "cd -- \"$1\" || exit 255; exec 2>&1; exec /bin/sh".to_owned(),
            "toolbox".to_owned(),
            cwd.to_owned(),
        ]),
        None => argv.push("exec 2>&1; exec /bin/sh".to_owned()),
    }
    let started = state.backend.start(ExecRequest {
        argv,
        timeout,
        max_stderr: 1 << 20,
    });
    let mut p = match started.await {
        Ok(p) => p,
        Err(e) => return ok_json(serde_json::json!({"exitCode": -1, "result": e.to_string()})),
    };
    let _ = p.stdin.write_all(command.as_bytes()).await;
    // Only closing the pipe ends the shell's input.
    p.stdin = Box::new(tokio::io::sink());
    let mut out = Vec::new();
    let _ = p.stdout.read_to_end(&mut out).await;
    let status = match p.control.wait().await {
        Ok(s) => s,
        Err(e) => return ok_json(serde_json::json!({"exitCode": -1, "result": e.to_string()})),
    };
    if status.timed_out {
        return json_error(
            StatusCode::REQUEST_TIMEOUT,
            "request timeout: command execution timeout",
            path,
            "REQUEST_TIMEOUT",
        );
    }
    if status.exit_code == Some(255) && out.is_empty() {
        // The cwd could not be entered: the daemon's start failure.
        let why = String::from_utf8_lossy(&status.stderr).into_owned();
        return ok_json(serde_json::json!({"exitCode": -1, "result": why}));
    }
    let answer = serde_json::json!({
        "exitCode": status.exit_code.unwrap_or(-1),
        "result": String::from_utf8_lossy(&out),
    });
    let len = answer.to_string().len();
    pacer.pace(len as u64).await;
    state.count(len);
    ok_json(answer)
}
