//! Reading the pod (typed errors for a missing pod, a pod not running, a
//! wrong container) and opening the exec stream.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, AttachParams};
use kube::client::Connection;
use kube::Resource;

use super::{KubeBackend, KubeError};

impl KubeBackend {
    async fn check_pod(&self, api: &Api<Pod>) -> Result<String, KubeError> {
        let pod = match api.get(&self.pod).await {
            Ok(pod) => pod,
            Err(kube::Error::Api(status)) if status.is_not_found() || status.code == 404 => {
                return Err(KubeError::PodNotFound {
                    namespace: self.namespace.clone(),
                    pod: self.pod.clone(),
                })
            }
            Err(source) => {
                return Err(KubeError::GetPod {
                    namespace: self.namespace.clone(),
                    pod: self.pod.clone(),
                    source,
                })
            }
        };
        let phase = pod
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_else(|| "Unknown".to_owned());
        if phase != "Running" {
            return Err(KubeError::PodNotRunning {
                namespace: self.namespace.clone(),
                pod: self.pod.clone(),
                phase,
            });
        }
        let available: Vec<String> = pod
            .spec
            .as_ref()
            .map(|s| s.containers.iter().map(|c| c.name.clone()).collect())
            .unwrap_or_default();
        let container = match (&self.container, available.as_slice()) {
            (Some(c), names) if names.contains(c) => c.clone(),
            (Some(c), _) => {
                return Err(KubeError::ContainerMissing {
                    namespace: self.namespace.clone(),
                    pod: self.pod.clone(),
                    container: c.clone(),
                    available: available.clone(),
                })
            }
            (None, [only]) => only.clone(),
            (None, _) => {
                return Err(KubeError::ContainerAmbiguous {
                    namespace: self.namespace.clone(),
                    pod: self.pod.clone(),
                    available: available.clone(),
                })
            }
        };
        // A Running pod can still have this container waiting (crash loop)
        // or terminated; say so instead of failing the upgrade obscurely.
        let state = pod
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .and_then(|all| all.iter().find(|s| s.name == container))
            .and_then(|s| s.state.as_ref());
        if let Some(state) = state {
            if state.running.is_none() {
                let described = match (&state.waiting, &state.terminated) {
                    (Some(w), _) => {
                        format!("waiting: {}", w.reason.as_deref().unwrap_or("unknown"))
                    }
                    (None, Some(t)) => {
                        format!("terminated: {}", t.reason.as_deref().unwrap_or("unknown"))
                    }
                    (None, None) => "state unknown".to_owned(),
                };
                return Err(KubeError::ContainerNotRunning {
                    namespace: self.namespace.clone(),
                    pod: self.pod.clone(),
                    container,
                    state: described,
                });
            }
        }
        Ok(container)
    }

    /// Reads the pod, then opens the exec stream: the WebSocket upgrade of
    /// `pods/{name}/exec`, as kube-rs's `Api::exec` makes it, without its
    /// message loop (ours is in `session.rs`).
    pub(super) async fn connect(&self, argv: &[String]) -> Result<Connection, KubeError> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &self.namespace);
        let container = self.check_pod(&api).await?;
        let params = AttachParams::default()
            .container(container)
            .stdin(true)
            .stdout(true)
            .stderr(true)
            .tty(false);
        let connect_error = |source| KubeError::Connect {
            namespace: self.namespace.clone(),
            pod: self.pod.clone(),
            source,
        };
        let request = kube::core::Request::new(Pod::url_path(&(), Some(&self.namespace)))
            .exec(&self.pod, argv.iter().cloned(), &params)
            .map_err(|e| connect_error(kube::Error::BuildRequest(e)))?;
        self.client.connect(request).await.map_err(connect_error)
    }
}
