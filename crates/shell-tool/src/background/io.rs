//! The descriptors a background shell is spoken to through: one pipe that its stdout and
//! stderr share (so the output keeps the order it was written in), or a pseudo-terminal.
//! Both are read (and the terminal written) without blocking a thread of the runtime.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;

use nix::fcntl::{FcntlArg, OFlag, fcntl};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

/// A non-blocking descriptor read and written on the runtime's reactor.
#[derive(Debug)]
pub(crate) struct Fd(AsyncFd<OwnedFd>);

impl Fd {
    pub(crate) fn new(fd: OwnedFd) -> io::Result<Self> {
        let flags = fcntl(&fd, FcntlArg::F_GETFL).map_err(io::Error::from)?;
        let flags = OFlag::from_bits_retain(flags) | OFlag::O_NONBLOCK;
        fcntl(&fd, FcntlArg::F_SETFL(flags)).map_err(io::Error::from)?;
        Self::register(fd)
    }

    #[allow(unsafe_code)]
    fn register(fd: OwnedFd) -> io::Result<Self> {
        // SAFETY: the `OwnedFd` is open, owned by the `AsyncFd` for its whole life, and
        // always answers the same descriptor.
        let registered =
            unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE | Interest::WRITABLE) };
        registered.map(Self).map_err(|error| error.into())
    }

    /// Reads what is there; `Ok(0)` at the end — for a terminal, once no process holds
    /// its other side (the kernel then answers `EIO`).
    pub(crate) async fn read(&self, buffer: &mut [u8]) -> io::Result<usize> {
        loop {
            let mut guard = self.0.readable().await?;
            match guard
                .try_io(|fd| nix::unistd::read(fd.get_ref(), buffer).map_err(io::Error::from))
            {
                Ok(Err(error)) if error.raw_os_error() == Some(libc::EIO) => return Ok(0),
                Ok(result) => return result,
                Err(_would_block) => {}
            }
        }
    }

    /// Writes as much of `bytes` as the other side takes now, waiting until it takes some.
    pub(crate) async fn write(&self, bytes: &[u8]) -> io::Result<usize> {
        loop {
            let mut guard = self.0.writable().await?;
            match guard
                .try_io(|fd| nix::unistd::write(fd.get_ref(), bytes).map_err(io::Error::from))
            {
                Ok(result) => return result,
                Err(_would_block) => {}
            }
        }
    }

    /// Writes all of `bytes`, returning how many were written when it fails.
    pub(crate) async fn write_all(&self, bytes: &[u8]) -> Result<(), (usize, io::Error)> {
        let mut written = 0;
        while let Some(rest) = bytes.get(written..).filter(|rest| !rest.is_empty()) {
            match self.write(rest).await {
                Ok(0) => return Err((written, io::ErrorKind::WriteZero.into())),
                Ok(n) => written += n,
                Err(error) => return Err((written, error)),
            }
        }
        Ok(())
    }

    /// The foreground process group of the terminal this descriptor is the master of.
    /// `None` when it has none (the kernel answers 0, which `killpg` would read as the
    /// caller's own group) or names this process's own group.
    pub(crate) fn foreground_group(&self) -> Option<nix::unistd::Pid> {
        let group = nix::unistd::tcgetpgrp(self.0.get_ref().as_fd()).ok()?;
        (group.as_raw() > 1 && group != nix::unistd::getpgrp()).then_some(group)
    }
}

/// A pipe, both ends closed at exec: `(read end, write end)`.
pub(crate) fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(io::Error::from)
}

/// A new pseudo-terminal of `columns` × `rows`: `(master, slave, the slave's path)`.
/// Both ends are opened close-on-exec (no other child, spawned meanwhile, may inherit
/// them); the command gets the slave as its stdio.
pub(crate) fn terminal(columns: u16, rows: u16) -> io::Result<(OwnedFd, OwnedFd, PathBuf)> {
    use nix::pty::{grantpt, posix_openpt, ptsname_r, unlockpt};
    let master = posix_openpt(OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC)?;
    grantpt(&master)?;
    unlockpt(&master)?;
    let path = PathBuf::from(ptsname_r(&master)?);
    let slave = nix::fcntl::open(
        &path,
        OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )?;
    let master = OwnedFd::from(master);
    set_size(&master, columns, rows)?;
    Ok((master, slave, path))
}

/// Sets the terminal's size, which programs read to lay out their output.
#[allow(unsafe_code)]
fn set_size(master: &OwnedFd, columns: u16, rows: u16) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let size = libc::winsize {
        ws_row: rows,
        ws_col: columns,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads one `winsize` from a valid pointer; the descriptor is open.
    let done = unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCSWINSZ, &size) };
    if done == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
