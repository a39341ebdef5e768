//! Peers of unix sockets, from NETLINK_SOCK_DIAG.
//!
//! /proc/net/unix has no peer column, and SO_PEERCRED of a socketpair() end names the process
//! that *created* the pair (net/unix/af_unix.c `unix_socketpair` calls `init_peercred` on both
//! ends): for the pair containerd creates to launch an NRI plugin, that is containerd itself,
//! not the plugin it handed the other end to. The sock_diag dump of AF_UNIX sockets does report
//! the inode of each connected socket's peer (net/unix/diag.c `sk_diag_dump_peer`, attribute
//! UNIX_DIAG_PEER); whoever holds that inode in /proc/<pid>/fd is the peer process.
//!
//! The messages are netlink-packet-sock-diag's (`UnixRequest`, `UnixResponse` and its
//! `Nla::Peer`) in netlink-packet-core's framing, sent and received on a netlink-sys socket.

use std::collections::HashMap;
use std::io;
use std::os::fd::AsRawFd;
use std::time::Duration;

use netlink_packet_core::{
    NetlinkBuffer, NetlinkHeader, NetlinkMessage, NetlinkPayload, NLMSG_DONE, NLMSG_ERROR,
    NLM_F_DUMP, NLM_F_DUMP_INTR, NLM_F_REQUEST,
};
use netlink_packet_sock_diag::{
    unix::{ShowFlags, StateFlags, UnixRequest},
    SockDiagMessage, AF_UNIX, SOCK_DIAG_BY_FAMILY,
};
use netlink_sys::{protocols::NETLINK_SOCK_DIAG, Socket, SocketAddr};

use super::DiscoveryError;

/// `sizeof(struct nlmsghdr)` (include/uapi/linux/netlink.h): a datagram's tail shorter than
/// this is no message and is ignored, as the kernel's NLMSG_OK does.
const NLMSG_HDRLEN: usize = 16;
/// Receive buffer for one datagram. netlink_dump (net/netlink/af_netlink.c) fills skbs of at
/// most 32 KiB; a larger datagram is detected with MSG_TRUNC and refused, never half-parsed.
const DIAG_RECV_BUF: usize = 64 * 1024;
/// Bound on the datagrams of one dump, so that nothing can keep us looping. One socket takes
/// 40 bytes (header, unix_diag_msg, peer attribute) and a datagram at least a page, so this
/// bound is millions of sockets.
const DIAG_MAX_DATAGRAMS: usize = 1 << 16;
/// How long one recv() waits for the kernel before the dump is given up.
const DIAG_RECV_TIMEOUT: Duration = Duration::from_secs(5);
/// Sequence number of our dump request ("nrit"); each dump uses a fresh socket.
const DIAG_SEQ: u32 = 0x6e72_6974;

/// A malformed-reply error.
fn bad_reply(reason: String) -> DiscoveryError {
    DiscoveryError::SockDiagReply { reason }
}

/// The request for every AF_UNIX socket with its peer (`inode` `None`: NLM_F_DUMP), or for
/// the one socket `inode` (no NLM_F_DUMP: net/unix/diag.c `unix_diag_get_exact`).
fn unix_diag_request(seq: u32, inode: Option<u32>) -> Vec<u8> {
    let mut header = NetlinkHeader::default();
    header.flags = match inode {
        None => NLM_F_REQUEST | NLM_F_DUMP,
        Some(_) => NLM_F_REQUEST,
    };
    header.sequence_number = seq;
    let request = UnixRequest {
        // All states: unix_diag_dump tests `udiag_states & (1 << sk->sk_state)`. A socket has
        // a peer only when connected, so asking for TCP_ESTABLISHED only would do for stream
        // sockets, but a connected datagram socket stays TCP_CLOSE on older kernels and still
        // has a peer. The crate names only ESTABLISHED and LISTEN; from_bits_retain keeps
        // the other bits.
        state_flags: StateFlags::from_bits_retain(u32::MAX),
        // udiag_ino: ignored by a dump.
        inode: inode.unwrap_or(0),
        show_flags: ShowFlags::PEER,
        // udiag_cookie: ignored by a dump; for one socket INET_DIAG_NOCOOKIE (all ones),
        // which `sock_diag_check_cookie` accepts for any socket.
        cookie: if inode.is_some() { [0xff; 8] } else { [0; 8] },
    };
    let mut msg = NetlinkMessage::new(header, SockDiagMessage::UnixRequest(request).into());
    // Sets the length and the message type (SOCK_DIAG_BY_FAMILY).
    msg.finalize();
    let mut buf = vec![0u8; msg.buffer_len()];
    msg.serialize(&mut buf);
    buf
}

