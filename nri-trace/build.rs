//! Embeds the eBPF object built by `cargo xtask build` (Debian's rustc-web,
//! bpfel-unknown-none) into the nri-trace binary.
//!
//! The object comes from `NRI_TRACE_EBPF_OBJ`, else from the default xtask
//! output path. When neither exists (e.g. `cargo check` or unit tests on a
//! machine without the eBPF toolchain) an empty object is embedded and
//! loading fails at run time with a message that names the fix.
//!
//! It also compiles the protobuf schemas the NRI decoder needs into Rust
//! types in OUT_DIR (protox parses the .proto files, so no `protoc`):
//! `../proto/nri/v1alpha1/api.proto` -> `nri.pkg.api.v1alpha1.rs` and
//! `../proto/ttrpc/ttrpc.proto` -> `ttrpc.rs`.
use std::{env, fs, path::PathBuf};

fn main() {
    embed_ebpf();
    let protos = ["nri/v1alpha1/api.proto", "ttrpc/ttrpc.proto"];
    for p in protos {
        println!("cargo:rerun-if-changed=../proto/{p}");
    }
    let fds = protox::compile(protos, ["../proto"]).expect("protox: compiling the .proto files");
    prost_build::Config::new()
        .compile_fds(fds)
        .expect("prost-build: generating Rust code");
}

fn embed_ebpf() {
    println!("cargo:rerun-if-env-changed=NRI_TRACE_EBPF_OBJ");
    let out = PathBuf::from(env::var("OUT_DIR").unwrap()).join("nri-trace-ebpf.o");
    let default = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap())
        .join("../target/bpf/bpfel-unknown-none/release/nri-trace-ebpf");
    let src = env::var_os("NRI_TRACE_EBPF_OBJ").map_or(default, PathBuf::from);
    println!("cargo:rerun-if-changed={}", src.display());
    if let Ok(bytes) = fs::read(&src) {
        fs::write(&out, bytes).unwrap()
    } else {
        println!(
            "cargo:warning=eBPF object {} not found: embedding none (run `cargo xtask build`)",
            src.display()
        );
        fs::write(&out, []).unwrap();
    }
}
