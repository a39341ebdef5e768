//! Descriptors that a process nri-trace does not trace writes to, one of
//! each kind the capture's probes meet: a file, a pipe, a TCP loopback
//! socket and a unix stream socket. doctor's untraced-writes check counts
//! the data programs' runs over them (capture/selftest.rs), and `nri-trace
//! write-cost` times them, with and without probes (issue 34: what the
//! probes cost the rest of the node).

use std::{
    fs::File,
    io::{self, Read},
    net::{TcpListener, TcpStream},
    os::{
        fd::{AsRawFd, FromRawFd, OwnedFd},
        unix::net::UnixStream,
    },
};

/// A kind of descriptor written to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteTarget {
    /// A memfd: a file without a filesystem (doctor runs in empty roots).
    File,
    Pipe,
    /// A TCP connection on 127.0.0.1 (needs lo up).
    Tcp,
    /// One end of a unix stream socketpair.
    Unix,
}

impl WriteTarget {
    pub const ALL: [Self; 4] = [Self::File, Self::Pipe, Self::Tcp, Self::Unix];

    /// Writes between two drains: a pipe holds 64 KiB; a unix socket's
    /// every write is a buffer of its own (an skb: about 1 KiB of its
    /// 208 KiB send buffer, net/unix/af_unix.c), TCP's coalesce.
    pub fn drain_every(self) -> u32 {
        match self {
            Self::Unix => 64,
            _ => 4096,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::File => "file",
            Self::Pipe => "pipe",
            Self::Tcp => "tcp",
            Self::Unix => "unix",
        }
    }
}

/// The most writes between two drains (`WriteTarget::drain_every`), and
/// the largest drain.
pub const DRAIN_EVERY: u32 = 4096;

/// One open target: the end written to, and the end drained (none for a
/// file).
pub struct OpenTarget {
    pub target: WriteTarget,
    write: OwnedFd,
    drain: Option<File>,
}

impl OpenTarget {
    /// Open `target`. Both ends are non-blocking: a drain takes what is
    /// there, and a full buffer is an error (EAGAIN), not a hang.
    pub fn open(target: WriteTarget) -> io::Result<Self> {
        let (write, drain): (OwnedFd, Option<OwnedFd>) = match target {
            WriteTarget::File => {
                let fd = unsafe { libc::memfd_create(c"nri-trace-writes".as_ptr(), 0) };
                if fd < 0 {
                    return Err(io::Error::last_os_error());
                }
                (unsafe { OwnedFd::from_raw_fd(fd) }, None)
            }
            WriteTarget::Pipe => {
                let mut fds = [0; 2];
                if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK) } != 0 {
                    return Err(io::Error::last_os_error());
                }
                let (r, w) =
                    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
                (w, Some(r))
            }
            WriteTarget::Tcp => {
                let listener = TcpListener::bind("127.0.0.1:0")?;
                let w = TcpStream::connect(listener.local_addr()?)?;
                let (r, _) = listener.accept()?;
                r.set_nonblocking(true)?;
                w.set_nonblocking(true)?;
                (w.into(), Some(r.into()))
            }
            WriteTarget::Unix => {
                let (w, r) = UnixStream::pair()?;
                r.set_nonblocking(true)?;
                w.set_nonblocking(true)?;
                (w.into(), Some(r.into()))
            }
        };
        Ok(Self {
            target,
            write,
            drain: drain.map(File::from),
        })
    }

    /// Write one byte with write(2) itself (std's writers may pick
    /// another syscall).
    pub fn write_byte(&self) -> io::Result<()> {
        if unsafe { libc::write(self.write.as_raw_fd(), b"x".as_ptr().cast(), 1) } != 1 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Read what waits at the other end (reads: 0 for a file, else 1).
    pub fn drain(&mut self, buf: &mut [u8]) -> u32 {
        match &mut self.drain {
            Some(r) => {
                // Whatever is there; WouldBlock is an empty drain.
                let _ = r.read(buf);
                1
            }
            None => 0,
        }
    }
}
