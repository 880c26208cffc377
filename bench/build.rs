//! Generates a tonic client for the subset of etcd's v3 API in `proto/etcd_kv.proto`, with a
//! vendored `protoc` (as `proto/build.rs` does), so a fresh machine needs no protobuf compiler.
//! The `etcd-client` crate would need a system `protoc` in its own build script.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut config = prost_build::Config::new();
    // Given to prost-build directly rather than through $PROTOC: setting the environment is unsafe.
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    tonic_prost_build::configure().build_server(false).compile_with_config(
        config,
        &["proto/etcd_kv.proto"],
        &["proto"],
    )?;
    println!("cargo:rerun-if-changed=proto");
    Ok(())
}
