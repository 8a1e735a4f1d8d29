//! Triton's gRPC protocol and model config (`inference` package: `proto/grpc_service.proto`,
//! `proto/model_config.proto`), generated once with tonic's client for everything that speaks to
//! a server: the worker's scenarios and the driver's probes and repository reads.
//!
//! [`FILE_DESCRIPTOR_SET`] holds the same protos' descriptors, for code that reads or writes
//! messages by name (a model's `config.pbtxt` in protobuf text format).

mod generated {
    #![allow(clippy::all, missing_docs)]
    tonic::include_proto!("inference");
}

pub use generated::*;

/// The encoded `google.protobuf.FileDescriptorSet` of both protos (and what they import).
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/triton_descriptors.bin"));

/// Triton's gRPC service, as its `.proto` names it.
pub const GRPC_SERVICE: &str = "inference.GRPCInferenceService";

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn the_descriptors_describe_the_service_and_the_model_config() {
        let set = prost_types::FileDescriptorSet::decode(FILE_DESCRIPTOR_SET).expect("decodes");
        let files: Vec<&str> = set.file.iter().filter_map(|f| f.name.as_deref()).collect();
        assert!(files.contains(&"grpc_service.proto"), "{files:?}");
        assert!(files.contains(&"model_config.proto"), "{files:?}");
        let service = set
            .file
            .iter()
            .flat_map(|f| f.service.iter().map(move |s| (f.package(), s)))
            .find(|(package, s)| format!("{package}.{}", s.name()) == GRPC_SERVICE)
            .expect("the inference service")
            .1;
        let methods: Vec<&str> = service.method.iter().map(|m| m.name()).collect();
        for m in [
            "ServerLive",
            "ServerReady",
            "ModelConfig",
            "RepositoryIndex",
            "ModelStreamInfer",
        ] {
            assert!(methods.contains(&m), "{m} in {methods:?}");
        }
        let model_config = set
            .file
            .iter()
            .flat_map(|f| &f.message_type)
            .find(|m| m.name() == "ModelConfig")
            .expect("ModelConfig");
        let fields: Vec<&str> = model_config.field.iter().map(|f| f.name()).collect();
        for f in [
            "max_batch_size",
            "instance_group",
            "dynamic_batching",
            "sequence_batching",
        ] {
            assert!(fields.contains(&f), "{f} in {fields:?}");
        }
    }

    #[test]
    fn a_generated_message_round_trips() {
        let config = ModelConfig {
            name: "add_sub".into(),
            max_batch_size: 8,
            instance_group: vec![ModelInstanceGroup {
                count: 2,
                ..Default::default()
            }],
            ..Default::default()
        };
        let back = ModelConfig::decode(config.encode_to_vec().as_slice()).unwrap();
        assert_eq!(back, config);
    }
}
