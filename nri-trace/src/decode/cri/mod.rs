//! Decoding of the CRI socket: gRPC over HTTP/2 over a unix socket
//! (kubelet / crictl, grpc-go clients, talking to containerd's CRI server).
//!
//! Layers, from the bytes up:
//!
//! 1. [`frame`]: HTTP/2 framing (RFC 9113): the client connection preface,
//!    9-byte frame headers and per-type payloads, and the reassembly of
//!    header blocks (HEADERS + CONTINUATION*) into one raw HPACK block.
//! 2. [`hpack`]: HPACK (RFC 7541) decoding of those blocks, with one
//!    dynamic table per direction, usable after a mid-connection attach
//!    (unknown pre-attach slots are kept as unknowns that can be learned);
//!    [`huffman`]: its string coding (RFC 7541 §5.2, Appendix B).
//! 3. [`grpc`]: the gRPC layer (grpc-go `doc/PROTOCOL-HTTP2.md`):
//!    Length-Prefixed-Message reassembly from DATA payloads, request header
//!    and trailer fields (`:path`, `grpc-timeout`, `grpc-status`,
//!    `grpc-message`), status code names.
//!
//! 4. [`connection`]: both directions of one connection together (SETTINGS
//!    of one side configure the decoders of the other; HPACK tables reset
//!    when the connection is seen from its preface).
//! 5. [`message`]: CRI protobuf messages (k8s-cri's `runtime.v1` types):
//!    the method table, identities, and the shape test that recovers a
//!    method hidden in an unknown HPACK slot ([`leaf_count`]: that
//!    test's score of a decoded message).
//!
//! Each decoder sees one direction of one connection; what one direction
//! learns about the other (the peer's SETTINGS_MAX_FRAME_SIZE and
//! SETTINGS_HEADER_TABLE_SIZE) is passed in by a later stage through
//! setters.

pub(crate) mod connection;
pub(crate) mod cri_api;
pub(crate) mod frame;
pub(crate) mod grpc;
pub(crate) mod hpack;
pub(crate) mod huffman;
pub(crate) mod leaf_count;
pub(crate) mod message;
