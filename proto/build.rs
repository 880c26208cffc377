//! Generates the tonic/prost code for `proto/*.proto` with a vendored `protoc`, so a fresh machine
//! needs no system protobuf compiler.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut config = prost_build::Config::new();
    // Given to prost-build directly rather than through $PROTOC: setting the environment is unsafe.
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    // BSON payloads decode to `Bytes` views of the received frame: no copy on the hot path.
    config.bytes(["."]);
    tonic_prost_build::configure().compile_with_config(
        config,
        &["proto/shard.proto", "proto/config.proto"],
        &["proto"],
    )?;
    println!("cargo:rerun-if-changed=proto");
    Ok(())
}
