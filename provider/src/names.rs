//! The region names the provider makes: generated ones, which carry the user, the pid namespace
//! and the pid (`rshm_<uid>_p<pidns>_<pid>_<n>`), and the ones a node/service pair stands for
//! (`rshm_<uid>_ns_<service>`). A region's name is its endpoint's address.

use crate::error::{FiError, FiResult};
use std::sync::OnceLock;

/// The endpoint name a node/service pair stands for: the same on both sides of an
/// out-of-band exchange (fabtests' `-s 127.0.0.1` plus a port), as shm's `fi_ns://` names.
pub fn service_name(service: &str) -> FiResult<String> {
    let name = format!("{}ns_{service}", user_prefix());
    smr_core::region::check_name(&name).map_err(|_| FiError::INVAL)?;
    Ok(name)
}

/// This process's user, the first part of every name it makes.
pub(crate) fn uid() -> u32 {
    // SAFETY: getuid has no preconditions.
    unsafe { libc::getuid() }
}

/// The start of every name this user's processes make, in any pid namespace: `rshm_{uid}_`.
pub fn user_prefix() -> String {
    format!("rshm_{}_", uid())
}

/// This process's pid namespace, read once (`generated_name_owner_gone` asks on every retry of
/// a send to an absent peer): the one region headers record.
fn pid_namespace() -> Option<u32> {
    Some(smr_core::liveness::own_namespace()).filter(|&ns| ns != 0)
}

/// The start of every name a process of this user and pid namespace generates:
/// `rshm_{uid}_p{pidns}_`. The namespace keeps containers that share one /dev/shm (and may reuse
/// each other's pids) from ever taking each other's names, and tells `crate::reap` under which
/// names a header that records no namespace (an older build's) may be judged by its pid: a pid
/// means something only in its own namespace. None where /proc does not name the namespace.
pub fn namespace_prefix() -> Option<&'static str> {
    static PREFIX: OnceLock<Option<String>> = OnceLock::new();
    PREFIX.get_or_init(|| pid_namespace().map(|ns| format!("{}p{ns}_", user_prefix()))).as_deref()
}

/// The prefix of every name `generated_name` makes in this process (its pid, not cached: a
/// forked child makes names of its own).
pub fn generated_prefix() -> String {
    let start = namespace_prefix().map_or_else(user_prefix, str::to_string);
    format!("{start}{}_", std::process::id())
}

/// For the engine (`Params::name_owner_gone`): true when `name` was generated in this pid
/// namespace, by any user (`rshm_<uid>_p<pidns>_<pid>_<n>`), and its process is gone. Such a
/// name with no region is a dead process's whose region was reaped, not one still starting.
pub fn generated_name_owner_gone(name: &str) -> bool {
    let Some(ns) = pid_namespace() else { return false };
    let parts: Vec<&str> = name.split('_').collect();
    let ["rshm", uid, pidns, pid, n] = parts[..] else { return false };
    let ours = uid.parse::<u32>().is_ok()
        && pidns.strip_prefix('p').and_then(|p| p.parse::<u32>().ok()) == Some(ns)
        && n.parse::<u32>().is_ok();
    ours && pid.parse::<u32>().is_ok_and(smr_core::liveness::pid_gone)
}

/// A process-unique default name: uid, pid and a counter.
pub fn generated_name() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("{}{n}", generated_prefix())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_name_says_whether_its_process_is_gone() {
        // Ours: alive.
        let mine = generated_name();
        assert!(mine.starts_with(namespace_prefix().expect("a pid namespace")), "{mine}");
        assert!(!generated_name_owner_gone(&mine));
        // A child that has exited and been waited for: gone.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        let ns = pid_namespace().unwrap();
        assert!(generated_name_owner_gone(&format!("rshm_1000_p{ns}_{pid}_0")));
        // Not judged: another pid namespace, a chosen name, a name of another shape.
        assert!(!generated_name_owner_gone(&format!("rshm_1000_p{}_{pid}_0", ns + 1)));
        assert!(!generated_name_owner_gone(&format!("rshm_1000_ns_{pid}")));
        assert!(!generated_name_owner_gone(&format!("rshm_1000_{pid}_0")));
        assert!(!generated_name_owner_gone(&format!("rshm_x_p{ns}_{pid}_0")));
    }
}
