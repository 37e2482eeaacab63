//! Regions that dead processes left in /dev/shm, found and removed.
//!
//! A process killed with SIGKILL (the OOM killer, a launcher tearing down a failed job) never
//! unlinks its regions, and each keeps the pages it touched of /dev/shm, which is memory, until
//! someone removes the file. `Region::create` reclaims a dead region only when the same name is
//! created again; a name that carries a pid rarely is. So whoever can tell which regions are dead
//! removes them: the `rshm-regions clean` command, and the provider before its first endpoint
//! (`reap_dead` over the names its own process namespace generates).
//!
//! A region is dead when its header names an owner process that no longer runs (pid and start
//! time, `region::inspect`), or when it has no header long after its creation (a creation that
//! died half-way). Removing its name leaves every mapping of it valid: peers that mapped it go on
//! failing what they sent to it as before.

use crate::error::Result;
use crate::liveness::ProcessIdentity;
use crate::region::{inspect, Occupant};
use crate::shm::SHM_DIR;
use std::os::unix::fs::MetadataExt;

/// A region removed by `reap_dead`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reaped {
    pub name: String,
    /// The file's size (its pages in use were at most this).
    pub size: u64,
    pub owner: Owner,
}

/// The dead owner a region's header named; None for a creation that died before writing it.
pub type Owner = Option<ProcessIdentity>;

/// Remove every region in /dev/shm whose name starts with `prefix` and whose owner is dead:
/// by its pid when it ran in our pid namespace, by its owner lock when in another
/// (`region::inspect`). A header that does not say which namespace its owner ran in (a region
/// of a build before layout 17, `owner_ns` 0) is judged by its pid, which is right only in that
/// namespace: such a region is removed only under `own_prefix`, the names our namespace
/// generates. Returns those removed. Files that vanish, cannot be read or cannot be removed
/// meanwhile are passed over: another process may be reaping or reclaiming them at the same
/// time.
pub fn reap_dead(prefix: &str, own_prefix: &str) -> Result<Vec<Reaped>> {
    let dir = crate::fd_limit::retry_io(|| std::fs::read_dir(SHM_DIR))?;
    let mut reaped = Vec::new();
    for dirent in dir.flatten() {
        let Ok(name) = dirent.file_name().into_string() else { continue };
        if !name.starts_with(prefix) {
            continue;
        }
        let Ok(meta) = dirent.metadata() else { continue };
        if !meta.is_file() {
            continue;
        }
        if let Ok(Some(owner)) = unlink_dead(&name, meta.ino(), name.starts_with(own_prefix)) {
            reaped.push(Reaped { name, size: meta.len(), owner });
        }
    }
    Ok(reaped)
}

/// Unlink region `name` if it is still the file with inode `inode` and its owner is still dead.
/// Between a look at a region and its removal another process may have reclaimed the name
/// (`Region::create` of the same name, by a process that got the dead one's pid) and made a live
/// region there: Ok(false) then, and when the file is gone (another process reaping it at the
/// same time: only one of them removes it).
pub fn unlink_if_dead(name: &str, inode: u64) -> Result<bool> {
    Ok(unlink_dead(name, inode, true)?.is_some())
}

