//! Shared guest-side plumbing for sandbox-sync provider components.
//!
//! Both components (`guest/component`, the single-exec tar stream, and
//! `guest/base64-fallback`) implement the same world; what they share lives
//! here: the WIT bindings, stream helpers, error mapping, planning over
//! granted host directories, and validated extraction into host targets.

// Lets generated paths name this crate the same way from inside and outside.
extern crate self as sandbox_sync_driver;

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

pub mod errors;
pub mod extract;
pub mod io;
pub mod plan;
pub mod scratch;

#[doc(hidden)]
pub use wit_bindgen;

/// Version of the WIT package the components are built against.
pub const WIT_VERSION: &str = "0.2.0";
