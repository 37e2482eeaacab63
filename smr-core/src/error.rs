//! The engine's error type. The provider maps each variant to one `-FI_E*` code.

use std::fmt;

/// Everything that can go wrong in the engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// A queue or pool is full for now; retry after progress.
    Again,
    /// The peer's process is gone (or was replaced by a new owner of the same name).
    PeerDead,
    /// A peer wrote something into shared memory that does not decode or is out of bounds.
    Corrupt(&'static str),
    /// The caller passed something invalid.
    Invalid(&'static str),
    /// The message does not fit the receiver's buffer; the count says how much was delivered.
    Truncated { delivered: usize, sent: usize },
    /// A name is already owned by a live process.
    AddrInUse,
    /// No region of that name exists.
    NoSuchPeer,
    /// The operation was cancelled by its owner.
    Canceled,
    /// The receiver's handler refused the message (a positive errno says why, e.g. a bad key).
    Refused(u32),
    /// An operating-system call failed.
    Os(i32),
}

impl Error {
    /// The last OS error as an engine error.
    pub fn last_os() -> Self {
        std::io::Error::last_os_error().into()
    }

    /// Whether this error, from opening a live sender's region, is a shortage of ours (file
    /// descriptors or memory), which passes: the sender is parked, not forgotten
    /// (`endpoint::parked`).
    pub fn is_shortage(&self) -> bool {
        matches!(self, Error::Os(libc::EMFILE | libc::ENFILE | libc::ENOMEM))
    }
}

impl From<std::io::Error> for Error {
    /// Its errno (EIO for an error that has none).
    fn from(e: std::io::Error) -> Self {
        Error::Os(e.raw_os_error().unwrap_or(libc::EIO))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Again => write!(f, "resource temporarily full, retry"),
            Error::PeerDead => write!(f, "peer process is dead"),
            Error::Corrupt(what) => write!(f, "corrupt shared memory: {what}"),
            Error::Invalid(what) => write!(f, "invalid argument: {what}"),
            Error::Truncated { delivered, sent } => {
                write!(f, "message truncated: {sent} bytes sent, {delivered} delivered")
            }
            Error::AddrInUse => write!(f, "region name owned by a live process"),
            Error::NoSuchPeer => write!(f, "no such peer region"),
            Error::Canceled => write!(f, "operation canceled"),
            Error::Refused(errno) => {
                write!(f, "refused by the receiver: {}", std::io::Error::from_raw_os_error(*errno as i32))
            }
            Error::Os(errno) => write!(f, "{}", std::io::Error::from_raw_os_error(*errno)),
        }
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;
