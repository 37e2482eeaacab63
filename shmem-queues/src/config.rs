//! The C-visible types and constants (mirrored in include/shmem_queues.h) and their checking.

/// Success.
pub const OK: i32 = 0;
/// An argument is invalid (null handle, PE out of range, size not a multiple of the element...).
pub const EINVAL: i32 = -1;
/// A limit (max_elems, max_bytes) would be exceeded; nothing was queued.
pub const EFULL: i32 = -2;
/// Symmetric or local memory could not be allocated.
pub const ENOMEM: i32 = -3;
/// Fewer elements are available than asked for (data-queue pop); nothing was popped.
pub const EAGAIN: i32 = -4;
/// The operation does not apply to this kind of queue (or this op/element size).
pub const ENOTSUP: i32 = -5;
/// A global flush could not deliver everything on some PE (the rest stays queued).
pub const EPARTIAL: i32 = -6;
/// An internal error (a caught panic or a poisoned lock); the queue should be destroyed.
pub const EINTERNAL: i32 = -7;

/// `pe` value meaning "every PE" in the data-queue query and pop calls.
pub const ANY_PE: i32 = -1;

pub const QUEUE_EXCLUSIVE: u32 = 0;
pub const QUEUE_SHARED: u32 = 1;
pub const QUEUE_COMM: u32 = 0;
pub const QUEUE_DATA: u32 = 1;

pub const OP_PUT: u64 = 0;
pub const OP_GET: u64 = 1;
pub const OP_ATOMIC_ADD: u64 = 2;
pub const OP_ATOMIC_INC: u64 = 3;

/// `shmem_queue_config_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct QueueConfig {
    pub qtype: u32,
    pub sharing_model: u32,
    pub max_elems: u64,
    pub max_bytes: u64,
    pub timeout_flush: f64,
    pub op_type: u32,
    pub pe_type: u32,
    pub data_elem_size: u64,
}

/// `shmem_queue_attrib_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueAttr {
    pub queue_id: u64,
    pub outstanding_elems: u64,
    pub available_elems: u64,
}

const _: () = assert!(std::mem::size_of::<QueueConfig>() == 48);
const _: () = assert!(std::mem::offset_of!(QueueConfig, timeout_flush) == 24);
const _: () = assert!(std::mem::offset_of!(QueueConfig, data_elem_size) == 40);
const _: () = assert!(std::mem::size_of::<QueueAttr>() == 24);

/// The default data-queue capacity per PE and direction when max_bytes is 0.
pub const DEFAULT_DATA_MAX_BYTES: u64 = 64 * 1024;

/// Whether a queue is shared between threads.
pub fn is_shared(cfg: &QueueConfig) -> Result<bool, i32> {
    match cfg.sharing_model {
        QUEUE_EXCLUSIVE => Ok(false),
        QUEUE_SHARED => Ok(true),
        _ => Err(EINVAL),
    }
}

/// The flush timeout: `Some(seconds)` when positive and finite, `None` (never by time) otherwise.
pub fn timeout(cfg: &QueueConfig) -> Option<std::time::Duration> {
    let t = cfg.timeout_flush;
    (t > 0.0 && t.is_finite() && t < 1e9).then(|| std::time::Duration::from_secs_f64(t))
}

/// max_elems: 0 means no limit.
pub fn max_elems(cfg: &QueueConfig) -> u64 {
    if cfg.max_elems == 0 {
        u64::MAX
    } else {
        cfg.max_elems
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults() {
        let c = QueueConfig::default();
        assert_eq!(is_shared(&c), Ok(false));
        assert_eq!(timeout(&c), None);
        assert_eq!(max_elems(&c), u64::MAX);
        let c = QueueConfig { sharing_model: 7, timeout_flush: f64::INFINITY, max_elems: 3, ..c };
        assert_eq!(is_shared(&c), Err(EINVAL));
        assert_eq!(timeout(&c), None);
        assert_eq!(max_elems(&c), 3);
        let c = QueueConfig { timeout_flush: 0.5, ..c };
        assert_eq!(timeout(&c), Some(std::time::Duration::from_millis(500)));
    }
}
