//! Compiles the protobuf APIs the lab speaks into Rust types.
//!
//! `protox` is a pure-Rust protobuf compiler, so no `protoc` is needed: it
//! parses the .proto files into a FileDescriptorSet, which prost-build then
//! turns into code in OUT_DIR (one file per protobuf package).
//!
//! - `../proto/nri/v1alpha1/api.proto` -> `nri.pkg.api.v1alpha1.rs`
//!   (`nri_api` module; see that file's header for its source).

fn main() {
    let protos = ["nri/v1alpha1/api.proto"];
    for p in protos {
        println!("cargo:rerun-if-changed=../proto/{p}");
    }
    let fds = protox::compile(protos, ["../proto"]).expect("protox: compiling the .proto files");
    prost_build::Config::new()
        .compile_fds(fds)
        .expect("prost-build: generating Rust code");
}
