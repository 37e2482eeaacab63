//! Which CPUs a process of ours gave way on lately: one word per CPU in a small file that every
//! rshm process of a user maps (`/dev/shm/rshm-cpus.<uid>`), so that a thread whose yield kept
//! it off its CPU for long can tell whether what ran meanwhile was one of ours.
//!
//! Before a yield a thread writes a token of its own into its CPU's word (`CpuMarks::mark`);
//! after it, the word still holding that token (`CpuMarks::still`) says that no thread of ours
//! yielded on that CPU meanwhile. A thread of ours that waits yields within microseconds, so a
//! long yield whose word was not touched went to something else: a process that is not ours, or
//! one of ours computing. The provider then stops yielding for a while (`idle::yield_cpu`).
//!
//! Nothing here is trusted: any process of the user may write any word. A word garbled by
//! someone else reads as "a thread of ours ran", which keeps the yields going, as they went
//! before this file existed. The file is never removed: it is one line per CPU, shared by every
//! job of the user, as sm2 keeps its `fi_sm2_mmaps`.

use crate::error::Result;
use crate::shm::{Mapping, SharedSafe};
use std::sync::atomic::{AtomicU64, Ordering};

/// One CPU's word, alone in its cache line: threads on different CPUs never share a line.
#[repr(C, align(64))]
pub struct CpuMark {
    token: AtomicU64,
}

// SAFETY: an atomic integer (and padding): every bit pattern is a valid value, and all mutation
// goes through the atomic.
unsafe impl SharedSafe for CpuMark {}

/// The most CPUs the file has a word for; CPUs beyond share words (`CpuMarks::word`), which
/// only makes a long yield look shared with a thread of ours more often.
const MAX_CPUS: usize = 8192;

/// The marks of this user's processes, mapped.
pub struct CpuMarks {
    map: Mapping,
    cpus: usize,
}

impl CpuMarks {
    /// Map the marks of user `uid`, creating the file (or growing it to this machine's CPU
    /// count) if need be.
    pub fn open(uid: u32) -> Result<CpuMarks> {
        // SAFETY: sysconf has no preconditions.
        let configured = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) };
        let cpus = usize::try_from(configured).unwrap_or(1).clamp(1, MAX_CPUS);
        let map = Mapping::open_or_create(&file_name(uid), cpus * size_of::<CpuMark>())?;
        Ok(CpuMarks { map, cpus })
    }

    fn word(&self, cpu: usize) -> Option<&AtomicU64> {
        let at = (cpu % self.cpus * size_of::<CpuMark>()) as u64;
        self.map.at::<CpuMark>(at).ok().map(|m| &m.token)
    }

    /// Write `token` into `cpu`'s word: a thread of ours is about to yield there.
    pub fn mark(&self, cpu: usize, token: u64) {
        if let Some(w) = self.word(cpu) {
            w.store(token, Ordering::Relaxed);
        }
    }

    /// Whether `cpu`'s word still holds `token`: no thread of ours marked it since.
    pub fn still(&self, cpu: usize, token: u64) -> bool {
        self.word(cpu).is_some_and(|w| w.load(Ordering::Relaxed) == token)
    }
}

/// The start of the file's name: not the regions' `rshm_<uid>_`, so that the reaper and the
/// tools that list regions pass it by.
pub const FILE_PREFIX: &str = "rshm-cpus.";

/// The file's name for user `uid`.
pub fn file_name(uid: u32) -> String {
    format!("{FILE_PREFIX}{uid}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_stays_until_another_token_is_written_on_that_cpu() {
        // A uid of its own, so that the test neither sees nor disturbs a real file.
        let uid = 4_000_000_000 + std::process::id() % 1_000_000;
        let a = CpuMarks::open(uid).expect("create");
        let b = CpuMarks::open(uid).expect("open again: a second process's view");
        a.mark(0, 7);
        assert!(a.still(0, 7) && b.still(0, 7), "both views see the mark");
        b.mark(1, 9);
        assert!(a.still(0, 7), "a mark on another CPU leaves it");
        b.mark(0, 8);
        assert!(!a.still(0, 7), "another token on the same CPU replaces it");
        let far = a.cpus * 3;
        a.mark(far, 5);
        assert!(b.still(far % a.cpus, 5), "CPUs beyond the file share its words");
        crate::shm::unlink(&file_name(uid)).expect("remove the test's file");
    }

    /// Every CPU of the machine has a word of its own, in a file named with the prefix that the
    /// region tools pass by.
    #[test]
    fn each_cpu_has_its_own_word() {
        let uid = 4_100_000_000 + std::process::id() % 1_000_000;
        let marks = CpuMarks::open(uid).expect("create");
        assert!(std::path::Path::new(&crate::shm::file_of(&format!("{FILE_PREFIX}{uid}"))).exists());
        for cpu in 0..marks.cpus {
            marks.mark(cpu, 1_000 + cpu as u64);
        }
        for cpu in 0..marks.cpus {
            assert!(marks.still(cpu, 1_000 + cpu as u64), "CPU {cpu} of {} lost its mark", marks.cpus);
        }
        crate::shm::unlink(&file_name(uid)).expect("remove the test's file");
    }
}
