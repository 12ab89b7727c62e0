//! One module per imported WIT interface: look up, check, delegate, convert.

pub mod exec;
pub mod fs;

impl crate::bindings::types::Host for crate::state::ShimState {}
