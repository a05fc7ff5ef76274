//! Rust client of the loopwire mesh: the generated `loopwire.v1` messages and client stubs.

pub mod v1 {
    tonic::include_proto!("loopwire.v1");
}
