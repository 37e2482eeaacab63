//! The descriptor of a CQ or counter opened with FI_WAIT_FD: its eventfd and the endpoints'
//! wake words armed for it (`waitfd` arms them and rings it).

use smr_core::endpoint::WaitHandle;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;

/// The eventfd of a CQ or counter opened with FI_WAIT_FD, and the wake words armed for it.
pub struct WaitFd {
    /// Its own eventfd, or its wait set's (`waitset`).
    fd: Arc<OwnedFd>,
    /// The endpoints' wake words `fi_trywait` armed, each with the sequence it was armed at.
    armed: Vec<(WaitHandle, u32)>,
    /// A counter's value and error count as the application last read them: `fi_trywait` says
    /// -FI_EAGAIN while they differ.
    pub seen: (u64, u64),
}

/// A new non-blocking eventfd.
pub fn eventfd() -> std::io::Result<OwnedFd> {
    // SAFETY: eventfd takes no pointers; it returns a new descriptor or -1.
    unsafe { smr_core::fd_limit::retry_emfile(|| i64::from(libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC))) }
}

/// Take back what rang before: an eventfd stays readable until drained.
pub fn drain(fd: &OwnedFd) {
    let mut n = 0u64;
    // SAFETY: reads at most 8 bytes into a local; non-blocking, so it returns at once.
    unsafe { libc::read(fd.as_raw_fd(), (&mut n as *mut u64).cast(), 8) };
}

impl WaitFd {
    pub fn new() -> std::io::Result<WaitFd> {
        Ok(WaitFd::sharing(Arc::new(eventfd()?)))
    }

    /// A member of a wait set: it rings the set's descriptor.
    pub fn sharing(fd: Arc<OwnedFd>) -> WaitFd {
        WaitFd { fd, armed: Vec::new(), seen: (0, 0) }
    }

    /// What `fi_control(FI_GETWAIT)` hands out.
    pub fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    pub fn is_armed(&self) -> bool {
        !self.armed.is_empty()
    }

    /// Something completed into the object in this process (not through a peer's wake-up): the
    /// application, if it blocks on the descriptor, must wake.
    #[inline]
    pub fn changed(&mut self) {
        if self.is_armed() {
            self.ring();
        }
    }

    /// Make the descriptor readable, and stop watching: the application will read.
    pub fn ring(&mut self) {
        let one = 1u64;
        // SAFETY: writes 8 bytes from a local into our eventfd. It fails only when the counter
        // would overflow (then it is readable anyway).
        unsafe { libc::write(self.fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
        self.disarm();
    }

    pub fn disarm(&mut self) {
        for (h, _) in self.armed.drain(..) {
            h.disarm();
        }
    }

    /// Watch these wake words (armed by `waitfd::arm`) until the next ring or read.
    pub fn watch(&mut self, armed: Vec<(WaitHandle, u32)>) {
        self.armed = armed;
    }

    /// The wake words it watches, each with the sequence it was armed at.
    pub fn armed(&self) -> &[(WaitHandle, u32)] {
        &self.armed
    }

    /// Take back what rang before.
    pub fn drain(&self) {
        drain(&self.fd);
    }

    /// Whether a peer woke one of the armed wake words.
    pub fn woken(&self) -> bool {
        self.armed.iter().any(|(h, seq)| h.woken_since(*seq))
    }
}

impl Drop for WaitFd {
    fn drop(&mut self) {
        self.disarm();
    }
}
