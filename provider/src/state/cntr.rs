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

    /// `n` operations completed, all of them successes.
    #[inline]
    pub fn count_many(&mut self, n: u64) {
        self.value = self.value.wrapping_add(n);
        if let Some(w) = &mut self.waiters {
            w.changed();
        }
    }
}

/// `n` of peers' operations on our memory landed: the endpoint's FI_REMOTE_WRITE or
/// FI_REMOTE_READ counter (`ep`) and the registration's own (`mr`, `fi_mr_bind`) count them,
/// once on a counter bound both ways. Operations through our progress count one at a time
/// (`Sinks::remote_done`), peers' own CMA copies as many as they made since the last pass
/// (`state::ep::published`).
#[inline]
pub fn count_remote(cntrs: &mut slab::Slab<CntrState>, ep: Option<usize>, mr: Option<usize>, n: u64) {
    let mr = mr.filter(|&m| Some(m) != ep);
    for id in [ep, mr].into_iter().flatten() {
        if let Some(c) = cntrs.get_mut(id) {
            c.count_many(n);
        }
    }
}
