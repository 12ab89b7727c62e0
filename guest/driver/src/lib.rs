//! Shared guest-side plumbing for sandbox-sync provider components.
//!
//! Both components (`guest/component`, the single-exec tar stream, and
//! `guest/base64-fallback`) implement the same world; what they share lives
//! here: the WIT bindings, stream helpers, error mapping, planning over
//! granted host directories, and validated extraction into host targets.

#![deny(missing_docs)]

// Lets generated paths name this crate the same way from inside and outside.
extern crate self as sandbox_sync_driver;

#[allow(missing_docs)]
pub mod bindings {
    //! Generated bindings for the `provider` world.
    wit_bindgen::generate!({
        path: "../../wit",
        world: "provider",
        generate_all,
        pub_export_macro: true,
        export_macro_name: "export_provider",
        default_bindings_module: "sandbox_sync_driver::bindings",
        runtime_path: "sandbox_sync_driver::wit_bindgen::rt",
    });
}

pub mod codec;
pub mod errors;
pub mod exec;
pub mod extract;
pub mod io;
pub mod plan;
pub mod report;
pub mod request;
pub mod scratch;

#[doc(hidden)]
pub use wit_bindgen;

/// Version of the WIT package the components are built against.
pub use sandbox_sync_core::WIT_VERSION;

/// What a provider's `describe` returns: `sync-in`, `sync-out` and
/// `post-upload-commands`, then `extra` capabilities.
pub fn provider_info(
    name: &str,
    version: &str,
    extra: &[&str],
) -> bindings::sandbox_sync::provider::types::ProviderInfo {
    bindings::sandbox_sync::provider::types::ProviderInfo {
        name: name.into(),
        version: version.into(),
        wit_version: WIT_VERSION.into(),
        capabilities: ["sync-in", "sync-out", "post-upload-commands"]
            .iter()
            .chain(extra)
            .map(|c| (*c).to_owned())
            .collect(),
    }
}

/// Defines and exports a provider component: its name, its capabilities
/// beyond the three every provider has, and the functions that run each
/// direction over the call's grants.
#[macro_export]
macro_rules! provider {
    ($name:literal, capabilities: [$($cap:literal),* $(,)?], sync_in: $sync_in:path, sync_out: $sync_out:path $(,)?) => {
        struct Provider;

        impl $crate::bindings::exports::sandbox_sync::provider::sync::Guest for Provider {
            fn describe() -> $crate::bindings::sandbox_sync::provider::types::ProviderInfo {
                $crate::provider_info($name, env!("CARGO_PKG_VERSION"), &[$($cap),*])
            }

            fn sync_in(
                req: $crate::bindings::sandbox_sync::provider::types::SyncRequest,
                sources: Vec<$crate::bindings::sandbox_sync::provider::host_fs::GrantedDir>,
            ) -> Result<
                Vec<$crate::bindings::sandbox_sync::provider::types::OperationResult>,
                $crate::bindings::sandbox_sync::provider::types::SyncError,
            > {
                // Names that are not UTF-8 travel spelled out (`byte_name`).
                for g in &sources {
                    g.byte_names();
                }
                let sources: Vec<_> = sources.iter().collect();
                $sync_in(&req, &sources)
            }

            fn sync_out(
                req: $crate::bindings::sandbox_sync::provider::types::SyncRequest,
                targets: Vec<$crate::bindings::sandbox_sync::provider::host_fs::GrantedDir>,
            ) -> Result<
                Vec<$crate::bindings::sandbox_sync::provider::types::OperationResult>,
                $crate::bindings::sandbox_sync::provider::types::SyncError,
            > {
                for g in &targets {
                    g.byte_names();
                }
                let targets: Vec<_> = targets.iter().collect();
                $sync_out(&req, &targets)
            }
        }

        $crate::bindings::export_provider!(Provider with_types_in $crate::bindings);
    };
}
