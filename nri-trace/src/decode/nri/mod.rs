//! Decoding of the NRI socket: two framing layers.
//!
//! 1. [`mux`]: the NRI multiplexer (`containerd/nri`,
//!    `pkg/net/multiplex/mux.go`). The trunk socket carries frames of an
//!    8-byte header `conn_id: u32 BE | payload_len: u32 BE` and the payload.
//!    conn_id 1 carries the Plugin service (runtime is the ttrpc client),
//!    conn_id 2 the Runtime service (plugin is the client).
//! 2. [`ttrpc`]: each mux conn_id carries its own ttrpc byte stream
//!    (`containerd/ttrpc`, `channel.go`, `PROTOCOL.md`): messages of a
//!    10-byte header `length: u32 BE | stream_id: u32 BE | type: u8 |
//!    flags: u8` and the payload. A ttrpc message can span several mux frames
//!    (ttrpc writes through a 4 KiB `bufio.Writer`) and several syscalls, so
//!    the mux payloads of one conn_id are concatenated and re-framed.
//!
//! [`ttrpc::MuxTtrpc`] chains both layers for one direction of one socket.
//! [`ttrpc_header`] holds what both layers know of the ttrpc header (the
//! multiplexer uses it as resynchronization evidence), so that the
//! multiplexer does not depend on the ttrpc decoder built on it.
//!
//! 3. [`message`]: the protobuf inside a ttrpc message — ttrpc's request /
//!    response envelope and the NRI API messages ([`proto`], generated with
//!    prost), typed by method.
//!
//! Both layers are "fixed header with a big-endian length, then payload":
//! the shared machinery (buffering, bounds, resynchronization) is
//! [`crate::decode::framer`]'s `Framer`, and each layer supplies a `Layout`
//! that says what a header looks like.

pub(crate) mod message;
pub(crate) mod mux;
pub(crate) mod proto;
pub(crate) mod ttrpc;
pub(crate) mod ttrpc_header;
