// Generates the loopwire.v1 client code from the repository's protos at build time, with
// the system protoc (Debian's protobuf-compiler): nothing is downloaded. pbjson-build adds
// serde impls that follow the proto3 JSON mapping, so the example prints canonical JSON.
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = [
        "../../protos/loopwire/v1/common.proto",
        "../../protos/loopwire/v1/harness.proto",
        "../../protos/loopwire/v1/gateway.proto",
        "../../protos/loopwire/v1/inference.proto",
    ];
    let descriptors = PathBuf::from(std::env::var("OUT_DIR")?).join("loopwire_descriptor.bin");
    tonic_prost_build::configure()
        .build_server(false)
        .file_descriptor_set_path(&descriptors)
        .compile_protos(&protos, &["../../protos"])?;
    pbjson_build::Builder::new()
        .register_descriptors(&std::fs::read(&descriptors)?)?
        .build(&[".loopwire.v1"])?;
    for proto in protos {
        println!("cargo:rerun-if-changed={proto}");
    }
    Ok(())
}