/// Where a sock_diag dump stands after one datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DumpStep {
    /// More datagrams follow.
    More,
    /// NLMSG_DONE was seen: the dump is complete.
    Done,
}

/// Parses one datagram of a unix sock_diag dump into `peers` (socket inode -> peer inode).
///
/// netlink-packet-core checks each message's length against the datagram and decodes
/// NLMSG_DONE/NLMSG_ERROR, netlink-packet-sock-diag the `unix_diag_msg` and its attributes; a
/// message either refuses is an error (its neighbours cannot be trusted either). Messages of
/// other sequence numbers, replies of other families, NLMSG_NOOP and unknown types carry
/// nothing for us and are skipped undecoded; trailing bytes too short for a header are ignored
/// (the NLMSG_OK rule of the kernel's own parsers).
fn parse_unix_diag_datagram(
    buf: &[u8],
    seq: u32,
    peers: &mut HashMap<u64, u64>,
) -> Result<DumpStep, DiscoveryError> {
    let mut off = 0usize;
    while buf.len().saturating_sub(off) >= NLMSG_HDRLEN {
        let at = off;
        let rest = &buf[at..];
        let frame = NetlinkBuffer::new_checked(rest)
            .map_err(|e| bad_reply(format!("netlink message at byte {at}: {e}")))?;
        // new_checked made sure that the length is at least a header and fits the datagram.
        let len = usize::try_from(frame.length()).unwrap_or(usize::MAX);
        let (kind, msg_seq) = (frame.message_type(), frame.sequence_number());
        let family = frame.payload().first().copied();
        // NLMSG_ALIGN: the next message starts on a 4-byte boundary.
        off = at.saturating_add(len.saturating_add(3) & !3);
        if msg_seq != seq {
            continue;
        }
        match kind {
            NLMSG_DONE | NLMSG_ERROR => {}
            SOCK_DIAG_BY_FAMILY if family == Some(AF_UNIX) => {}
            _ => continue,
        }
        let msg = NetlinkMessage::<SockDiagMessage>::deserialize(&rest[..len.min(rest.len())])
            .map_err(|e| bad_reply(format!("netlink message at byte {at}: {e}")))?;
        if msg.header.flags & NLM_F_DUMP_INTR != 0 {
            // unix_diag does not set it today; if it did, a socket may be missing or doubled.
            log::debug!("sock_diag dump was interrupted by a concurrent change");
        }
        match msg.payload {
            NetlinkPayload::Done(done) => {
                // Since Linux 4.x the payload is the dump's final errno (netlink_dump_done);
                // older kernels send no payload, which the crate reads as 0.
                return if done.code < 0 {
                    Err(DiscoveryError::SockDiag {
                        error: io::Error::from_raw_os_error(done.code.saturating_neg()),
                    })
                } else {
                    Ok(DumpStep::Done)
                };
            }
            // struct nlmsgerr: a negative errno, or 0 for an ACK (skipped).
            NetlinkPayload::Error(e) => match e.raw_code() {
                0 => {}
                code if code < 0 => {
                    return Err(DiscoveryError::SockDiag {
                        error: io::Error::from_raw_os_error(code.saturating_neg()),
                    })
                }
                code => return Err(bad_reply(format!("NLMSG_ERROR with positive error {code}"))),
            },
            NetlinkPayload::InnerMessage(SockDiagMessage::UnixResponse(r)) => {
                // Inode 0: a peer already released (sock_i_ino of an orphaned sock is 0);
                // nothing holds it.
                let inode = r.header.inode;
                if let Some(p) = r.peer().filter(|&p| p != 0 && inode != 0) {
                    peers.insert(u64::from(inode), u64::from(p));
                }
            }
            _ => {}
        }
    }
    Ok(DumpStep::More)
}

