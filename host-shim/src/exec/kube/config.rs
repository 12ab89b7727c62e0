//! Clients from kubeconfig or the in-cluster service account, the way
//! `kubectl` finds them, with `TCP_NODELAY` on direct connections.

use std::path::PathBuf;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use super::{KubeBackend, KubeError};

impl KubeBackend {
    /// Runs commands in `namespace/pod` through `client`; `container` may
    /// be left out when the pod has exactly one.
    pub fn new(
        client: Client,
        namespace: impl Into<String>,
        pod: impl Into<String>,
        container: Option<String>,
    ) -> Self {
        KubeBackend {
            client,
            namespace: namespace.into(),
            pod: pod.into(),
            container,
        }
    }

    /// Builds a client from configuration, the way `kubectl` does.
    ///
    /// - `kubeconfig` set: that file, with `context` (or its current context).
    /// - only `context` set: `$KUBECONFIG` or `~/.kube/config`, that context.
    /// - neither: [`Config::infer`] (`$KUBECONFIG`/`~/.kube/config`, else the
    ///   in-cluster service account).
    ///
    /// `namespace` defaults to the context's namespace (`default`, or the
    /// service account's namespace in-cluster). A loopback API server
    /// (`kubectl proxy`, the test server) is never reached through
    /// `$HTTPS_PROXY`.
    ///
    /// # Errors
    /// [`KubeError::ReadKubeconfig`], [`KubeError::LoadKubeconfig`],
    /// [`KubeError::InferConfig`] or [`KubeError::BuildClient`].
    pub async fn from_config(
        kubeconfig: Option<PathBuf>,
        context: Option<String>,
        namespace: Option<String>,
        pod: impl Into<String>,
        container: Option<String>,
    ) -> Result<Self, KubeError> {
        let options = KubeConfigOptions {
            context: context.clone(),
            ..KubeConfigOptions::default()
        };
        let mut config = match (kubeconfig, context) {
            (Some(path), _) => {
                let file = Kubeconfig::read_from(&path)
                    .map_err(|source| KubeError::ReadKubeconfig { path, source })?;
                Config::from_custom_kubeconfig(file, &options)
                    .await
                    .map_err(KubeError::LoadKubeconfig)?
            }
            (None, Some(_)) => Config::from_kubeconfig(&options)
                .await
                .map_err(KubeError::LoadKubeconfig)?,
            (None, None) => Config::infer().await.map_err(KubeError::InferConfig)?,
        };
        if config.proxy_url.is_some() && is_loopback_host(config.cluster_url.host()) {
            tracing::debug!(cluster = %config.cluster_url, "not proxying a loopback API server");
            config.proxy_url = None;
        }
        let namespace = namespace.unwrap_or_else(|| config.default_namespace.clone());
        let client = if config.proxy_url.is_none() {
            nodelay_client(&config)
        } else {
            Client::try_from(config)
        }
        .map_err(KubeError::BuildClient)?;
        Ok(Self::new(client, namespace, pod, container))
    }
}

/// A client whose connections set `TCP_NODELAY`.
///
/// kube-rs forwards stdin in 4 KiB WebSocket frames (its `ReaderStream`),
/// each far below the MSS; with Nagle on, every frame after the first
/// waits for the server's delayed ACK, about 40 ms per sync. kube's own
/// builder hard-codes its connector, so this builds the client the way
/// kube documents for custom clients: its TLS, base-URI, auth and
/// extra-header layers over a connector with `nodelay`. Proxied configs
/// keep kube's builder, which owns proxy support.
fn nodelay_client(config: &Config) -> Result<Client, kube::Error> {
    use kube::client::ConfigExt;
    let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(config.connect_timeout);
    let https = config.rustls_https_connector_with_connector(http)?;
    let hyper = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build(https);
    let service = tower::ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(tower::BoxError::from)
        .service(hyper);
    Ok(Client::new(service, config.default_namespace.clone()))
}

/// True when the API server's host (`Config::cluster_url.host()`) is this
/// machine.
fn is_loopback_host(host: Option<&str>) -> bool {
    match host {
        Some("localhost") => true,
        Some(host) => host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback()),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts() {
        for (host, want) in [
            (Some("127.0.0.1"), true),
            (Some("localhost"), true),
            (Some("[::1]"), true),
            (Some("10.0.0.1"), false),
            (Some("kubernetes.default.svc"), false),
            (None, false),
        ] {
            assert_eq!(is_loopback_host(host), want, "{host:?}");
        }
    }
}
