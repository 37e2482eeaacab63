//! What rshm promises, written down here rather than read from rshm's own answers, so that a
//! capability that silently disappears from rshm fails the suite instead of turning a scenario
//! into "not supported".
//!
//! - [`RSHM_NOT_SUPPORTED`]: the only scenarios rshm may decline (n/s). Any other n/s of rshm is
//!   a failure; an entry that passes is reported so that it gets removed (see
//!   [`STALE_ENTRY_IS_FATAL`]).
//! - [`RSHM_CAPS`] and [`RSHM_ONE_SIDED_CAPS`]: the capabilities unit/getinfo_caps asserts for
//!   rshm.
//!
//! Other providers (the C `shm` beside rshm) have no list: their n/s stays n/s, their caps are
//! what they say.

use crate::fabric::ffi;

/// One scenario a provider is allowed to decline, and why.
pub struct Declined {
    pub scenario: &'static str,
    pub reason: &'static str,
}

/// The scenarios rshm may answer with "not supported" today, e.g.
/// `Declined { scenario: "rma/write_read", reason: "FI_RMA not offered until one-sided lands" }`
/// (the three RMA/atomic entries it held were removed when one-sided landed and they passed).
/// Keep it short: remove an entry in the same change that makes the scenario pass.
pub const RSHM_NOT_SUPPORTED: &[Declined] = &[];

/// Whether an expected-n/s scenario that passes fails the run. Fatal: a stale entry is a hole
/// (that scenario could start declining again unnoticed), and the change that makes it pass is
/// the one that knows to remove it. (It was not fatal while one-sided landed in parallel with
/// this list; set it to false again if a listed feature lands from a tree that may not edit
/// this file: the run still reports the entry loudly.)
pub const STALE_ENTRY_IS_FATAL: bool = true;

/// The expected-n/s list of `prov`, or None for providers whose n/s is not judged (shm).
pub fn not_supported_list(prov: &str) -> Option<&'static [Declined]> {
    (prov == "rshm").then_some(RSHM_NOT_SUPPORTED)
}

/// Is `scenario` on `list`? (The reason, if so.)
pub fn expected_reason(list: &[Declined], scenario: &str) -> Option<&'static str> {
    list.iter().find(|d| d.scenario == scenario).map(|d| d.reason)
}

/// Capabilities rshm promises: fi_getinfo(NULL hints) must offer each, and a hint of each must be
/// answered with entries that carry it.
pub const RSHM_CAPS: &[(u64, &str)] = &[
    (ffi::FI_MSG as u64, "FI_MSG"),
    (ffi::FI_TAGGED as u64, "FI_TAGGED"),
    (ffi::FI_SEND as u64, "FI_SEND"),
    (ffi::FI_RECV as u64, "FI_RECV"),
    (ffi::FI_MULTI_RECV as u64, "FI_MULTI_RECV"),
    (ffi::FI_DIRECTED_RECV, "FI_DIRECTED_RECV"),
    (ffi::FI_SOURCE, "FI_SOURCE"),
    (ffi::FI_LOCAL_COMM, "FI_LOCAL_COMM"),
];

/// The one-sided capabilities, asserted like [`RSHM_CAPS`] once rshm offers FI_RMA (or always,
/// with [`RSHM_ONE_SIDED_PROMISED`]).
pub const RSHM_ONE_SIDED_CAPS: &[(u64, &str)] = &[
    (ffi::FI_RMA as u64, "FI_RMA"),
    (ffi::FI_ATOMIC as u64, "FI_ATOMIC"),
    (ffi::FI_READ as u64, "FI_READ"),
    (ffi::FI_WRITE as u64, "FI_WRITE"),
    (ffi::FI_REMOTE_READ as u64, "FI_REMOTE_READ"),
    (ffi::FI_REMOTE_WRITE as u64, "FI_REMOTE_WRITE"),
    (ffi::FI_RMA_EVENT, "FI_RMA_EVENT"),
];

/// One-sided has landed: [`RSHM_ONE_SIDED_CAPS`] are required even if rshm stops offering FI_RMA.
pub const RSHM_ONE_SIDED_PROMISED: bool = true;

/// The capabilities to assert for `prov` given the caps it offers: None for providers that
/// promise nothing here (their offered caps are taken from their answer).
pub fn promised_caps(prov: &str, offered: u64) -> Option<Vec<(u64, &'static str)>> {
    if prov != "rshm" {
        return None;
    }
    let mut v = RSHM_CAPS.to_vec();
    if RSHM_ONE_SIDED_PROMISED || offered & ffi::FI_RMA as u64 != 0 {
        v.extend_from_slice(RSHM_ONE_SIDED_CAPS);
    }
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_name_real_scenarios() {
        let all = crate::scenarios::all();
        for d in RSHM_NOT_SUPPORTED {
            assert!(all.iter().any(|s| s.name == d.scenario), "{} is not a scenario", d.scenario);
            assert!(!d.reason.is_empty());
        }
    }

    #[test]
    fn only_rshm_is_judged() {
        assert!(not_supported_list("rshm").is_some());
        assert!(not_supported_list("shm").is_none());
        assert!(promised_caps("shm", u64::MAX).is_none());
        let base = promised_caps("rshm", 0).expect("rshm");
        assert_eq!(base.len(), RSHM_CAPS.len() + if RSHM_ONE_SIDED_PROMISED { RSHM_ONE_SIDED_CAPS.len() } else { 0 });
        let rma = promised_caps("rshm", ffi::FI_RMA as u64).expect("rshm");
        assert_eq!(rma.len(), RSHM_CAPS.len() + RSHM_ONE_SIDED_CAPS.len());
        let list = [Declined { scenario: "rma/mr_keys", reason: "x" }];
        assert_eq!(expected_reason(&list, "rma/mr_keys"), Some("x"));
        assert!(expected_reason(&list, "pair/multi_recv").is_none());
    }
}