/// A NETLINK_SOCK_DIAG socket with a receive timeout, for one request.
fn diag_socket() -> Result<Socket, DiscoveryError> {
    let sys = |error: io::Error| DiscoveryError::SockDiag { error };
    let sock = Socket::new(NETLINK_SOCK_DIAG).map_err(sys)?;
    // netlink-sys has no receive timeout: SO_RCVTIMEO by hand.
    let timeout = libc::timeval {
        tv_sec: DIAG_RECV_TIMEOUT.as_secs() as libc::time_t,
        tv_usec: 0,
    };
    // SAFETY: `timeout` is a live timeval of the size passed; the socket is open.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            std::ptr::addr_of!(timeout).cast::<libc::c_void>(),
            size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(sys(io::Error::last_os_error()));
    }
    Ok(sock)
}

/// Sends one request to the kernel (port id 0) on a sock_diag socket.
fn diag_send(sock: &Socket, req: &[u8]) -> Result<(), DiscoveryError> {
    let sys = |error: io::Error| DiscoveryError::SockDiag { error };
    let sent = sock.send_to(req, &SocketAddr::new(0, 0), 0).map_err(sys)?;
    if sent != req.len() {
        return Err(sys(io::Error::new(
            io::ErrorKind::WriteZero,
            format!("short send of the request ({sent} of {} bytes)", req.len()),
        )));
    }
    Ok(())
}

/// Receives one datagram from the kernel into `buf`; returns its length, or `None` for a
/// datagram that did not come from the kernel (to be ignored). Retries on EINTR.
fn diag_recv(sock: &Socket, buf: &mut [u8]) -> Result<Option<usize>, DiscoveryError> {
    let sys = |error: io::Error| DiscoveryError::SockDiag { error };
    loop {
        // MSG_TRUNC: the return value is the datagram's real length even when it did not fit
        // (net/netlink/af_netlink.c `netlink_recvmsg`), so truncation is detected.
        let mut space: &mut [u8] = &mut buf[..];
        let (n, from) = match sock.recv_from(&mut space, libc::MSG_TRUNC) {
            Ok(r) => r,
            Err(e) => match e.kind() {
                io::ErrorKind::Interrupted => continue,
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
                    return Err(sys(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("no reply from the kernel within {DIAG_RECV_TIMEOUT:?}"),
                    )))
                }
                _ => return Err(sys(e)),
            },
        };
        if n > buf.len() {
            return Err(bad_reply(format!(
                "datagram of {n} bytes does not fit the {}-byte buffer",
                buf.len()
            )));
        }
        // Only the kernel (port id 0) answers; ignore anything else sent to our port.
        return Ok((from.port_number() == 0).then_some(n));
    }
}

/// Maps the inode of every connected unix socket of our network namespace to its peer's inode.
///
/// One NETLINK_SOCK_DIAG dump (net/unix/diag.c). Needs no privilege (`ss -x` works as any
/// user) but needs CONFIG_UNIX_DIAG, usually the module unix_diag that the kernel loads on
/// demand. Sees our network namespace only. Socket inodes are 32-bit in the dump
/// (`udiag_ino`), as they are in the kernel (`get_next_ino`).
pub(crate) fn unix_peers() -> Result<HashMap<u64, u64>, DiscoveryError> {
    let sock = diag_socket()?;
    diag_send(&sock, &unix_diag_request(DIAG_SEQ, None))?;
    let mut buf = vec![0u8; DIAG_RECV_BUF];
    let mut peers = HashMap::new();
    for _ in 0..DIAG_MAX_DATAGRAMS {
        let Some(n) = diag_recv(&sock, &mut buf)? else {
            continue;
        };
        if parse_unix_diag_datagram(&buf[..n], DIAG_SEQ, &mut peers)? == DumpStep::Done {
            return Ok(peers);
        }
    }
    Err(bad_reply(format!(
        "no NLMSG_DONE after {DIAG_MAX_DATAGRAMS} datagrams"
    )))
}

