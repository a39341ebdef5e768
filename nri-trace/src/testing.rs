//! The decoders' insides, for the fuzz targets (fuzz/), the benchmarks
//! (benches/) and the integration tests (tests/): only with the `testing`
//! feature, so that the library's own surface stays what the binary and a
//! reader of the stages need, and the compiler's dead-code and
//! `unreachable_pub` lints see everything else (issue 35; aya keeps its
//! modules private and re-exports from lib.rs the same way).
//!
//! Each stage keeps these `pub(crate)`; this module names the pieces that
//! outside harnesses drive directly, one decoder layer at a time.

/// The CRI decoder's layers (HTTP/2 frames, HPACK, gRPC messages, the
/// CRI protobuf messages), as decode/cri/ has them.
pub mod cri {
    /// HTTP/2 over one connection: both directions, streams and headers.
    pub mod connection {
        pub use crate::decode::cri::connection::{ConnectionStats, H2Connection, H2Event, Side};
    }
    /// HTTP/2 framing (RFC 9113 §4).
    pub mod frame {
        pub use crate::decode::cri::frame::{
            parse_frame, BlockError, Frame, FrameConfigError, FrameDecoder, FrameError, FrameEvent,
            FrameHeader, FrameType, HeaderBlock, PrioritySpec, HEADER_LEN, SETTINGS_MAX_FRAME_SIZE,
        };
    }
    /// gRPC's length-prefixed messages on a stream.
    pub mod grpc {
        pub use crate::decode::cri::grpc::{
            GrpcMessage, MessageError, MessageEvent, MessageReassembler,
        };
    }
    /// HPACK (RFC 7541), fresh or attached mid-connection.
    pub mod hpack {
        pub use crate::decode::cri::{
            hpack::{
                BlockFlags, Decoder, Field, HeaderBlock, HpackError, LearnError, Limits, Slot,
                TABLE_SIZE_CAP,
            },
            huffman::HuffmanError,
        };
    }
    /// The CRI's protobuf messages and the method-shape inference.
    pub mod message {
        pub use crate::decode::cri::message::{
            candidates, decode_request, decode_response, request_id, ContainerSeen, ContainerState,
            CriMethod, MessageDecodeError, RequestInfo, ResponseInfo, SandboxSeen, SandboxState,
        };
    }
}

/// The NRI decoder's layers (the multiplexer, ttrpc, the NRI protobuf
/// messages), as decode/nri/ has them.
pub mod nri {
    /// NRI's protobuf messages.
    pub mod message {
        pub use crate::decode::nri::message::{
            decode_request, decode_response, Event, MessageError, Method, RequestBody,
            ResponseBody, Status, Subject, WireRequest, WireResponse, PLUGIN_SERVICE,
            RUNTIME_SERVICE,
        };
    }
    /// The connection multiplexer under ttrpc.
    pub mod mux {
        pub use crate::decode::nri::mux::{MuxConfigError, MuxDecoder, MuxEvent};
    }
    /// ttrpc's frames, plain or over the multiplexer.
    pub mod ttrpc {
        pub use crate::decode::nri::ttrpc::{
            MessageType, MuxTtrpc, TtrpcDecoder, TtrpcEvent, TtrpcMessage,
        };
    }
}

/// Capture's pieces that the fuzz targets and the tests drive alone: the
/// ring entries' format, the connection tracker, the BTF reader, and the
/// /proc lookups the lab tests compare with.
pub mod capture {
    /// The BTF reader (the kernel offsets the probes need).
    pub mod btf {
        pub use crate::capture::btf::{BtfError, BtfIndex};
    }
    /// What /proc says of processes and their sockets.
    pub mod discovery {
        pub use crate::capture::discovery::{
            peer_cred, process_cgroup, process_info, socket_fds_of, PeerCred, ProcessInfo,
        };
    }
    /// The probes' ring entries (nri-trace-common's header and payload).
    pub mod ring_entry {
        pub use crate::capture::ring_entry::{encode, parse, RingEntry, RingEntryError};
    }
    /// Connection tracking: ring entries to connections and byte streams.
    pub mod tracker {
        pub use crate::capture::tracker::{BoundListener, ConnFacts, ConnTracker, NewConn};
    }
}

/// The NRI assembler alone: decoded ttrpc messages of one connection to
/// calls (the benches time it apart from the decoder; the wire-version
/// tests feed it the ttrpc crate's frames).
pub use crate::assemble::nri::{AssemblerStats, NriCallAssembler};