/// `unlink_if_dead`, saying whose region it removed: its one look at the header is both the
/// judgement and the report. `unplaced_judged`: whether an owner the header places in no pid
/// namespace may be judged by its pid here.
fn unlink_dead(name: &str, inode: u64, unplaced_judged: bool) -> Result<Option<Owner>> {
    let same_file = std::fs::metadata(format!("{SHM_DIR}/{name}")).is_ok_and(|meta| meta.ino() == inode);
    if !same_file {
        return Ok(None);
    }
    let Ok(Occupant::Dead(owner)) = inspect(name) else { return Ok(None) };
    if owner.is_some_and(|o| o.ns == 0) && !unplaced_judged {
        return Ok(None);
    }
    Ok(crate::shm::remove(name)?.then_some(owner))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{Counts, RegionHeader};
    use crate::region::Region;

    fn counts() -> Counts {
        Counts { cmd_len: 16, resp_len: 16, inject_count: 4, sar_count: 2, sar_size: 4096, max_peers: 8 }
    }

    fn exists(name: &str) -> bool {
        std::path::Path::new(&format!("{SHM_DIR}/{name}")).exists()
    }

    /// A region whose header claims an owner that cannot exist, as one left by a SIGKILL.
    fn left_by_dead_process(name: &str) {
        let owner = Region::create(name, counts(), 0).unwrap();
        // A start time no process has, and another incarnation, so that dropping `owner` unmaps
        // it without unlinking the file (a killed owner never unlinks).
        edit_header(name, |h| {
            h.owner_start = 1;
            h.incarnation ^= 1;
        });
        drop(owner);
    }

    #[test]
    fn only_dead_regions_under_the_prefix_are_removed() {
        let prefix = format!("rshm_reaptest_{}_", std::process::id());
        let dead = format!("{prefix}dead");
        left_by_dead_process(&dead);
        let alive = Region::create(&format!("{prefix}alive"), counts(), 0).unwrap();
        // A file with no header yet, just created: probably being created now, left alone.
        let young = format!("{prefix}young");
        drop(crate::shm::Mapping::create(&young, 4096).unwrap());
        // Dead too, but under another prefix: not ours to judge.
        let other = format!("rshm_reaptest_other_{}", std::process::id());
        left_by_dead_process(&other);

        let reaped = reap_dead(&prefix, &prefix).unwrap();
        assert_eq!(reaped.len(), 1, "{reaped:?}");
        assert_eq!(reaped[0].name, dead);
        assert!(reaped[0].owner.is_some_and(|o| o.start == 1));
        assert!(reaped[0].size > 0);
        assert!(!exists(&dead));
        assert!(exists(&format!("{prefix}alive")) && exists(&young) && exists(&other));
        // Nothing dead is left under the prefix: a second pass removes nothing.
        assert_eq!(reap_dead(&prefix, &prefix).unwrap(), vec![]);

        drop(alive);
        crate::shm::unlink(&young).unwrap();
        crate::shm::unlink(&other).unwrap();
    }

    /// Rewrite the header of the region `name` (through a view of our own, unmapped on return).
    fn edit_header(name: &str, edit: impl FnOnce(&mut RegionHeader)) {
        let map = crate::shm::Mapping::open(name).unwrap();
        // SAFETY: test-only rewriting of a region's header, as its owner wrote it; nobody else
        // maps this file.
        edit(unsafe { &mut *map.bytes_ptr(0, 4096).unwrap().cast::<RegionHeader>() });
    }

    /// Regions of owners in other pid namespaces (containers sharing our /dev/shm) are judged
    /// by their owner lock: one whose owner still holds it stays, one whose owner let it go is
    /// removed, whatever its name. A header placing its owner in no namespace (an older
    /// build's) is judged by its pid only under the names our own namespace generates.
    #[test]
    fn regions_of_other_pid_namespaces_are_judged_by_their_lock() {
        let prefix = format!("rshm_reaptest_ns_{}_", std::process::id());
        let own_prefix = format!("{prefix}p_");
        let other_ns = crate::liveness::own_namespace().wrapping_add(1);
        let unused_pid = crate::liveness::dead_pid();
        // Its pid is dead here, but it is another namespace's, and its owner holds the lock.
        let live = Region::create(&format!("{prefix}live"), counts(), 0).unwrap();
        edit_header(live.name(), |h| {
            h.owner_pid = unused_pid;
            h.owner_ns = other_ns;
        });
        // The same, with the owner gone: its lock went with it.
        let gone = format!("{prefix}gone");
        left_by_dead_process(&gone);
        edit_header(&gone, |h| h.owner_ns = other_ns);
        // Dead by pid, but no namespace named: judged under our own prefix only.
        let unplaced_own = format!("{own_prefix}unplaced");
        let unplaced_other = format!("{prefix}unplaced");
        for name in [&unplaced_own, &unplaced_other] {
            left_by_dead_process(name);
            edit_header(name, |h| h.owner_ns = 0);
        }

        let mut reaped: Vec<String> = reap_dead(&prefix, &own_prefix).unwrap().into_iter().map(|r| r.name).collect();
        reaped.sort();
        assert_eq!(reaped, vec![gone.clone(), unplaced_own.clone()]);
        assert!(exists(live.name()) && exists(&unplaced_other));
        drop(live);
        crate::shm::unlink(&unplaced_other).unwrap();
    }

    #[test]
    fn a_name_taken_again_since_the_look_is_not_removed() {
        let name = format!("rshm_reaptest_again_{}", std::process::id());
        left_by_dead_process(&name);
        let ino = std::fs::metadata(format!("{SHM_DIR}/{name}")).unwrap().ino();
        // A live process reclaims the name (unlink, create) between our look and our unlink.
        let successor = Region::create(&name, counts(), 0).unwrap();
        assert!(!unlink_if_dead(&name, ino).unwrap(), "another file now");
        // The file looked at, its owner still dead: removed.
        let dead = format!("rshm_reaptest_looked_{}", std::process::id());
        left_by_dead_process(&dead);
        let dead_ino = std::fs::metadata(format!("{SHM_DIR}/{dead}")).unwrap().ino();
        assert!(unlink_if_dead(&dead, dead_ino).unwrap(), "the dead region looked at");
        assert!(!exists(&dead));
        let new_ino = std::fs::metadata(format!("{SHM_DIR}/{name}")).unwrap().ino();
        assert!(!unlink_if_dead(&name, new_ino).unwrap(), "the same file, but alive");
        assert!(exists(&name));
        drop(successor);
        assert!(!unlink_if_dead(&name, new_ino).unwrap(), "gone");
    }
}