/// The inode of the peer of unix socket `inode`, asked of the kernel for that one socket.
///
/// Much cheaper than [`unix_peers`] on a host with many sockets: the kernel looks the socket
/// up and answers one message. `Ok(None)`: no such socket in our network namespace (closed,
/// or another netns), or it has no peer (not connected, or the peer is gone). Same
/// requirements as [`unix_peers`], but a kernel without unix_diag answers ENOENT here too,
/// so it also gives `Ok(None)`: call [`unix_peers`] once to tell that case apart.
pub(crate) fn unix_peer_of(inode: u64) -> Result<Option<u64>, DiscoveryError> {
    let Ok(ino) = u32::try_from(inode) else {
        return Ok(None); // sock_diag inodes are 32-bit: not a socket it knows
    };
    if ino == 0 {
        return Ok(None);
    }
    let sock = diag_socket()?;
    diag_send(&sock, &unix_diag_request(DIAG_SEQ, Some(ino)))?;
    // One message (or an NLMSG_ERROR) answers; a page is plenty for it.
    let mut buf = vec![0u8; 8192];
    for _ in 0..16 {
        let Some(n) = diag_recv(&sock, &mut buf)? else {
            continue;
        };
        let mut peers = HashMap::new();
        return match parse_unix_diag_datagram(&buf[..n], DIAG_SEQ, &mut peers) {
            Ok(_) => Ok(peers.get(&inode).copied()),
            Err(DiscoveryError::SockDiag { error })
                if error.raw_os_error() == Some(libc::ENOENT) =>
            {
                Ok(None)
            }
            Err(e) => Err(e),
        };
    }
    Err(bad_reply(
        "no reply from the kernel to a sock_diag query".into(),
    ))
}

#[cfg(test)]
mod tests {
    use std::os::unix::net::{UnixListener, UnixStream};

    use proptest::prelude::*;

    use super::*;
    use crate::capture::discovery::sockets::{fd_socket_inode, socket_fds_of};
    use crate::capture::discovery::test_support::{inode_of, TempDir};

    // The datagrams below are built byte by byte, as the kernel lays them out, so that the
    // crates' decoding is tested against the kernel's format and not against their own
    // encoder (and so that malformed ones can be made).

    /// `UNIX_DIAG_PEER` (include/uapi/linux/unix_diag.h).
    const UNIX_DIAG_PEER: u16 = 2;
    /// `UDIAG_SHOW_PEER` (include/uapi/linux/unix_diag.h).
    const UDIAG_SHOW_PEER: u32 = 1 << UNIX_DIAG_PEER;
    /// `sizeof(struct nlattr)`.
    const NLA_HDRLEN: usize = 4;

    /// Rounds up to the 4-byte alignment of netlink messages and attributes.
    fn nl_align(len: usize) -> usize {
        (len + 3) & !3
    }

    /// Native-endian u16 at `at`.
    fn ne_u16(b: &[u8], at: usize) -> u16 {
        u16::from_ne_bytes(b[at..at + 2].try_into().expect("2 bytes"))
    }

    /// Native-endian u32 at `at`.
    fn ne_u32(b: &[u8], at: usize) -> u32 {
        u32::from_ne_bytes(b[at..at + 4].try_into().expect("4 bytes"))
    }

