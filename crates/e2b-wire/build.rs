//! Compiles the vendored envd protos into Rust: `protox` parses them (no system `protoc`),
//! `prost-build` writes the message types, `pbjson-build` their proto3-JSON serde impls.

const PROTOS: [&str; 2] = ["process/process.proto", "filesystem/filesystem.proto"];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    // protox ships google/protobuf/*.proto itself, so `import "google/protobuf/timestamp.proto"`
    // resolves without any include path of ours.
    let descriptors = protox::compile(PROTOS, ["proto"])?;
    let descriptor_bytes = prost::Message::encode_to_vec(&descriptors);

    prost_build::Config::new()
        // The only well-known type the protos use; ours has the JSON form the SDKs parse.
        .extern_path(".google.protobuf.Timestamp", "crate::timestamp::Timestamp")
        .compile_fds(descriptors)?;

    pbjson_build::Builder::new()
        .register_descriptors(&descriptor_bytes)?
        // What connect-go's JSON codec (envd's) does: protojson with DiscardUnknown, so a newer
        // SDK's extra fields and enum names are skipped, never a decode error.
        .ignore_unknown_fields()
        .ignore_unknown_enum_variants()
        .build(&[".process", ".filesystem"])?;
    Ok(())
}
