//! The embedded default: a local store and process executor driving the same engine.

pub mod feature;
pub mod store;
