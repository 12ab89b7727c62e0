//! The file endpoints: `bulk-upload`, `bulk-download` and `DELETE /files`.

use super::*;

pub(super) async fn upload(
    state: &State,
    req: Request<Incoming>,
    faults: &Faults,
) -> Response<Body> {
    let boundary = req
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| multer::parse_boundary(v).ok());
    let Some(boundary) = boundary else {
        return json_status(
            StatusCode::BAD_REQUEST,
            serde_json::json!({"errors": ["invalid multipart form"]}),
        );
    };
    let mut parts = multer::Multipart::new(req.into_body().into_data_stream(), boundary);
    let mut errors: Vec<String> = Vec::new();
    let mut files = Vec::new();
    let mut paths = std::collections::HashMap::new();
    loop {
        let mut field = match parts.next_field().await {
            Ok(Some(f)) => f,
            Ok(None) => break,
            Err(e) => {
                errors.push(format!("reading part: {e}"));
                break;
            }
        };
        let name = field.name().unwrap_or_default().to_owned();
        let index = name
            .strip_prefix("files[")
            .and_then(|n| n.split_once(']'))
            .map(|(i, kind)| (i.to_owned(), kind.to_owned()));
        match index {
            Some((i, kind)) if kind == ".path" => match field.text().await {
                Ok(p) if !p.trim().is_empty() => {
                    paths.insert(i, p.trim().to_owned());
                }
                Ok(_) => errors.push(format!("path[{i}]: empty path")),
                Err(e) => errors.push(format!("reading part: {e}")),
            },
            Some((i, kind)) if kind == ".file" => {
                let Some(dest) = paths.get(&i).cloned() else {
                    errors.push(format!("file[{i}]: missing .path metadata"));
                    continue;
                };
                match write_file(state, &dest, &mut field, faults).await {
                    Ok(bytes) => files.push(serde_json::json!({"path": dest, "bytes": bytes})),
                    Err(e) => {
                        errors.push(format!("{dest}: {e}"));
                        if e.starts_with("reading part") {
                            break;
                        }
                    }
                }
            }
            _ => {}
        }
    }
    // The daemon drains the body before it answers.
    drop(parts);
    if errors.is_empty() {
        ok_json(serde_json::json!({ "files": files }))
    } else {
        json_status(
            StatusCode::BAD_REQUEST,
            serde_json::json!({"errors": errors, "files": files}),
        )
    }
}

/// Streams one part into `dest` in the sandbox; the bytes written.
async fn write_file(
    state: &State,
    dest: &str,
    field: &mut multer::Field<'_>,
    faults: &Faults,
) -> Result<u64, String> {
    let cut_after = faults.cut_upload_after;
    let mut pacer = Pacer::new(faults.bytes_per_sec);
    let mut p = state
        .backend
        .start(ExecRequest {
            argv: vec![
                "/bin/sh".into(),
                "-c".into(),
                "mkdir -p -- \"${1%/*}\" && exec cat > \"$1\"".into(),
                "upload".into(),
                dest.to_owned(),
            ],
            timeout: MAX_TIMEOUT,
            max_stderr: 1 << 16,
        })
        .await
        .map_err(|e| format!("create: {e}"))?;
    let mut n = 0u64;
    let mut cut = None;
    loop {
        match field.chunk().await {
            Ok(Some(c)) => {
                let room = cut_after.map_or(c.len(), |max| {
                    usize::try_from(max.saturating_sub(n))
                        .unwrap_or(usize::MAX)
                        .min(c.len())
                });
                n += room as u64;
                pacer.pace(room as u64).await;
                if p.stdin.write_all(&c[..room]).await.is_err() {
                    break;
                }
                if room < c.len() {
                    cut = Some("reading part: unexpected EOF".to_owned());
                    break;
                }
            }
            Ok(None) => break,
            Err(e) => {
                cut = Some(format!("reading part: {e}"));
                break;
            }
        }
    }
    p.stdin = Box::new(tokio::io::sink());
    state
        .wire
        .fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    let status = p.control.wait().await.map_err(|e| format!("write: {e}"))?;
    if let Some(c) = cut {
        return Err(c);
    }
    if status.exit_code != Some(0) {
        return Err(format!(
            "create: {}",
            String::from_utf8_lossy(&status.stderr).trim()
        ));
    }
    Ok(n)
}

