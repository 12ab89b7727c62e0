//! The wasmtime engine, the compile cache, and one `InstancePre` per component.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};
use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{Config, Engine, Store};

use crate::bindings::{self, Provider, ProviderPre};
use crate::state::{ShimState, GUEST_MEMORY_BYTES};

/// The provider component built from `guest/component`, embedded at build time.
pub static EMBEDDED_COMPONENT: &[u8] = include_bytes!(env!("SANDBOX_SYNC_COMPONENT"));

/// Where the build put the second provider component (the base64 fallback),
/// for loading by path (`--component`) in tests and demos.
pub const FALLBACK_COMPONENT_PATH: &str = env!("SANDBOX_SYNC_FALLBACK_COMPONENT");

/// Version of the WIT package this host speaks (defined once, in core).
pub use sandbox_sync_core::WIT_VERSION;

/// Capabilities every provider must declare.
const REQUIRED_CAPABILITIES: &[&str] = &["sync-in", "sync-out"];

/// How often the epoch advances; guest code yields at each tick.
const EPOCH_TICK: Duration = Duration::from_millis(10);

/// What a component says about itself (`describe`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ProviderInfo {
    /// Provider name.
    pub name: String,
    /// Provider version.
    pub version: String,
    /// WIT package version it was built against.
    pub wit_version: String,
    /// Declared capabilities.
    pub capabilities: Vec<String>,
}

/// Failures loading a component.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read.
    #[error("failed to read component {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Wasmtime refused it (not a component, wrong imports, ...).
    #[error("failed to load component: {0}")]
    Wasm(String),
    /// It loaded but does not speak this host's contract.
    #[error("incompatible provider component: {0}")]
    Incompatible(String),
}

fn wasm_err(e: wasmtime::Error) -> LoadError {
    LoadError::Wasm(format!("{e:#}"))
}

/// A loaded provider component, ready to instantiate per call.
pub struct Runtime {
    pub(crate) engine: Engine,
    pub(crate) pre: ProviderPre<ShimState>,
    info: ProviderInfo,
    _ticker: EpochTicker,
}

impl Runtime {
    /// Loads the embedded provider component.
    ///
    /// # Errors
    /// See [`LoadError`].
    pub async fn embedded() -> Result<Self, LoadError> {
        Self::from_bytes(EMBEDDED_COMPONENT).await
    }

    /// The component at `path`, or the embedded one.
    ///
    /// # Errors
    /// As [`Runtime::from_file`].
    pub async fn load(path: Option<&Path>) -> Result<Self, LoadError> {
        match path {
            Some(p) => Self::from_file(p).await,
            None => Self::embedded().await,
        }
    }

