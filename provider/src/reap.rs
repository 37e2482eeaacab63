//! Before a process's first endpoint: remove the regions that dead processes of this user left
//! in /dev/shm (`smr_core::reap`), those of other pid namespaces that share it (containers)
//! too, judged by their owner lock. A job that was killed leaves one per endpoint, each holding
//! the memory it used; the next job on the node takes them away instead of an administrator.
//! FI_RSHM_REAP_DEAD=0 turns it off.
//!
//! And so that a killed process leaves none: its names are unlinked by a handler of the signals
//! that commonly end a job, installed in front of the earlier ones with the first endpoint
//! (`smr_core::signal_unlink`). FI_RSHM_UNLINK_ON_SIGNAL=0 turns it off.

use crate::params::config;
use std::sync::Once;

/// Reap once per process, before its first region is created. Later endpoints skip it: a
/// process's own start is when the node's last job most likely died.
pub fn before_first_endpoint() {
    static DONE: Once = Once::new();
    DONE.call_once(|| {
        if config().unlink_on_signal {
            let taken = smr_core::signal_unlink::install();
            crate::info!(EpCtrl, "region names unlinked on signals {taken:?} (those not ignored)");
        }
        if !config().reap_dead {
            return;
        }
        let Some(own_prefix) = crate::names::namespace_prefix() else {
            crate::info!(EpCtrl, "no pid namespace in /proc: dead processes' regions are left in /dev/shm");
            return;
        };
        match smr_core::reap::reap_dead(&crate::names::user_prefix(), own_prefix) {
            Ok(reaped) => {
                for r in reaped {
                    let owner = r.owner.map_or("a creation that died before its header".to_string(), |o| {
                        let place = if o.pid_is_ours() { String::new() } else { format!(" of pid namespace {}", o.ns) };
                        format!("process {}{place} that died without closing it", o.pid)
                    });
                    crate::info!(EpCtrl, "removed region {} ({} bytes) left by {owner}", r.name, r.size);
                }
            }
            Err(e) => crate::warn!(EpCtrl, "cannot look for dead processes' regions in /dev/shm: {e}"),
        }
    });
}
