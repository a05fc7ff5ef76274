// Generates the loopwire.v1 client code from the repository's protos at build time, with
// the system protoc (Debian's protobuf-compiler): nothing is downloaded.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = [
        "../../protos/loopwire/v1/common.proto",
        "../../protos/loopwire/v1/harness.proto",
        "../../protos/loopwire/v1/gateway.proto",
        "../../protos/loopwire/v1/inference.proto",
    ];
    tonic_prost_build::configure()
        .build_server(false)
        .compile_protos(&protos, &["../../protos"])?;
    for proto in protos {
        println!("cargo:rerun-if-changed={proto}");
    }
    Ok(())
}
