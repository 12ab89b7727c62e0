//! Runs the Kubernetes-exec-protocol test server on its own, for manual
//! runs and benchmarks: `cargo run --release -p sandbox-sync-tests --example
//! k8s-server -- KUBECONFIG_OUT [v4|v5]`. Execs run on this machine's `sh`.
//! It serves until killed.

use sandbox_sync_tests::k8s_server::{HostCommands, K8sExecServer, Protocols, ServerConfig};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let out = args
        .next()
        .ok_or_else(|| anyhow::anyhow!("usage: k8s-server KUBECONFIG_OUT [v4|v5]"))?;
    let v5 = args.next().as_deref() != Some("v4");
    let config = ServerConfig::new("sandboxes", "agent-pod", "agent", HostCommands)
        .protocols(Protocols { v5, v4: true });
    let server = K8sExecServer::start(config).await?;
    std::fs::write(&out, server.kubeconfig())?;
    eprintln!("serving on {} (kubeconfig: {out})", server.url());
    std::future::pending::<()>().await;
    Ok(())
}