    /// One netlink message: header with `kind`, `flags`, `seq`, then `payload`, padded to 4.
    fn nlmsg(kind: u16, flags: u16, seq: u32, payload: &[u8]) -> Vec<u8> {
        let len = u32::try_from(NLMSG_HDRLEN + payload.len()).expect("len");
        let mut m = Vec::new();
        m.extend_from_slice(&len.to_ne_bytes());
        m.extend_from_slice(&kind.to_ne_bytes());
        m.extend_from_slice(&flags.to_ne_bytes());
        m.extend_from_slice(&seq.to_ne_bytes());
        m.extend_from_slice(&4242u32.to_ne_bytes());
        m.extend_from_slice(payload);
        m.resize(nl_align(m.len()), 0);
        m
    }

    /// One attribute, padded to 4.
    fn nla(kind: u16, payload: &[u8]) -> Vec<u8> {
        let len = u16::try_from(NLA_HDRLEN + payload.len()).expect("len");
        let mut a = Vec::new();
        a.extend_from_slice(&len.to_ne_bytes());
        a.extend_from_slice(&kind.to_ne_bytes());
        a.extend_from_slice(payload);
        a.resize(nl_align(a.len()), 0);
        a
    }

    /// A `unix_diag_msg` payload for socket `inode` (stream, established) with `attrs`.
    fn diag_msg(inode: u32, attrs: &[Vec<u8>]) -> Vec<u8> {
        let mut m = vec![libc::AF_UNIX as u8, 1, 1, 0];
        m.extend_from_slice(&inode.to_ne_bytes());
        m.extend_from_slice(&[0xff; 8]); // cookie
        for a in attrs {
            m.extend_from_slice(a);
        }
        m
    }

    /// A SOCK_DIAG_BY_FAMILY message of our sequence for `inode` with peer `peer`.
    fn diag(inode: u32, peer: Option<u32>) -> Vec<u8> {
        let attrs: Vec<Vec<u8>> = peer
            .map(|p| nla(UNIX_DIAG_PEER, &p.to_ne_bytes()))
            .into_iter()
            .collect();
        nlmsg(SOCK_DIAG_BY_FAMILY, 2, DIAG_SEQ, &diag_msg(inode, &attrs))
    }

    /// NLMSG_DONE carrying `errno` (the 4-byte payload of current kernels).
    fn done(errno: i32) -> Vec<u8> {
        nlmsg(libc::NLMSG_DONE as u16, 2, DIAG_SEQ, &errno.to_ne_bytes())
    }

    fn parse(buf: &[u8]) -> (Result<DumpStep, DiscoveryError>, HashMap<u64, u64>) {
        let mut peers = HashMap::new();
        let r = parse_unix_diag_datagram(buf, DIAG_SEQ, &mut peers);
        (r, peers)
    }

    /// The request the crates build is exactly `nlmsghdr` + `unix_diag_req` as include/uapi
    /// lays them out, asking for every state (not only the two the crate names).
    #[test]
    fn sock_diag_request_layout() {
        let r = unix_diag_request(7, None);
        assert_eq!(r.len(), 40);
        assert_eq!(ne_u32(&r, 0), 40);
        assert_eq!(ne_u16(&r, 4), 20); // SOCK_DIAG_BY_FAMILY
        assert_eq!(ne_u16(&r, 6), 0x301); // NLM_F_REQUEST | NLM_F_DUMP
        assert_eq!(ne_u32(&r, 8), 7);
        assert_eq!(ne_u32(&r, 12), 0);
        assert_eq!(&r[16..20], &[1, 0, 0, 0]); // AF_UNIX, protocol 0, pad
        assert_eq!(ne_u32(&r, 20), u32::MAX); // every state
        assert_eq!(ne_u32(&r, 24), 0); // udiag_ino
        assert_eq!(ne_u32(&r, 28), UDIAG_SHOW_PEER);
        assert_eq!(&r[32..40], &[0; 8]); // cookie
    }

