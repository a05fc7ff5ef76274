//! Rust client of the loopwire mesh: the generated `loopwire.v1` messages and client stubs,
//! with serde impls that follow the proto3 JSON mapping (pbjson).

pub mod v1 {
    tonic::include_proto!("loopwire.v1");
    include!(concat!(env!("OUT_DIR"), "/loopwire.v1.serde.rs"));
}
