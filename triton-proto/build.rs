//! Compiles Triton's protos with protox (pure Rust), so no system `protoc` is needed, and keeps
//! their descriptors beside the generated code.

use prost::Message as _;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = ["proto/grpc_service.proto", "proto/model_config.proto"];
    for f in files {
        println!("cargo:rerun-if-changed={f}");
    }
    let descriptors = protox::compile(files, ["proto"])?;
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out.join("triton_descriptors.bin"),
        descriptors.encode_to_vec(),
    )?;
    tonic_prost_build::configure()
        .build_server(false)
        .build_client(true)
        // Tensor payloads as `bytes::Bytes`: a prepared request is cloned per send without
        // copying its data, and responses are decoded without copying.
        .bytes(".inference")
        .compile_fds(descriptors)?;
    Ok(())
}