    /// Loads a provider component from a `.wasm` file at run time.
    ///
    /// # Errors
    /// See [`LoadError`].
    pub async fn from_file(path: &Path) -> Result<Self, LoadError> {
        let bytes = std::fs::read(path).map_err(|source| LoadError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::from_bytes(&bytes).await
    }

    async fn from_bytes(bytes: &[u8]) -> Result<Self, LoadError> {
        let mut config = Config::new();
        config.wasm_component_model(true);
        config.epoch_interruption(true);
        let engine = Engine::new(&config).map_err(wasm_err)?;
        let component = compile_cached(&engine, bytes)?;
        let mut linker: Linker<ShimState> = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(wasm_err)?;
        // wasi:io comes from wasmtime-wasi above; link our own interfaces one by one.
        bindings::types::add_to_linker::<ShimState, HasSelf<ShimState>>(&mut linker, |s| s)
            .map_err(wasm_err)?;
        bindings::sandbox_exec::add_to_linker::<ShimState, HasSelf<ShimState>>(&mut linker, |s| s)
            .map_err(wasm_err)?;
        bindings::host_fs::add_to_linker::<ShimState, HasSelf<ShimState>>(&mut linker, |s| s)
            .map_err(wasm_err)?;
        bindings::sandbox_toolbox::add_to_linker::<ShimState, HasSelf<ShimState>>(
            &mut linker,
            |s| s,
        )
        .map_err(wasm_err)?;
        bindings::sync_state::add_to_linker::<ShimState, HasSelf<ShimState>>(&mut linker, |s| s)
            .map_err(wasm_err)?;
        bindings::sync_report::add_to_linker::<ShimState, HasSelf<ShimState>>(&mut linker, |s| s)
            .map_err(wasm_err)?;
        let pre = ProviderPre::new(linker.instantiate_pre(&component).map_err(wasm_err)?)
            .map_err(wasm_err)?;
        let ticker = EpochTicker::start(engine.clone());
        let mut runtime = Runtime {
            engine,
            pre,
            info: ProviderInfo {
                name: String::new(),
                version: String::new(),
                wit_version: String::new(),
                capabilities: vec![],
            },
            _ticker: ticker,
        };
        runtime.info = runtime.describe().await?;
        check_compatible(&runtime.info)?;
        Ok(runtime)
    }

    /// What the loaded component reported from `describe`.
    pub fn info(&self) -> &ProviderInfo {
        &self.info
    }

    async fn describe(&self) -> Result<ProviderInfo, LoadError> {
        let backend = Arc::new(crate::exec::scripted::ScriptedBackend::new(Vec::new(), 0));
        let (mut store, provider) = self
            .instantiate(ShimState::new(backend, GUEST_MEMORY_BYTES))
            .await
            .map_err(wasm_err)?;
        let info = provider
            .sandbox_sync_provider_sync()
            .call_describe(&mut store)
            .await
            .map_err(wasm_err)?;
        Ok(ProviderInfo {
            name: info.name,
            version: info.version,
            wit_version: info.wit_version,
            capabilities: info.capabilities,
        })
    }

    /// Mean time to create a fresh store and instance over `n` tries (what
    /// every sync call pays before the component runs).
    ///
    /// # Errors
    /// When instantiation fails.
    pub async fn measure_instantiation(&self, n: u32) -> wasmtime::Result<std::time::Duration> {
        let backend: Arc<dyn crate::exec::ExecBackend> =
            Arc::new(crate::exec::scripted::ScriptedBackend::new(Vec::new(), 0));
        let start = std::time::Instant::now();
        for _ in 0..n {
            let _ = self
                .instantiate(ShimState::new(Arc::clone(&backend), GUEST_MEMORY_BYTES))
                .await?;
        }
        Ok(start.elapsed() / n.max(1))
    }

    /// A fresh store and instance for one call (microseconds with `InstancePre`).
    pub(crate) async fn instantiate(
        &self,
        state: ShimState,
    ) -> wasmtime::Result<(Store<ShimState>, Provider)> {
        let mut store = Store::new(&self.engine, state);
        store.limiter(|s| &mut s.limits);
        store.epoch_deadline_async_yield_and_update(1);
        let provider = self.pre.instantiate_async(&mut store).await?;
        Ok((store, provider))
    }
}

fn check_compatible(info: &ProviderInfo) -> Result<(), LoadError> {
    let major_minor = |v: &str| v.split('.').take(2).collect::<Vec<_>>().join(".");
    if major_minor(&info.wit_version) != major_minor(WIT_VERSION) {
        return Err(LoadError::Incompatible(format!(
            "{} {} was built against WIT {}, this host speaks {WIT_VERSION}",
            info.name, info.version, info.wit_version
        )));
    }
    for cap in REQUIRED_CAPABILITIES {
        if !info.capabilities.iter().any(|c| c == cap) {
            return Err(LoadError::Incompatible(format!(
                "{} does not declare the {cap:?} capability",
                info.name
            )));
        }
    }
    Ok(())
}

/// Compiles `bytes`, reusing a precompiled artifact from the cache directory.
///
/// An artifact is native code, which `Component::deserialize` trusts as
/// it is (wasmtime checks only that an engine like this one made it), so
/// one is loaded only from a directory nobody else could write and only
/// with the seal this user's key gives it; anything else is compiled anew.
fn compile_cached(engine: &Engine, bytes: &[u8]) -> Result<Component, LoadError> {
    let Some(dir) = crate::private_dir::cache_dir() else {
        return Component::new(engine, bytes).map_err(wasm_err);
    };
    let mut h = DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut h);
    let key = format!("{:x}-{:016x}", Sha256::digest(bytes), h.finish());
    let path = dir.path().join(format!("{key}.cwasm"));
    // The seal names the artifact's key: another component's artifact,
    // sealed as well, does not pass for this one's.
    let label = format!("cwasm {key}");
    if let Ok(file) = std::fs::read(&path) {
        if let Some(artifact) = dir.unseal(&label, &file) {
            // SAFETY: sealed with this user's key, which only a host run as
            // this user reads: written by `precompile_component` of an
            // engine with the same compatibility hash (in its name).
            if let Ok(c) = unsafe { Component::deserialize(engine, artifact) } {
                return Ok(c);
            }
        } else {
            tracing::warn!("{} has no valid seal: compiling anew", path.display());
        }
    }
    let artifact = engine.precompile_component(bytes).map_err(wasm_err)?;
    let stored = (|| -> std::io::Result<()> {
        let mut tmp = tempfile::NamedTempFile::new_in(dir.path())?;
        std::io::Write::write_all(&mut tmp, &dir.sealed(&label, &artifact))?;
        tmp.persist(&path).map_err(|e| e.error)?;
        Ok(())
    })();
    if let Err(e) = stored {
        tracing::debug!("compile cache not written: {e}");
    }
    // SAFETY: `artifact` was just produced by `precompile_component` on this engine.
    unsafe { Component::deserialize(engine, &artifact) }.map_err(wasm_err)
}

/// Advances the engine's epoch so long-running guest code yields.
struct EpochTicker {
    stop: Arc<AtomicBool>,
}

impl EpochTicker {
    fn start(engine: Engine) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        std::thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                std::thread::sleep(EPOCH_TICK);
                engine.increment_epoch();
            }
        });
        EpochTicker { stop }
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(wit: &str, caps: &[&str]) -> ProviderInfo {
        ProviderInfo {
            name: "p".into(),
            version: "1".into(),
            wit_version: wit.into(),
            capabilities: caps.iter().map(|c| c.to_string()).collect(),
        }
    }

    #[test]
    fn wit_version_is_the_packages() {
        let wit = include_str!("../../wit/provider.wit");
        assert!(
            wit.contains(&format!("package sandbox-sync:provider@{WIT_VERSION};")),
            "wit/provider.wit and WIT_VERSION disagree"
        );
    }

    #[test]
    fn compatibility_is_wit_major_minor_and_both_sync_verbs() {
        assert!(check_compatible(&info("0.2.0", &["sync-in", "sync-out"])).is_ok());
        assert!(check_compatible(&info("0.2.7", &["sync-in", "sync-out", "extra"])).is_ok());
        assert!(matches!(
            check_compatible(&info("0.1.0", &["sync-in", "sync-out"])),
            Err(LoadError::Incompatible(_))
        ));
        assert!(matches!(
            check_compatible(&info("1.1.0", &["sync-in", "sync-out"])),
            Err(LoadError::Incompatible(_))
        ));
        assert!(matches!(
            check_compatible(&info("0.2.0", &["sync-in"])),
            Err(LoadError::Incompatible(_))
        ));
    }
}
