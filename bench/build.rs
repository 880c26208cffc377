//! Generates a tonic client for the subset of etcd's v3 API in `proto/etcd_kv.proto`, with a
//! vendored `protoc` (as `proto/build.rs` does), so a fresh machine needs no protobuf compiler.
//! The `etcd-client` crate would need a system `protoc` in its own build script.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // SAFETY: build scripts are single-threaded; nothing else reads the environment concurrently.
    unsafe { std::env::set_var("PROTOC", protoc) };
    tonic_prost_build::configure().build_server(false).compile_protos(&["proto/etcd_kv.proto"], &["proto"])?;
    println!("cargo:rerun-if-changed=proto");
    Ok(())
}
