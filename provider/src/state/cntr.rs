//! A counter's state: its value, its errors, and what reading it progresses.

use rshm_ffi as ffi;

#[derive(Default)]
pub struct CntrState {
    pub value: u64,
    pub errors: u64,
    /// Endpoints bound to this counter: the ones reading it progresses.
    pub eps: Vec<usize>,
    /// Registrations that count remote accesses into this counter (`fi_mr_bind`): while any
    /// exist, reading it progresses every endpoint of the domain (any may be the target).
    pub mrs: usize,
    pub wait_obj: ffi::fi_wait_obj,
    /// Its descriptor (FI_WAIT_FD) and the threads asleep in fi_cntr_wait on it.
    pub waiters: Option<Box<crate::state::waiters::Waiters>>,
}

impl CntrState {
    /// Its descriptor, if it was opened with FI_WAIT_FD (or in a wait set).
    pub fn wait_fd(&self) -> Option<&crate::state::wait_fd::WaitFd> {
        self.waiters.as_deref()?.fd.as_ref()
    }

    /// An operation completed: one more, or one more error.
    #[inline]
    pub fn count(&mut self, failed: bool) {
        if failed {
            self.errors += 1;
        } else {
            self.value += 1;
        }
        if let Some(w) = &mut self.waiters {
            w.changed();
        }
    }

    /// `n` operations completed, all of them successes (peers' counted copies, taken at once).
    pub fn count_many(&mut self, n: u64) {
        self.value = self.value.wrapping_add(n);
        if let Some(w) = &mut self.waiters {
            w.changed();
        }
    }
}
