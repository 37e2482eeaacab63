//! A completion queue's state: its entries and the endpoints whose progress fills it, and the
//! caller's array a read fills (`Reader`).

use rshm_ffi as ffi;
use std::collections::VecDeque;
use std::ffi::c_void;

/// One completion, in the widest form; formats copy the fields they have.
#[derive(Debug, Clone, Copy, Default)]
pub struct Completion {
    pub op_context: usize,
    pub flags: u64,
    pub len: usize,
    pub buf: usize,
    pub data: u64,
    pub tag: u64,
    /// Source address for `fi_cq_readfrom` (FI_ADDR_NOTAVAIL when unknown).
    pub src: u64,
}

#[derive(Debug, Clone, Copy)]
pub enum CqEvent {
    Done(Completion),
    Failed { entry: Completion, err: u32, olen: usize },
}

// Every read of a CQ indexes the domain's slab of these: kept at 64 bytes (a shift, not a
// multiply, and one line), which is why `eps` is a boxed slice and the descriptor boxed.
pub struct CqState {
    pub format: ffi::fi_cq_format,
    pub wait_obj: ffi::fi_wait_obj,
    pub events: VecDeque<CqEvent>,
    /// Endpoints bound to this CQ (domain slab keys): the ones its reads progress.
    pub eps: Box<[usize]>,
    /// Its descriptor (FI_WAIT_FD) and the threads asleep in fi_cq_sread on it.
    pub waiters: Option<Box<crate::state::waiters::Waiters>>,
}

const _: () = assert!(size_of::<CqState>() == 64);

impl CqState {
    /// Its descriptor, if it was opened with FI_WAIT_FD (or in a wait set).
    pub fn wait_fd(&self) -> Option<&crate::state::wait_fd::WaitFd> {
        self.waiters.as_deref()?.fd.as_ref()
    }

    /// An endpoint bound to this CQ (once).
    pub fn bind_ep(&mut self, ep: usize) -> bool {
        if self.eps.contains(&ep) {
            return false;
        }
        self.eps = self.eps.iter().copied().chain([ep]).collect();
        true
    }

    /// An endpoint unbound from it (closed).
    pub fn unbind_ep(&mut self, ep: usize) {
        self.eps = self.eps.iter().copied().filter(|&e| e != ep).collect();
    }

    pub fn push(&mut self, ev: CqEvent) {
        self.events.push_back(ev);
        if let Some(w) = &mut self.waiters {
            w.changed();
        }
    }
}

/// The array of a `fi_cq_read` that drives its CQ's endpoints: completions of that CQ which
/// progress makes while nothing is queued before them go straight into it, in the CQ's format,
/// instead of into `CqState::events` and out again. The queue, its 80-byte entries pushed and
/// popped and copied, cost every message arriving on a polled CQ about 40 instructions.
pub struct Reader {
    pub cq: usize,
    buf: *mut c_void,
    src: *mut u64,
    count: usize,
    /// Entries written so far.
    pub filled: usize,
}

impl Reader {
    /// A reader of `count` entries of CQ `cq` into `buf`, and their source addresses into `src`
    /// unless it is NULL.
    ///
    /// # Safety
    /// `buf` must hold `count` writable entries of the CQ's format, and `src` (if not NULL)
    /// `count` addresses, which nothing else touches until the reader is dropped.
    pub unsafe fn new(cq: usize, buf: *mut c_void, src: *mut u64, count: usize) -> Reader {
        Reader { cq, buf, src, count, filled: 0 }
    }

    /// Write `c` as the next entry of `q` (the reader's CQ), if there is room and nothing is
    /// queued that would come before it: false otherwise, and then `c` goes to the queue.
    #[inline(always)]
    pub fn put(&mut self, q: &CqState, c: &Completion) -> bool {
        if self.filled >= self.count || !q.events.is_empty() {
            return false;
        }
        // SAFETY: `filled < count`, and `new`'s contract gives `count` entries of each array,
        // `buf`'s in the format of the reader's CQ.
        unsafe { write_entry(self.buf, self.src, self.filled, q.format, c) };
        self.filled += 1;
        true
    }
}

/// Write one completion in `format` at index `i` of the caller's array, and its source address
/// at index `i` of `src` unless that is NULL.
///
/// # Safety
/// `buf` must hold at least `i + 1` entries of `format`, `src` (if not NULL) `i + 1` addresses.
#[inline(always)]
pub unsafe fn write_entry(buf: *mut c_void, src: *mut u64, i: usize, format: ffi::fi_cq_format, c: &Completion) {
    let ctx = c.op_context as *mut c_void;
    // SAFETY: (all arms) per the contract, entry `i` of the caller's arrays is writable.
    unsafe {
        match format {
            ffi::FI_CQ_FORMAT_CONTEXT => {
                buf.cast::<ffi::fi_cq_entry>().add(i).write_unaligned(ffi::fi_cq_entry { op_context: ctx })
            }
            ffi::FI_CQ_FORMAT_MSG => buf.cast::<ffi::fi_cq_msg_entry>().add(i).write_unaligned(ffi::fi_cq_msg_entry {
                op_context: ctx,
                flags: c.flags,
                len: c.len,
            }),
            ffi::FI_CQ_FORMAT_DATA => {
                buf.cast::<ffi::fi_cq_data_entry>().add(i).write_unaligned(ffi::fi_cq_data_entry {
                    op_context: ctx,
                    flags: c.flags,
                    len: c.len,
                    buf: c.buf as *mut c_void,
                    data: c.data,
                })
            }
            _ => buf.cast::<ffi::fi_cq_tagged_entry>().add(i).write_unaligned(ffi::fi_cq_tagged_entry {
                op_context: ctx,
                flags: c.flags,
                len: c.len,
                buf: c.buf as *mut c_void,
                data: c.data,
                tag: c.tag,
            }),
        }
        if !src.is_null() {
            src.add(i).write(c.src);
        }
    }
}