    /// The one-socket query: no NLM_F_DUMP, the inode, and the no-cookie value.
    #[test]
    fn sock_diag_exact_request_layout() {
        let r = unix_diag_request(7, Some(0x1234_5678));
        assert_eq!(r.len(), 40);
        assert_eq!(ne_u32(&r, 0), 40);
        assert_eq!(ne_u16(&r, 4), 20);
        assert_eq!(ne_u16(&r, 6), 0x1); // NLM_F_REQUEST only
        assert_eq!(ne_u32(&r, 8), 7);
        assert_eq!(&r[16..20], &[1, 0, 0, 0]);
        assert_eq!(ne_u32(&r, 24), 0x1234_5678);
        assert_eq!(ne_u32(&r, 28), UDIAG_SHOW_PEER);
        assert_eq!(&r[32..40], &[0xff; 8]); // INET_DIAG_NOCOOKIE twice
    }

    /// Several sockets in one datagram, then a second datagram with NLMSG_DONE.
    #[test]
    fn sock_diag_parse_dump() {
        let mut buf = diag(10, Some(11));
        buf.extend(diag(11, Some(10)));
        buf.extend(diag(12, None)); // a listener: no peer
        buf.extend(diag(13, Some(0))); // peer already released
                                       // Unknown attributes around the peer, a nested-flagged peer type.
        buf.extend(nlmsg(
            SOCK_DIAG_BY_FAMILY,
            2,
            DIAG_SEQ,
            &diag_msg(
                14,
                &[
                    nla(7, &[1, 2, 3]),
                    nla(UNIX_DIAG_PEER | 0x8000, &15u32.to_ne_bytes()),
                    nla(42, &[]),
                ],
            ),
        ));
        let (r, peers) = parse(&buf);
        assert_eq!(r.expect("parse"), DumpStep::More);
        let want: HashMap<u64, u64> = [(10, 11), (11, 10), (14, 15)].into();
        assert_eq!(peers, want);

        let mut buf = diag(20, Some(21));
        buf.extend(done(0));
        buf.extend(diag(30, Some(31))); // after DONE: not read
        let (r, peers) = parse(&buf);
        assert_eq!(r.expect("parse"), DumpStep::Done);
        assert_eq!(peers, [(20, 21)].into());

        // Old kernels: NLMSG_DONE without payload; an ACK (error 0) is skipped.
        let mut buf = nlmsg(libc::NLMSG_ERROR as u16, 0, DIAG_SEQ, &0i32.to_ne_bytes());
        buf.extend(nlmsg(libc::NLMSG_DONE as u16, 2, DIAG_SEQ, &[]));
        assert_eq!(parse(&buf).0.expect("parse"), DumpStep::Done);
        // An empty datagram, and a NOOP: nothing, more to come.
        assert_eq!(parse(&[]).0.expect("empty"), DumpStep::More);
        let noop = nlmsg(libc::NLMSG_NOOP as u16, 0, DIAG_SEQ, &[]);
        assert_eq!(parse(&noop).0.expect("noop"), DumpStep::More);
    }

    /// Messages of other sequences and sockets of other families are skipped; a trailing stub
    /// shorter than a header is ignored.
    #[test]
    fn sock_diag_parse_skips() {
        let mut buf = nlmsg(
            SOCK_DIAG_BY_FAMILY,
            2,
            DIAG_SEQ + 1,
            &diag_msg(1, &[nla(UNIX_DIAG_PEER, &2u32.to_ne_bytes())]),
        );
        let mut inet = diag_msg(3, &[nla(UNIX_DIAG_PEER, &4u32.to_ne_bytes())]);
        inet[0] = libc::AF_INET as u8;
        buf.extend(nlmsg(SOCK_DIAG_BY_FAMILY, 2, DIAG_SEQ, &inet));
        buf.extend(nlmsg(libc::NLMSG_DONE as u16, 2, DIAG_SEQ + 1, &[]));
        buf.extend(diag(5, Some(6)));
        buf.extend([0u8; 15]);
        let (r, peers) = parse(&buf);
        assert_eq!(r.expect("parse"), DumpStep::More);
        assert_eq!(peers, [(5, 6)].into());
    }

