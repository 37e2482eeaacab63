//! A completion queue's state: its entries and the endpoints whose progress fills it.

use rshm_ffi as ffi;
use std::collections::VecDeque;

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
    /// The descriptor of an FI_WAIT_FD CQ (`waitfd`).
    pub wait_fd: Option<Box<crate::state::wait_fd::WaitFd>>,
}

const _: () = assert!(size_of::<CqState>() == 64);

impl CqState {
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
        if let Some(fd) = &mut self.wait_fd {
            fd.changed();
        }
    }
}
