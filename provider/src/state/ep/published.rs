//! The registrations an endpoint published for peers to copy on their own (`Publications`), and
//! the counting of those copies: a peer's CMA write into a registration bound to a
//! FI_REMOTE_WRITE counter (of the registration, `fi_mr_bind`, or of the endpoint) adds one to
//! the entry's count in our region (`smr_core::published`), and every progress pass of ours
//! takes what the counts moved by into the counters (`Publications::take_counts`). So a put
//! into OpenSHMEM's default build, whose every registration counts into its target counter,
//! needs no step of the target's, as a put into the build without counters does. Which
//! registrations are published, and when, is `crate::ep::published`'s.

use crate::state::cntr::{count_remote, CntrState};
use slab::Slab;
use smr_core::endpoint::Endpoint;
use smr_core::published::Counted;

/// The counters one kind of counted copy (reads, or writes) counts into: the registration's own
/// (`fi_mr_bind`) and the endpoint's FI_REMOTE_READ / FI_REMOTE_WRITE counter
/// (`state::cntr::count_remote`, as the ordinary path counts).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CountInto {
    pub mr: Option<usize>,
    pub ep: Option<usize>,
}

impl CountInto {
    /// Whether copies of this kind count at all.
    pub fn any(self) -> bool {
        self.mr.is_some() || self.ep.is_some()
    }

    fn add(self, cntrs: &mut Slab<CntrState>, n: u64) {
        count_remote(cntrs, self.ep, self.mr, n);
    }
}

/// One registration an endpoint published: the engine's slot, and where peers' copies of it
/// count, as they were when it was published (a counter stays open while it is bound).
#[derive(Debug, Clone, Copy)]
pub struct Publication {
    pub slot: u32,
    pub reads: CountInto,
    pub writes: CountInto,
}

/// What an endpoint published.
#[derive(Debug, Default)]
pub struct Publications {
    entries: Vec<Publication>,
    /// Some entry counts copies: every progress pass takes the counts.
    pub counted: bool,
}

impl Publications {
    pub fn push(&mut self, p: Publication) {
        self.counted |= p.reads.any() || p.writes.any();
        self.entries.push(p);
    }

    /// Withdraw every entry, counting the copies peers made of it up to the withdrawal (which
    /// waited for every copy admitted: `Endpoint::withdraw_mr`).
    pub fn withdraw_all(&mut self, engine: &mut Endpoint, cntrs: &mut Slab<CntrState>) {
        for p in self.entries.drain(..) {
            engine.withdraw_mr(p.slot);
            count(engine, &p, cntrs);
        }
        self.counted = false;
    }

    /// Count what peers' counted copies moved by since the last pass; returns how many copies.
    /// Two loads of a line per counted entry, which only peers write.
    #[inline]
    pub fn take_counts(&self, engine: &mut Endpoint, cntrs: &mut Slab<CntrState>) -> usize {
        if !self.counted {
            return 0;
        }
        self.entries.iter().map(|p| count(engine, p, cntrs)).sum()
    }
}

/// Count the copies peers made of `p` since the last look; returns how many.
fn count(engine: &mut Endpoint, p: &Publication, cntrs: &mut Slab<CntrState>) -> usize {
    if !(p.reads.any() || p.writes.any()) {
        return 0;
    }
    match engine.take_mr_counts(p.slot) {
        Counted { scribbled: true, .. } => {
            crate::warn!(
                EpData,
                "endpoint {}: the copy counts of published slot {} moved as no copies could (a peer wrote over them); \
                 not counted",
                engine.name(),
                p.slot
            );
            0
        }
        Counted { reads, writes, .. } => {
            if reads > 0 {
                p.reads.add(cntrs, reads);
            }
            if writes > 0 {
                p.writes.add(cntrs, writes);
            }
            (reads + writes) as usize
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One copy counts once on each counter it names, and once only on a counter named both ways
    /// (the registration's and the endpoint's), as the ordinary path counts.
    #[test]
    fn a_copy_counts_once_on_each_counter() {
        let mut cntrs = Slab::new();
        let (a, b) = (cntrs.insert(CntrState::default()), cntrs.insert(CntrState::default()));
        CountInto { mr: Some(a), ep: Some(b) }.add(&mut cntrs, 3);
        assert_eq!((cntrs[a].value, cntrs[b].value), (3, 3));
        CountInto { mr: Some(a), ep: Some(a) }.add(&mut cntrs, 2);
        assert_eq!((cntrs[a].value, cntrs[b].value), (5, 3));
        CountInto { mr: None, ep: Some(b) }.add(&mut cntrs, 1);
        assert_eq!((cntrs[a].value, cntrs[b].value), (5, 4));
        assert!(!CountInto::default().any());
    }
}
