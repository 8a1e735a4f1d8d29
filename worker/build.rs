//! Compiles Triton's protos with protox (pure Rust), so no system `protoc` is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = ["proto/grpc_service.proto", "proto/model_config.proto"];
    for f in files {
        println!("cargo:rerun-if-changed={f}");
    }
    let descriptors = protox::compile(files, ["proto"])?;
    tonic_prost_build::configure()
        .build_server(false)
        .build_client(true)
        // Tensor payloads as `bytes::Bytes`: a prepared request is cloned per send without
        // copying its data, and responses are decoded without copying.
        .bytes(".inference")
        .compile_fds(descriptors)?;
    Ok(())
}
