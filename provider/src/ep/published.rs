//! Which registrations each endpoint publishes in its region, so that peers read and write them
//! with CMA on their own (`smr_core::published`; the initiator's side is `rma::copy_published`).
//!
//! Published: registrations of one range that allow FI_REMOTE_READ or FI_REMOTE_WRITE, each
//! access only where the target need not count it, as many as the table holds (64; the others
//! go through the target, as before). A copy nobody at the target sees cannot move a counter,
//! so an endpoint with a FI_REMOTE_READ (FI_REMOTE_WRITE) counter, and a registration bound to
//! one (`fi_mr_bind(mr, cntr, FI_REMOTE_READ)`), keep every read (write) on the ordinary path,
//! through the target. Writes with remote CQ data need the target's completion and never copy
//! directly. `sync` recomputes all of it whenever one of those inputs changes (a registration
//! opened, bound or closed, an endpoint enabled or bound to a counter): rare control calls,
//! under the domain lock; a peer's read that races a rewrite is refused and done the ordinary
//! way, and the rewrite waits for a peer's write under way.

use crate::state::mr::MrEntry;
use crate::state::DomainState;
use rshm_ffi as ffi;
use smr_core::published::{REMOTE_READ, REMOTE_WRITE, VIRT_ADDR};

/// Make every enabled endpoint's table match the domain's registrations and bindings.
pub fn sync(st: &mut DomainState) {
    let DomainState { eps, mrs, .. } = st;
    for (_, ep) in eps.iter_mut() {
        let Some(engine) = ep.engine.as_mut() else { continue };
        for slot in ep.published.drain(..) {
            engine.withdraw_mr(slot);
        }
        let counted = (ep.bindings.remote_read_cntr.is_some(), ep.bindings.remote_write_cntr.is_some());
        for (key, mr) in mrs.iter() {
            let Some((base, len, access)) = publishable(mr, counted) else { continue };
            let flags = access | if mrs.virt_addr { VIRT_ADDR } else { 0 };
            match engine.publish_mr(key, base, len, flags) {
                Some(slot) => ep.published.push(slot),
                // The table is full (or CMA is off): the rest go through the target. Not
                // walking them keeps a registration O(table) however many the domain holds.
                None => break,
            }
        }
    }
}

/// The one range of a registration peers may copy on their own, and which copies (`REMOTE_READ`,
/// `REMOTE_WRITE`); `counted`: the endpoint counts remote reads, remote writes.
fn publishable(mr: &MrEntry, counted: (bool, bool)) -> Option<(u64, u64, u64)> {
    let allowed = |flag: u64| mr.access & flag != 0;
    let mut access = 0;
    if allowed(ffi::FI_REMOTE_READ as u64) && mr.read_cntr.is_none() && !counted.0 {
        access |= REMOTE_READ;
    }
    if allowed(ffi::FI_REMOTE_WRITE as u64) && mr.write_cntr.is_none() && !counted.1 {
        access |= REMOTE_WRITE;
    }
    match *mr.iov().as_slice() {
        [(base, len)] if len > 0 && access != 0 => Some((base as u64, len as u64, access)),
        _ => None,
    }
}
