//! The provider's error type and its mapping to libfabric return codes.

use rshm_ffi as ffi;
use smr_core::Error as EngineError;

/// A libfabric error code (positive `FI_E*` value); entry points return its negation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FiError(pub u32);

pub type FiResult<T> = Result<T, FiError>;

impl FiError {
    pub const AGAIN: FiError = FiError(ffi::FI_EAGAIN);
    pub const INVAL: FiError = FiError(ffi::FI_EINVAL);
    pub const NOMEM: FiError = FiError(ffi::FI_ENOMEM);
    pub const NODATA: FiError = FiError(ffi::FI_ENODATA);
    pub const NOSYS: FiError = FiError(ffi::FI_ENOSYS);
    pub const BUSY: FiError = FiError(ffi::FI_EBUSY);
    pub const BADFLAGS: FiError = FiError(ffi::FI_EBADFLAGS as _);
    pub const OPNOTSUPP: FiError = FiError(ffi::FI_EOPNOTSUPP);
    pub const NOENT: FiError = FiError(ffi::FI_ENOENT);
    pub const ALREADY_ADDED: FiError = FiError(ffi::FI_EALREADY);
    pub const TRUNC: FiError = FiError(ffi::FI_ETRUNC as _);
    pub const IO: FiError = FiError(ffi::FI_EIO);
    pub const CANCELED: FiError = FiError(ffi::FI_ECANCELED);
    pub const OTHER: FiError = FiError(ffi::FI_EOTHER as _);
    pub const ADDRNOTAVAIL: FiError = FiError(ffi::FI_EADDRNOTAVAIL);
    pub const NOTCONN: FiError = FiError(ffi::FI_ENOTCONN);
    pub const TOOSMALL: FiError = FiError(ffi::FI_ETOOSMALL as _);
    pub const MSGSIZE: FiError = FiError(ffi::FI_EMSGSIZE);
    pub const ADDRINUSE: FiError = FiError(ffi::FI_EADDRINUSE);
    pub const AVAIL: FiError = FiError(ffi::FI_EAVAIL as _);
    pub const TIMEDOUT: FiError = FiError(ffi::FI_ETIMEDOUT);
    pub const INTR: FiError = FiError(ffi::FI_EINTR);
    pub const ACCES: FiError = FiError(ffi::FI_EACCES);
    pub const NOKEY: FiError = FiError(ffi::FI_ENOKEY as _);
    pub const NOCQ: FiError = FiError(ffi::FI_ENOCQ as _);
    pub const NOPROTOOPT: FiError = FiError(ffi::FI_ENOPROTOOPT);
    pub const NOMSG: FiError = FiError(ffi::FI_ENOMSG);
    pub const NOAV: FiError = FiError(ffi::FI_ENOAV as _);
    pub const KEYREJECTED: FiError = FiError(ffi::FI_EKEYREJECTED as _);

    /// The value an `int`-returning entry point returns.
    pub fn code(self) -> i32 {
        -(self.0 as i32)
    }
}

impl From<EngineError> for FiError {
    fn from(e: EngineError) -> FiError {
        match e {
            EngineError::Again => FiError::AGAIN,
            EngineError::PeerDead => FiError::IO,
            EngineError::Corrupt(_) => FiError::IO,
            EngineError::Invalid(_) => FiError::INVAL,
            EngineError::Truncated { .. } => FiError::TRUNC,
            EngineError::AddrInUse => FiError::ADDRINUSE,
            EngineError::NoSuchPeer => FiError::ADDRNOTAVAIL,
            EngineError::Canceled => FiError::CANCELED,
            // The target's handler chose a libfabric code (FI_EACCES for a bad key, range or
            // access): pass on only codes we know, so a hostile peer cannot invent one.
            EngineError::Refused(code) => match code {
                ffi::FI_EACCES | ffi::FI_EINVAL | ffi::FI_EOPNOTSUPP | ffi::FI_EMSGSIZE | ffi::FI_EIO => FiError(code),
                _ => FiError::IO,
            },
            EngineError::Os(errno) => FiError(errno as u32),
        }
    }
}

/// `0` or `-FI_E*`, for `int`-returning entry points.
pub fn int_ret(r: FiResult<()>) -> i32 {
    match r {
        Ok(()) => 0,
        Err(e) => e.code(),
    }
}

/// `0`/count or `-FI_E*`, for `ssize_t`-returning entry points.
pub fn ssize_ret(r: FiResult<usize>) -> isize {
    match r {
        Ok(n) => n as isize,
        Err(e) => e.code() as isize,
    }
}
