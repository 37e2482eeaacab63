//! Which of this process's addresses are mapped, and with what access: the check that stands
//! in for a registration's bounds when the registration is all of memory.
//!
//! A registration of all of memory from address 0 (`fi_mr_reg(NULL, SIZE_MAX)`, OpenSHMEM's
//! remote-virtual-addressing build) lets a peer name any address. Where this process copies for
//! the peer (writes and reads carried in commands or through SAR, atomics), an address that is
//! not mapped, or not with the access the operation needs, would fault the process; the kernel
//! answers CMA with EFAULT instead. So such an access is looked up here first and refused unless
//! every byte lies in mappings with that access.
//!
//! The mappings are read from `/proc/self/maps` and kept with the registration (under the
//! domain's lock, so no lock of their own): read again when an access is not found in them
//! (memory mapped since) and when they are older than `FRESH_FOR` (looked at every `CLOCK_EVERY`
//! accesses), which bounds how long memory unmapped or protected since still passes. Not
//! covered: the application changing a mapping between the check and the copy, and a file
//! mapping that runs past its file's end (SIGBUS). Special mappings ([vvar], [vsyscall]) are
//! never offered.

use smr_core::clock::Instant;
use std::time::Duration;

/// How long a reading of the mappings is trusted for accesses it allows. A reading costs tens
/// of microseconds (the kernel writes a line per mapping): at most 0.1% of a busy target's time.
const FRESH_FOR: Duration = Duration::from_millis(100);
/// The reading's age is looked at on every this many accesses, not on each: the clock read cost
/// more than the rest of the check (about 60 of 90 instructions).
const CLOCK_EVERY: u32 = 16;

pub const READ: u8 = 1;
pub const WRITE: u8 = 2;

/// One mapping: `start..end` with `READ` and/or `WRITE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Span {
    start: usize,
    end: usize,
    access: u8,
}

/// The mappings of one reading of `/proc/self/maps`, sorted by address.
#[derive(Debug, Default)]
pub struct Mappings {
    spans: Vec<Span>,
    read_at: Option<Instant>,
    /// The span the last allowed access lay in: OpenSHMEM's accesses fall in its symmetric heap,
    /// one mapping, so most are answered by two compares instead of a search.
    last: usize,
    /// Accesses since the reading's age was last looked at.
    unclocked: u32,
}

impl Mappings {
    fn parse(text: &str) -> Vec<Span> {
        let mut spans: Vec<Span> = text.lines().filter_map(parse_line).collect();
        spans.sort_by_key(|s| s.start);
        spans
    }

    /// Whether `addr..addr + len` lies in the span the last allowed access lay in (or is empty).
    #[inline]
    fn in_last(&self, addr: usize, len: usize, access: u8) -> bool {
        let Some(s) = self.spans.get(self.last) else { return len == 0 };
        len == 0
            || (s.start <= addr && addr.checked_add(len).is_some_and(|end| end <= s.end) && s.access & access == access)
    }

    /// Whether `addr..addr + len` lies in mappings, one after another with no gap, that all
    /// allow `access`. An empty access touches nothing.
    fn allow(&mut self, addr: usize, len: usize, access: u8) -> bool {
        if len == 0 {
            return true;
        }
        let Some(end) = addr.checked_add(len) else { return false };
        let first = self.spans.partition_point(|s| s.end <= addr);
        let mut covered = addr;
        for s in &self.spans[first..] {
            if s.start > covered || s.access & access != access {
                return false;
            }
            covered = s.end;
            if covered >= end {
                self.last = first;
                return true;
            }
        }
        false
    }
}

/// A line of `/proc/self/maps`: "start-end perms offset dev inode [path]".
fn parse_line(line: &str) -> Option<Span> {
    let mut fields = line.split_ascii_whitespace();
    let (start, end) = fields.next()?.split_once('-')?;
    let perms = fields.next()?.as_bytes();
    let path = fields.nth(3).unwrap_or("");
    if path.starts_with("[vvar") || path == "[vsyscall]" {
        return None;
    }
    let bit = |at: usize, flag: u8, access: u8| if perms.get(at) == Some(&flag) { access } else { 0 };
    let access = bit(0, b'r', READ) | bit(1, b'w', WRITE);
    Some(Span { start: usize::from_str_radix(start, 16).ok()?, end: usize::from_str_radix(end, 16).ok()?, access })
}

impl Mappings {
    /// Whether this process may copy `len` bytes at `addr` for a peer with `access` (`READ`,
    /// `WRITE` or both): every byte mapped with it, as far as a reading at most `FRESH_FOR` old,
    /// or one taken now, says.
    #[inline]
    pub fn allows(&mut self, addr: usize, len: usize, access: u8) -> bool {
        let fresh = self.fresh();
        if fresh && self.in_last(addr, len, access) {
            return true;
        }
        self.allows_searched(addr, len, access, fresh)
    }