    /// Kernel errors become SockDiag with the errno.
    #[test]
    fn sock_diag_parse_kernel_errors() {
        let err = nlmsg(
            libc::NLMSG_ERROR as u16,
            0,
            DIAG_SEQ,
            &(-libc::ENOENT).to_ne_bytes(),
        );
        match parse(&err).0 {
            Err(DiscoveryError::SockDiag { error }) => {
                assert_eq!(error.raw_os_error(), Some(libc::ENOENT))
            }
            other => panic!("expected SockDiag, got {other:?}"),
        }
        let e = DiscoveryError::SockDiag {
            error: io::Error::from_raw_os_error(libc::ENOENT),
        };
        assert!(e.to_string().contains("modprobe unix_diag"), "{e}");
        match parse(&done(-libc::EINTR)).0 {
            Err(DiscoveryError::SockDiag { error }) => {
                assert_eq!(error.raw_os_error(), Some(libc::EINTR))
            }
            other => panic!("expected SockDiag, got {other:?}"),
        }
        // i32::MIN must not overflow on negation.
        assert!(matches!(
            parse(&done(i32::MIN)).0,
            Err(DiscoveryError::SockDiag { .. })
        ));
        let positive = nlmsg(libc::NLMSG_ERROR as u16, 0, DIAG_SEQ, &5i32.to_ne_bytes());
        assert!(matches!(
            parse(&positive).0,
            Err(DiscoveryError::SockDiagReply { .. })
        ));
        let short = nlmsg(libc::NLMSG_ERROR as u16, 0, DIAG_SEQ, &[1, 2]);
        assert!(matches!(
            parse(&short).0,
            Err(DiscoveryError::SockDiagReply { .. })
        ));
    }