pub(super) async fn download(
    state: &State,
    req: Request<Incoming>,
    faults: &Faults,
) -> Response<Body> {
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let paths: Vec<String> = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v["paths"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|p| p.as_str().map(str::to_owned))
        .collect();
    if paths.is_empty() {
        return json_status(
            StatusCode::BAD_REQUEST,
            serde_json::json!({"error": "request body must be {\"paths\": [ ... ]} and non-empty"}),
        );
    }
    if let Some((f, n)) = faults
        .flood
        .filter(|(f, _)| f.endpoint() == "/files/bulk-download")
    {
        state.clear_flood();
        return flood_answer(f, n, &paths[0]);
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, std::io::Error>>(8);
    let backend = Arc::clone(&state.backend);
    let mut budget = faults.cut_download_after;
    tokio::spawn(async move {
        for path in paths {
            if !send_part(&*backend, &path, &tx, &mut budget).await {
                // Cut: the answer ends here, without its closing boundary.
                return;
            }
        }
        let _ = tx
            .send(Ok(Frame::data(Bytes::from(format!("--{BOUNDARY}--\r\n")))))
            .await;
    });
    let counted = Arc::clone(&state.wire);
    let pacer = Pacer::new(faults.bytes_per_sec);
    let frames = futures_util::stream::unfold((rx, pacer), |(mut rx, mut pacer)| async move {
        let f = rx.recv().await?;
        if let Ok(f) = &f {
            pacer.pace(f.data_ref().map_or(0, Bytes::len) as u64).await;
        }
        Some((f, (rx, pacer)))
    })
    .inspect(move |f| {
        if let Ok(f) = f {
            let n = f.data_ref().map_or(0, Bytes::len) as u64;
            counted.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
        }
    });
    Response::builder()
        .status(StatusCode::OK)
        .header(
            http::header::CONTENT_TYPE,
            format!("multipart/form-data; boundary={BOUNDARY}"),
        )
        .body(BoxBody::new(StreamBody::new(frames)))
        .unwrap_or_else(|_| Response::new(empty()))
}

/// Sends `path`'s part; false once the injected cut happened.
async fn send_part(
    backend: &dyn ExecBackend,
    path: &str,
    tx: &tokio::sync::mpsc::Sender<Result<Frame<Bytes>, std::io::Error>>,
    budget: &mut Option<u64>,
) -> bool {
    let send = move |b: Bytes| async move { tx.send(Ok(Frame::data(b))).await.is_ok() };
    let disposition = format!("filename=\"{path}\"; filename*=utf-8''{path}");
    let started = backend
        .start(ExecRequest {
            argv: vec![
                "/bin/sh".into(),
                "-c".into(),
                // A failed `exec` redirection ends the shell (status 2), so
                // a missing path is told apart first.
                "[ -e \"$1\" ] || exit 3; exec 3<\"$1\"; [ ! -d /proc/self/fd/3 ] || exit 4; \
                 stat -L -c %s /proc/self/fd/3 || exit 5; exec cat <&3"
                    .into(),
                "download".into(),
                path.to_owned(),
            ],
            timeout: MAX_TIMEOUT,
            max_stderr: 1 << 16,
        })
        .await;
    let Ok(mut p) = started else {
        return error_part(tx, path, &disposition, 500, "FILE_READ_FAILED").await;
    };
    p.stdin = Box::new(tokio::io::sink());
    let mut out = tokio::io::BufReader::new(&mut p.stdout);
    let mut size_line = String::new();
    let _ = out.read_line(&mut size_line).await;
    let Ok(size) = size_line.trim().parse::<u64>() else {
        drop(out);
        let code = p.control.wait().await.ok().and_then(|s| s.exit_code);
        let (status, code) = match code {
            Some(4) => (400, "INVALID_FILE_PATH"),
            Some(3) => (404, "FILE_NOT_FOUND"),
            _ => (500, "FILE_READ_FAILED"),
        };
        return error_part(tx, path, &disposition, status, code).await;
    };
    let head = format!(
        "--{BOUNDARY}\r\nContent-Type: application/octet-stream\r\n\
Content-Disposition: form-data; name=\"file\"; {disposition}\r\nContent-Length: {size}\r\n\r\n"
    );
    if !send(Bytes::from(head)).await {
        return false;
    }
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match out.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let mut chunk = &buf[..n];
        if let Some(left) = budget.as_mut() {
            let take = chunk
                .len()
                .min(usize::try_from(*left).unwrap_or(usize::MAX));
            chunk = &chunk[..take];
            *left -= take as u64;
            if *left == 0 {
                let _ = send(Bytes::copy_from_slice(chunk)).await;
                p.control.abort();
                return false;
            }
        }
        if !send(Bytes::copy_from_slice(chunk)).await {
            return false;
        }
    }
    drop(out);
    let _ = p.control.wait().await;
    send(Bytes::from_static(b"\r\n")).await
}

async fn error_part(
    tx: &tokio::sync::mpsc::Sender<Result<Frame<Bytes>, std::io::Error>>,
    path: &str,
    disposition: &str,
    status: u16,
    code: &str,
) -> bool {
    let message = match code {
        "FILE_NOT_FOUND" => format!("file not found: {path}"),
        "INVALID_FILE_PATH" => "path points to a directory".to_owned(),
        _ => format!("failed to read file: {path}"),
    };
    let json = serde_json::json!({
        "statusCode": status, "message": message, "code": code,
        "timestamp": "2026-12-01T00:00:00Z", "path": path, "method": "POST",
    });
    let part = format!(
        "--{BOUNDARY}\r\nContent-Type: application/json; charset=utf-8\r\n\
Content-Disposition: form-data; name=\"error\"; {disposition}\r\n\r\n{json}\r\n"
    );
    tx.send(Ok(Frame::data(Bytes::from(part)))).await.is_ok()
}

pub(super) async fn delete(state: &State, query: &str) -> Response<Body> {
    let mut path = String::new();
    let mut recursive = String::new();
    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
        match &*k {
            "path" => path = v.into_owned(),
            "recursive" => recursive = v.into_owned(),
            _ => {}
        }
    }
    let started = state.backend.start(ExecRequest {
        argv: vec![
            "/bin/sh".into(),
            "-c".into(),
            "[ -e \"$1\" ] || exit 3; if [ -d \"$1\" ] && [ \"$2\" != true ]; then exit 4; fi; \
             exec rm -rf -- \"$1\""
                .into(),
            "delete".into(),
            path,
            recursive,
        ],
        timeout: MAX_TIMEOUT,
        max_stderr: 1 << 16,
    });
    let code = match started.await {
        Ok(mut p) => {
            p.stdin = Box::new(tokio::io::sink());
            p.control.wait().await.ok().and_then(|s| s.exit_code)
        }
        Err(_) => None,
    };
    let status = match code {
        Some(0) => StatusCode::NO_CONTENT,
        Some(3) => StatusCode::NOT_FOUND,
        Some(4) => StatusCode::BAD_REQUEST,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    Response::builder()
        .status(status)
        .body(empty())
        .unwrap_or_else(|_| Response::new(empty()))
}