    /// `allows` when the access is not in the span of the last one (searched in the reading if
    /// it is `fresh`, as `fresh` judged it), or the reading is stale.
    #[cold]
    #[inline(never)]
    fn allows_searched(&mut self, addr: usize, len: usize, access: u8, fresh: bool) -> bool {
        if fresh && self.allow(addr, len, access) {
            return true;
        }
        self.read();
        self.allow(addr, len, access)
    }

    /// Whether the reading may be trusted: taken, and not found older than `FRESH_FOR` when its
    /// age was last looked at.
    fn fresh(&mut self) -> bool {
        let Some(at) = self.read_at else { return false };
        self.unclocked += 1;
        if self.unclocked < CLOCK_EVERY {
            return true;
        }
        self.unclocked = 0;
        at.elapsed() < FRESH_FOR
    }

    #[cold]
    fn read(&mut self) {
        *self = match smr_core::fd_limit::retry_io(|| std::fs::read_to_string("/proc/self/maps")) {
            Ok(text) => {
                Mappings { spans: Mappings::parse(&text), read_at: Some(Instant::now()), ..Mappings::default() }
            }
            Err(e) => {
                crate::warn!(
                    Mr,
                    "cannot read /proc/self/maps ({e}): refusing accesses through a registration of all memory"
                );
                Mappings::default()
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
00001000-00003000 r--p 00000000 00:00 0
00003000-00005000 rw-p 00000000 00:00 0          [heap]
00005000-00006000 ---p 00000000 00:00 0
00007000-00008000 r-xp 00000000 08:01 1234       /usr/lib/libc.so.6
00008000-00009000 rw-s 00000000 00:1a 99         /dev/shm/x
0000a000-0000b000 r--p 00000000 00:00 0          [vvar]
";

    fn mappings() -> Mappings {
        Mappings { spans: Mappings::parse(MAPS), ..Mappings::default() }
    }

    #[test]
    fn an_access_needs_every_byte_mapped_with_its_access() {
        let mut m = mappings();
        assert!(m.allow(0x1000, 0x2000, READ), "read-only memory read");
        assert!(!m.allow(0x1000, 8, WRITE), "read-only memory written");
        assert!(m.allow(0x2ff8, 16, READ), "across two readable mappings");
        assert!(!m.allow(0x2ff8, 16, WRITE), "into writable memory from read-only memory");
        assert!(m.allow(0x3000, 0x2000, READ | WRITE), "the whole writable mapping");
        assert!(!m.allow(0x4ff8, 16, READ), "into PROT_NONE memory");
        assert!(!m.allow(0x6000, 8, READ), "a gap");
        assert!(!m.allow(0x5ff8, 0x1010, READ), "across a gap");
        assert!(m.allow(0x8000, 0x1000, WRITE), "shared memory");
        assert!(!m.allow(0x8ff8, 16, WRITE), "off the end of the last usable mapping");
        assert!(!m.allow(0xa000, 8, READ), "[vvar] is never offered");
        assert!(!m.allow(0x10, 8, READ), "below every mapping");
        assert!(!m.allow(usize::MAX - 4, 8, READ), "wrapping around");
        assert!(m.allow(0x6000, 0, WRITE), "an empty access touches nothing");
    }

    #[test]
    fn this_process_memory_is_found_with_its_protection() {
        let page = 4096;
        // SAFETY: a fresh anonymous mapping, ours alone; only its protection changes below.
        let at = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                3 * page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(at, libc::MAP_FAILED);
        let a = at as usize;
        // SAFETY: the last two pages of the mapping above, which nothing reads or writes.
        let protected = unsafe {
            libc::mprotect((a + page) as *mut libc::c_void, page, libc::PROT_READ) == 0
                && libc::mprotect((a + 2 * page) as *mut libc::c_void, page, libc::PROT_NONE) == 0
        };
        assert!(protected);
        let mut m = Mappings::default();
        m.read();
        assert!(m.read_at.is_some() && !m.spans.is_empty(), "this process's mappings read");
        m.read_at = None;
        // A reading that does not find an access's memory is taken again.
        assert!(m.allows(a, page, READ | WRITE));
        assert!(m.allows(a, 2 * page, READ));
        assert!(!m.allows(a, 2 * page, WRITE));
        assert!(!m.allows(a + 2 * page, 8, READ));
        // SAFETY: the mapping above, used no more.
        assert_eq!(unsafe { libc::munmap(at, 3 * page) }, 0);
        assert!(m.allows(a, 8, READ), "a fresh reading is trusted");
        m.read_at = None;
        assert!(!m.allows(a, 8, READ), "unmapped once read again");
    }
}
