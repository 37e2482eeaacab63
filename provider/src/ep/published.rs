//! Which registrations each endpoint publishes in its region, so that peers read and write them
//! with CMA on their own (`smr_core::published`; the initiator's side is `rma::copy_published`).
//!
//! Published: registrations of one range that allow FI_REMOTE_READ or FI_REMOTE_WRITE, as many
//! as the table holds (64; the others go through the target, as before). A registration whose
//! remote writes (reads) a counter counts, its own (`fi_mr_bind(mr, cntr, FI_REMOTE_WRITE)`, as
//! OpenSHMEM's default build binds every one) or the endpoint's FI_REMOTE_WRITE (FI_REMOTE_READ)
//! counter, is published with `COUNT_WRITES` (`COUNT_READS`): peers count their copies in the
//! entry, and our progress passes take the counts into the counters
//! (`state::ep::published`). Writes with remote CQ data need the target's completion and never
//! copy directly. `sync` recomputes all of it whenever one of those inputs changes (a
//! registration opened, bound or closed, an endpoint enabled or bound to a counter): rare
//! control calls, under the domain lock. It counts the copies peers made of every entry before
//! it withdraws it, into the counters the entry named; a peer's read that races a rewrite is
//! refused and done the ordinary way, and the rewrite waits for a peer's write (or counted
//! read) under way.

use crate::state::ep::published::{CountInto, Publication};
use crate::state::mr::MrEntry;
use crate::state::DomainState;
use rshm_ffi as ffi;
use smr_core::published::{COUNT_READS, COUNT_WRITES, REMOTE_READ, REMOTE_WRITE, VIRT_ADDR};

/// Make every enabled endpoint's table match the domain's registrations and bindings.
pub fn sync(st: &mut DomainState) {
    let DomainState { eps, mrs, cntrs, .. } = st;
    for (_, ep) in eps.iter_mut() {
        let Some(engine) = ep.engine.as_mut() else { continue };
        ep.published.withdraw_all(engine, cntrs);
        let ep_cntrs = (ep.bindings.remote_read_cntr, ep.bindings.remote_write_cntr);
        for (key, mr) in mrs.iter() {
            let Some((base, len, access)) = publishable(mr) else { continue };
            let reads = CountInto { mr: mr.read_cntr, ep: ep_cntrs.0 };
            let writes = CountInto { mr: mr.write_cntr, ep: ep_cntrs.1 };
            let mut flags = access | if mrs.virt_addr { VIRT_ADDR } else { 0 };
            if access & REMOTE_READ != 0 && reads.any() {
                flags |= COUNT_READS;
            }
            if access & REMOTE_WRITE != 0 && writes.any() {
                flags |= COUNT_WRITES;
            }
            match engine.publish_mr(key, base, len, flags) {
                Some(slot) => ep.published.push(Publication { slot, reads, writes }),
                // The table is full (or CMA is off): the rest go through the target. Not
                // walking them keeps a registration O(table) however many the domain holds.
                None => break,
            }
        }
    }
}

/// The one range of a registration peers may copy on their own, and which copies (`REMOTE_READ`,
/// `REMOTE_WRITE`).
fn publishable(mr: &MrEntry) -> Option<(u64, u64, u64)> {
    let allowed = |flag: u64| mr.access & flag != 0;
    let mut access = 0;
    if allowed(ffi::FI_REMOTE_READ as u64) {
        access |= REMOTE_READ;
    }
    if allowed(ffi::FI_REMOTE_WRITE as u64) {
        access |= REMOTE_WRITE;
    }
    match *mr.iov().as_slice() {
        [(base, len)] if len > 0 && access != 0 => Some((base as u64, len as u64, access)),
        _ => None,
    }
}
