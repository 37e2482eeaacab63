//! Which registrations each endpoint publishes in its region, so that peers read them with CMA
//! on their own (`smr_core::published`; the reader's side is `rma::read_published`).
//!
//! Published: registrations of one range that allow FI_REMOTE_READ, from endpoints whose
//! peers' reads need not be counted here, as many as the table holds (64; the others are read
//! through the target, as before). A read nobody at the target sees cannot move a
//! counter, so an endpoint with a FI_REMOTE_READ counter, and a registration bound to one
//! (`fi_mr_bind(mr, cntr, FI_REMOTE_READ)`), keep every read on the ordinary path, through the
//! target. `sync` recomputes all of it whenever one of those inputs changes (a registration
//! opened, bound or closed, an endpoint enabled or bound to a counter): rare control calls,
//! under the domain lock; a peer's copy that races a rewrite is refused and done the ordinary way.

use crate::domain::DomainState;
use crate::mr::MrEntry;
use rshm_ffi as ffi;
use smr_core::published::{REMOTE_READ, VIRT_ADDR};

/// Make every enabled endpoint's table match the domain's registrations and bindings.
pub fn sync(st: &mut DomainState) {
    let DomainState { eps, mrs, .. } = st;
    for (_, ep) in eps.iter_mut() {
        let Some(engine) = ep.engine.as_mut() else { continue };
        for slot in ep.published.drain(..) {
            engine.withdraw_mr(slot);
        }
        if ep.bindings.remote_read_cntr.is_some() {
            continue;
        }
        for (&key, mr) in mrs.by_key.iter() {
            let Some((base, len)) = publishable(mr) else { continue };
            let flags = REMOTE_READ | if mrs.virt_addr { VIRT_ADDR } else { 0 };
            match engine.publish_mr(key, base, len, flags) {
                Some(slot) => ep.published.push(slot),
                // The table is full (or CMA is off): the rest are read through the target. Not
                // walking them keeps a registration O(table) however many the domain holds.
                None => break,
            }
        }
    }
}

/// The one range of a registration peers may read on their own.
fn publishable(mr: &MrEntry) -> Option<(u64, u64)> {
    if mr.access & ffi::FI_REMOTE_READ as u64 == 0 || mr.read_cntr.is_some() {
        return None;
    }
    match *mr.iov().as_slice() {
        [(base, len)] if len > 0 => Some((base as u64, len as u64)),
        _ => None,
    }
}