    /// Lengths that do not fit are errors, never panics or out-of-bounds reads.
    #[test]
    fn sock_diag_parse_malformed() {
        let malformed = |buf: &[u8], what: &str| match parse(buf).0 {
            Err(DiscoveryError::SockDiagReply { reason }) => reason,
            other => panic!("{what}: expected SockDiagReply, got {other:?}"),
        };
        // nlmsg_len beyond the datagram, and below the header size.
        let mut m = diag(1, Some(2));
        m[0..4].copy_from_slice(&1000u32.to_ne_bytes());
        malformed(&m, "long nlmsg");
        m[0..4].copy_from_slice(&15u32.to_ne_bytes());
        malformed(&m, "short nlmsg");
        m[0..4].copy_from_slice(&u32::MAX.to_ne_bytes());
        malformed(&m, "huge nlmsg");
        // A unix_diag_msg cut short.
        let m = nlmsg(SOCK_DIAG_BY_FAMILY, 2, DIAG_SEQ, &[1, 1, 1, 0, 5, 0, 0]);
        let r = malformed(&m, "short unix_diag_msg");
        assert!(r.contains("netlink message at byte 0"), "{r}");
        // Attribute length 0 (would loop forever), 2, and beyond the message.
        for bad_len in [0u16, 2, 64] {
            let mut attr = nla(UNIX_DIAG_PEER, &9u32.to_ne_bytes());
            attr[0..2].copy_from_slice(&bad_len.to_ne_bytes());
            let m = nlmsg(SOCK_DIAG_BY_FAMILY, 2, DIAG_SEQ, &diag_msg(1, &[attr]));
            malformed(&m, &format!("attribute length {bad_len}"));
        }
        // A peer attribute with 2 bytes of payload.
        let m = nlmsg(
            SOCK_DIAG_BY_FAMILY,
            2,
            DIAG_SEQ,
            &diag_msg(1, &[nla(UNIX_DIAG_PEER, &[7, 7])]),
        );
        let r = malformed(&m, "short peer");
        assert!(r.contains("UNIX_DIAG_PEER"), "{r}");

        // Every prefix of a good datagram, and noise: no panic, whatever the result.
        let mut good = diag(1, Some(2));
        good.extend(diag(3, Some(4)));
        good.extend(done(0));
        for cut in 0..good.len() {
            let _ = parse(&good[..cut]);
        }
        // 1-7 bytes changed anywhere, then cut anywhere.
        let noise = (
            prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..=7),
            any::<prop::sample::Index>(),
        );
        proptest::test_runner::TestRunner::new(crate::decode::test_strategies::config(2000))
            .run(&noise, |(bytes, cut)| {
                let mut noise = good.clone();
                for (at, b) in bytes {
                    let at = at.index(noise.len());
                    noise[at] = b;
                }
                noise.truncate(cut.index(noise.len() + 1));
                let _ = parse(&noise);
                Ok(())
            })
            .unwrap();
    }

    /// Live: the real dump pairs the two ends of our own socketpair (works without root).
    #[test]
    fn live_unix_peers() {
        let (a, b) = UnixStream::pair().expect("socketpair");
        let (ia, ib) = (inode_of(&a), inode_of(&b));
        // The same inodes as the /proc fd links show.
        let me = std::process::id();
        let fds = socket_fds_of(me).expect("own fds");
        assert!(fds.contains(&(u32::try_from(a.as_raw_fd()).expect("fd"), ia)));
        let peers = unix_peers().expect("sock_diag dump of AF_UNIX");
        assert_eq!(peers.get(&ia), Some(&ib), "peer of {ia}");
        assert_eq!(peers.get(&ib), Some(&ia), "peer of {ib}");
        // A listener has no peer; an accepted connection has its client as peer.
        let dir = TempDir::new("diag");
        let listener = UnixListener::bind(dir.0.join("l.sock")).expect("bind");
        let client = UnixStream::connect(dir.0.join("l.sock")).expect("connect");
        let (server, _) = listener.accept().expect("accept");
        let peers = unix_peers().expect("second dump");
        assert!(!peers.contains_key(&inode_of(&listener)));
        assert_eq!(peers.get(&inode_of(&server)), Some(&inode_of(&client)));
        assert_eq!(peers.get(&inode_of(&client)), Some(&inode_of(&server)));
        // Once one end is closed, the other is not paired with a live inode any more.
        drop(b);
        let peers = unix_peers().expect("third dump");
        assert_ne!(peers.get(&ia), Some(&ib));
    }

    /// Live: the one-socket query gives the same peer as the dump, and nothing for a
    /// listener, a closed socket's peer, or a made-up inode.
    #[test]
    fn live_unix_peer_of() {
        let (a, b) = UnixStream::pair().expect("socketpair");
        let (ia, ib) = (inode_of(&a), inode_of(&b));
        let me = std::process::id();
        assert_eq!(
            fd_socket_inode(me, u32::try_from(a.as_raw_fd()).expect("fd")),
            Some(ia)
        );
        assert_eq!(fd_socket_inode(me, u32::MAX), None);
        assert_eq!(unix_peer_of(ia).expect("query"), Some(ib));
        assert_eq!(unix_peer_of(ib).expect("query"), Some(ia));
        let dir = TempDir::new("diag-exact");
        let listener = UnixListener::bind(dir.0.join("l.sock")).expect("bind");
        let client = UnixStream::connect(dir.0.join("l.sock")).expect("connect");
        let (server, _) = listener.accept().expect("accept");
        assert_eq!(unix_peer_of(inode_of(&listener)).expect("query"), None);
        assert_eq!(
            unix_peer_of(inode_of(&server)).expect("query"),
            Some(inode_of(&client))
        );
        drop(b);
        assert_ne!(unix_peer_of(ia).expect("query"), Some(ib));
        assert_eq!(unix_peer_of(ib).expect("closed socket"), None);
        assert_eq!(unix_peer_of(0).expect("inode 0"), None);
        assert_eq!(unix_peer_of(u64::MAX).expect("64-bit inode"), None);
    }
}
