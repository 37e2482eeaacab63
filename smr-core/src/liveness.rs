//! Who owns a region, and whether that process still lives.
//!
//! A process is identified by its pid and its start time (field 22 of /proc/<pid>/stat, in clock
//! ticks since boot), so a recycled pid is not mistaken for the old owner. This works across
//! `fork` (unlike a file lock, which the child would inherit) and needs no signal handlers.
//!
//! A pid means something only in its own pid namespace: a process in another one (a container
//! sharing this /dev/shm) would look dead from here, or, worse, like some unrelated process of
//! ours. So an identity also names its namespace, nothing is judged by a pid of another
//! namespace, and such a process is judged instead by the lock it holds on its region file for
//! as long as it lives (`hold_owner_lock`, `Watch::by_lock`), which the kernel drops however
//! the process dies.

use crate::error::{Error, Result};
use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

/// How long a look that found a process alive stands for the CMA copies to or from it that
/// follow (`Watch::alive_lately`). A process that dies leaves its pid to a new one only once
/// its parent has reaped it and the kernel's cyclic allocator has come round to that number
/// again, which takes far longer; in between, a copy to or from the dead process's pid finds no
/// process and fails. The look is a system call (a `poll` of the pidfd, 0.2 us here, and about
/// as much again in what it evicts): made before every CMA message it cost a 16 KiB ping-pong
/// 0.3-0.7 us of 2.5-3.5 one-way (docs/perf/protocols.md). Timed on the coarse clock, so a
/// look stands for up to its tick more (1-4 ms), still far below a pid's reuse.
pub const ALIVE_FOR: Duration = Duration::from_millis(1);

/// A process, unambiguously.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProcessIdentity {
    pub pid: u32,
    pub start: u64,
    /// Its pid namespace (`own_namespace`), 0 where unknown: where its pid and start mean it.
    pub ns: u32,
}

impl ProcessIdentity {
    /// The calling process.
    pub fn current() -> Result<ProcessIdentity> {
        let pid = std::process::id();
        let start = start_time(pid)?.ok_or(Error::Invalid("cannot read own /proc/self/stat"))?;
        Ok(ProcessIdentity { pid, start, ns: own_namespace() })
    }

    /// Whether its pid names it here: it lives in this process's pid namespace (or a namespace
    /// is unknown, which then counts as this one).
    pub fn pid_is_ours(&self) -> bool {
        let mine = own_namespace();
        self.ns == 0 || mine == 0 || self.ns == mine
    }

    /// True while the process runs (a zombie counts as dead: it will never send again). A
    /// process of another pid namespace cannot be judged from here by its pid and counts as
    /// alive: its region's lock judges it (`Watch::by_lock`).
    pub fn is_alive(&self) -> bool {
        if !self.pid_is_ours() {
            return true;
        }
        match read_stat(self.pid) {
            Ok(Some(stat)) => stat.start == self.start && stat.state != 'Z' && stat.state != 'X',
            Ok(None) => false,
            // An unreadable /proc (hidepid) must not declare live peers dead.
            Err(_) => true,
        }
    }
}

/// True if no process `pid` can write any more: none exists, or it is a zombie. Used before
/// reclaiming a ring slot that `pid` left half-written, so it errs towards "alive": a recycled
/// pid, or a /proc we cannot read, keeps the slot waiting rather than risk a live writer.
pub fn pid_gone(pid: u32) -> bool {
    match read_stat(pid) {
        // A thread-group leader that exited before its other threads shows as a zombie too:
        // gone only once no other thread is left.
        Ok(Some(stat)) if stat.state == 'Z' || stat.state == 'X' => {
            crate::fd_limit::retry_io(|| std::fs::read_dir(format!("/proc/{pid}/task")))
                .map(|d| d.count() <= 1)
                .unwrap_or(true)
        }
        Ok(Some(_)) => false,
        Ok(None) => true,
        Err(_) => false,
    }
}

/// A cheap, repeatable liveness check of one process: a pidfd (which pins the process, so a
/// recycled pid cannot fool it) polled without blocking, /proc where pidfds are unavailable, or,
/// for a process of another pid namespace, the lock it holds on its region file.
#[derive(Debug)]
pub struct Watch {
    ident: ProcessIdentity,
    how: How,
    /// When a look last found the process alive (`alive_lately`).
    seen_alive: Option<crate::clock::Instant>,
}

#[derive(Debug)]
enum How {
    /// Shared by every watch of the process in this process (`shared_pidfd`).
    Pidfd(Arc<OwnedFd>),
    Proc,
    /// An fd of the file whose owner lock the process holds (`hold_owner_lock`).
    Lock(Arc<OwnedFd>),
}

impl Watch {
    /// A watch by pid: for a process of this pid namespace (one of another always reads as
    /// alive; `by_lock` watches those).
    pub fn new(ident: ProcessIdentity) -> Watch {
        if !ident.pid_is_ours() {
            return Watch { ident, how: How::Proc, seen_alive: None };
        }
        let how = shared_pidfd(ident).map_or(How::Proc, How::Pidfd);
        Watch { ident, how, seen_alive: None }
    }

    /// A watch of the process that holds the owner lock on `file` (an fd of its region file).
    pub fn by_lock(ident: ProcessIdentity, file: Arc<OwnedFd>) -> Watch {
        Watch { ident, how: How::Lock(file), seen_alive: None }
    }

    pub fn ident(&self) -> ProcessIdentity {
        self.ident
    }

    /// Whether the process's pid can be used here (for CMA): false for one watched by its lock.
    pub fn pid_usable(&self) -> bool {
        !matches!(self.how, How::Lock(_))
    }

    /// False once the process has exited (about a microsecond with a pidfd or a lock).
    pub fn alive(&self) -> bool {
        match &self.how {
            How::Pidfd(fd) => {
                let mut pfd = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
                // SAFETY: one valid pollfd, zero timeout.
                let n = unsafe { libc::poll(&mut pfd, 1, 0) };
                // A pidfd polls readable when its process exits.
                !(n > 0 && pfd.revents & libc::POLLIN != 0)
            }
            How::Proc => self.ident.is_alive(),
            How::Lock(file) => owner_lock_held(file),
        }
    }

    /// Alive at a look under `ALIVE_FOR` ago, or at one made now: for the CMA copies made to
    /// and from its pid, which would reach whatever process had the pid, were it reused.
    pub fn alive_lately(&mut self) -> bool {
        if self.seen_alive.is_some_and(|at| at.elapsed() < ALIVE_FOR) {
            return true;
        }
        let alive = self.alive();
        self.seen_alive = alive.then(crate::clock::Instant::now);
        alive
    }
}

/// The pidfds of the processes watched, one per process however many watches it has: an
/// endpoint watches a peer as the receiver of its messages and as a sender to it, and a
/// process may hold several endpoints, each watching the same peers. Weak, so that the last
/// watch of a process closes its pidfd.
static PIDFDS: Mutex<PidfdCache> = Mutex::new(PidfdCache { by_process: None, prune_at: 64 });

struct PidfdCache {
    by_process: Option<HashMap<ProcessIdentity, Weak<OwnedFd>>>,
    /// Entries whose watches have all gone are dropped when the map reaches this length.
    prune_at: usize,
}

/// A pidfd of `ident` (see `PIDFDS`), None where pidfds are unavailable or the process is gone.
fn shared_pidfd(ident: ProcessIdentity) -> Option<Arc<OwnedFd>> {
    // Another thread holds the lock for a system call or two; in a child forked while one held
    // it, nobody ever releases it: after that many tries, a pidfd of this watch's own.
    const TRIES: u32 = 1_000;
    let mut tries = 0;
    let mut cache = loop {
        match PIDFDS.try_lock() {
            Ok(cache) => break cache,
            Err(std::sync::TryLockError::Poisoned(poisoned)) => break poisoned.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) if tries < TRIES => {
                tries += 1;
                std::thread::yield_now();
            }
            Err(std::sync::TryLockError::WouldBlock) => return open_pidfd(ident),
        }
    };
    let cache = &mut *cache;
    let by_process = cache.by_process.get_or_insert_with(HashMap::new);
    if let Some(fd) = by_process.get(&ident).and_then(Weak::upgrade) {
        return Some(fd);
    }
    let fd = open_pidfd(ident)?;
    by_process.insert(ident, Arc::downgrade(&fd));
    if by_process.len() >= cache.prune_at {
        by_process.retain(|_, watched| watched.strong_count() > 0);
        cache.prune_at = (2 * by_process.len()).max(64);
    }
    Some(fd)
}

/// A new pidfd of `ident`, None where pidfds are unavailable or the process is gone.
fn open_pidfd(ident: ProcessIdentity) -> Option<Arc<OwnedFd>> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1. (One per
    // peer process: one more try after raising the soft limit if the process ran out,
    // `fd_limit`.)
    let fd =
        unsafe { crate::fd_limit::retry_emfile(|| libc::syscall(libc::SYS_pidfd_open, ident.pid as libc::pid_t, 0)) };
    // The pidfd names whatever process has the pid now: make sure it is the one we mean.
    fd.ok().filter(|_| ident.is_alive()).map(Arc::new)
}

/// The owner lock: a shared OFD lock (`fcntl(F_OFD_SETLK)`) on the first byte of a region
/// file. It belongs to an open file description, not to a pid, so it means the same in every
/// pid namespace. The owner takes it through a description of its own that only an unforked
/// mapping keeps (`shm::UnforkedDescription`), so the kernel drops it when the owner closes its
/// region or dies however it dies, and a child the owner forked (and that lives on without exec)
/// does not keep it.
fn first_byte(kind: libc::c_int) -> libc::flock {
    // SAFETY: flock is plain data; all-zero is a valid value (and l_pid must be 0 for OFD locks).
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_len = 1;
    fl
}

/// The owner lock on a region file, held until this is dropped.
pub struct OwnerLock {
    _held_through: crate::shm::UnforkedDescription,
}

/// Take the owner lock on the file `name` that `region_file` maps.
pub fn hold_owner_lock(name: &str, region_file: &crate::shm::Mapping) -> Result<OwnerLock> {
    let file = crate::shm::reopen(name, region_file)?;
    let fl = first_byte(libc::F_RDLCK);
    // SAFETY: F_OFD_SETLK reads one valid struct flock.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &fl) } != 0 {
        return Err(Error::last_os());
    }
    Ok(OwnerLock { _held_through: crate::shm::UnforkedDescription::keep(file)? })
}

/// Whether some process holds the owner lock on `file`'s file. Errs towards "held": a lock
/// query that fails must not declare a live owner dead.
pub fn owner_lock_held(file: &OwnedFd) -> bool {
    let mut fl = first_byte(libc::F_WRLCK);
    // SAFETY: F_OFD_GETLK reads and fills one valid struct flock.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_GETLK, &mut fl) };
    rc != 0 || fl.l_type != libc::F_UNLCK as libc::c_short
}

/// This process's pid namespace as identities record it (the namespace's inode number, which
/// the kernel keeps in 32 bits), 0 where /proc does not tell. Read once.
pub fn own_namespace() -> u32 {
    static NS: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *NS.get_or_init(|| pid_namespace().unwrap_or(0))
}

/// The calling process's pid namespace (the inode number of /proc/self/ns/pid), or None where
/// /proc does not tell.
fn pid_namespace() -> Option<u32> {
    let link = std::fs::read_link("/proc/self/ns/pid").ok()?;
    parse_namespace_link(link.to_str()?)
}

/// "pid:[4026531836]" -> 4026531836.
fn parse_namespace_link(link: &str) -> Option<u32> {
    link.strip_prefix("pid:[")?.strip_suffix(']')?.parse().ok()
}

struct Stat {
    state: char,
    /// The kernel's task flags (field 9).
    flags: u64,
    start: u64,
}

/// The task flag of a process in `do_exit` (`PF_EXITING`, include/linux/sched.h): set as it
/// starts to exit, before its memory is torn down.
const PF_EXITING: u64 = 0x4;

/// Whether process `pid` has begun to exit, or is gone: no longer in /proc, a zombie, or flagged
/// exiting. Its memory may be going before its pidfd reads as exited, and a CMA copy from it
/// then fails with EFAULT: this says whether that failure was its death.
pub fn exiting(pid: u32) -> bool {
    match read_stat(pid) {
        Ok(Some(stat)) => stat.state == 'Z' || stat.state == 'X' || stat.flags & PF_EXITING != 0,
        Ok(None) => true,
        Err(_) => false,
    }
}

fn start_time(pid: u32) -> Result<Option<u64>> {
    Ok(read_stat(pid)?.map(|s| s.start))
}

/// Parse /proc/<pid>/stat; `None` when no such process exists.
fn read_stat(pid: u32) -> Result<Option<Stat>> {
    let path = format!("/proc/{pid}/stat");
    let text = match crate::fd_limit::retry_io(|| std::fs::read_to_string(&path)) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    parse_stat(&text).map(Some).ok_or(Error::Corrupt("unparsable /proc stat"))
}

/// The command name may hold spaces and parentheses: fields are counted after the last ')'.
fn parse_stat(text: &str) -> Option<Stat> {
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?.chars().next()?;
    // After the state (field 3): the flags are field 9 (skip 4..=8), the start time field 22
    // (skip 10..=21).
    let flags = fields.nth(5)?.parse().ok()?;
    let start = fields.nth(12)?.parse().ok()?;
    Some(Stat { state, flags, start })
}

/// Tests: a pid no process has any more (a child that exited and was reaped).
#[cfg(test)]
pub(crate) fn dead_pid() -> u32 {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_is_exiting_once_flagged_a_zombie_or_gone() {
        // Fields 3 (state), 9 (flags) and 22 (start) of a stat line whose name holds ") (".
        let line = |state: char, flags: u64| {
            format!("42 (a) (b) {state} 1 2 3 4 5 {flags} 7 8 9 10 11 12 13 14 15 16 17 18 99 20 21")
        };
        let stat = parse_stat(&line('R', 0x4 | 0x40)).expect("parsed");
        assert_eq!((stat.state, stat.flags & PF_EXITING, stat.start), ('R', PF_EXITING, 99));
        assert!(!exiting(std::process::id()), "this process runs on");
        // A child that has exited but is not reaped yet: a zombie.
        let mut child = std::process::Command::new("true").spawn().expect("spawn true");
        let pid = child.id();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while read_stat(pid).ok().flatten().is_some_and(|s| s.state != 'Z') && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert!(exiting(pid), "a zombie");
        child.wait().expect("reap");
    }

    #[test]
    fn pid_namespace_is_read_and_parsed() {
        assert_eq!(parse_namespace_link("pid:[4026531836]"), Some(4026531836));
        assert_eq!(parse_namespace_link("net:[4026531836]"), None);
        assert_eq!(parse_namespace_link("pid:[]"), None);
        // This process's namespace: the inode of /proc/self/ns/pid, as every process of it reads.
        let ns = pid_namespace().expect("/proc/self/ns/pid on Linux");
        let inode = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata("/proc/self/ns/pid").unwrap());
        assert_eq!(u64::from(ns), inode);
        assert_eq!(own_namespace(), ns);
    }

    #[test]
    fn parses_names_with_spaces_and_parens() {
        let line = "4242 (we ird) (name)) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 987654 20 21";
        let s = parse_stat(line).unwrap();
        assert_eq!(s.state, 'S');
        assert_eq!(s.start, 987654);
        assert!(parse_stat("garbage").is_none());
    }

    #[test]
    fn self_is_alive_and_a_reaped_child_is_not() {
        let me = ProcessIdentity::current().unwrap();
        assert!(me.is_alive());
        assert!(!ProcessIdentity { start: me.start + 1, ..me }.is_alive());
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let ident = ProcessIdentity {
            pid: child.id(),
            start: start_time(child.id()).unwrap().unwrap_or(0),
            ns: own_namespace(),
        };
        child.wait().unwrap();
        assert!(!ident.is_alive());
    }

    /// The pidfd a watch of a child of ours polls.
    fn pidfd_of(w: &Watch) -> Arc<OwnedFd> {
        match &w.how {
            How::Pidfd(fd) => Arc::clone(fd),
            other => panic!("a child of ours watched by {other:?}"),
        }
    }

    /// Every watch of one process in this process polls one pidfd (`PIDFDS`), which goes with
    /// the last of them; and it tells that process's death to each.
    #[test]
    fn watches_of_one_process_share_its_pidfd() {
        let (mut child, ident) = sleeping_child("30");
        let (a, b) = (Watch::new(ident), Watch::new(ident));
        let fd = pidfd_of(&a);
        assert!(Arc::ptr_eq(&fd, &pidfd_of(&b)), "two pidfds for one process");
        // This test's `fd`, `a`'s and `b`'s: the cache holds it weakly.
        assert_eq!(Arc::strong_count(&fd), 3);
        let me = Watch::new(ProcessIdentity::current().unwrap());
        assert!(!Arc::ptr_eq(&fd, &pidfd_of(&me)), "another process's pidfd");
        assert!(a.alive() && b.alive());
        // With the cache's lock held for ever (a child forked while another thread held it),
        // a watch opens a pidfd of its own instead of waiting.
        let held = PIDFDS.lock().unwrap();
        let c = Watch::new(ident);
        drop(held);
        assert!(!Arc::ptr_eq(&fd, &pidfd_of(&c)) && c.alive());
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!a.alive() && !b.alive() && !c.alive(), "a watch missed the death");
        // A watch made after the death shares the dead process's pidfd, and reads it dead.
        let late = Watch::new(ident);
        assert!(!late.alive());
        let weak = Arc::downgrade(&fd);
        drop((a, b, late, fd));
        assert_eq!(weak.strong_count(), 0, "the pidfd outlived its watches");
    }

    /// As it grows, the cache of pidfds forgets the processes no longer watched (a process
    /// watched by many endpoints over a long run would otherwise stay in it for good) and keeps
    /// those still watched: a watch made after that shares their pidfd still.
    #[test]
    fn the_pidfd_cache_forgets_processes_no_longer_watched() {
        let cached = |ident: &ProcessIdentity| {
            let cache = PIDFDS.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            cache.by_process.as_ref().is_some_and(|by_process| by_process.contains_key(ident))
        };
        let (mut kept_child, kept) = sleeping_child("30");
        // A watch made while other tests' threads hold the cache's lock for long (a loaded
        // host) takes a pidfd of its own, outside the cache (`shared_pidfd`'s tries): made
        // again until it is in.
        let watch = (0..100).map(|_| Watch::new(kept)).find(|_| cached(&kept)).expect("never in the cache");
        let mut first = None;
        // The cache prunes when it reaches `prune_at` entries (64, or twice those still watched
        // by other tests): a few hundred processes watched once each are more than enough.
        for _ in 0..300 {
            let (mut child, ident) = sleeping_child("30");
            drop(Watch::new(ident));
            child.kill().unwrap();
            child.wait().unwrap();
            if !cached(first.get_or_insert(ident)) {
                break;
            }
        }
        assert!(!cached(&first.unwrap()), "a process no longer watched stayed in the cache");
        assert!(cached(&kept), "a process still watched was forgotten");
        let shared = (0..100).any(|_| Arc::ptr_eq(&pidfd_of(&watch), &pidfd_of(&Watch::new(kept))));
        assert!(shared, "a second pidfd for one process");
        kept_child.kill().unwrap();
        kept_child.wait().unwrap();
    }

    #[test]
    fn pid_gone_after_exit_not_before() {
        assert!(!pid_gone(std::process::id()));
        let mut child = std::process::Command::new("sleep").arg("5").spawn().unwrap();
        assert!(!pid_gone(child.id()));
        child.kill().unwrap();
        // Killed but not reaped yet: a zombie, which writes nothing any more.
        let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !pid_gone(child.id()) && std::time::Instant::now() < until {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(pid_gone(child.id()));
        child.wait().unwrap();
        assert!(pid_gone(child.id()));
    }

    /// A process of another pid namespace is never judged by its pid (here: that of a reaped
    /// child, dead in this namespace), but by the owner lock on its region file, which goes when
    /// the file's last descriptor of the owner's does.
    #[test]
    fn another_namespace_is_judged_by_the_owner_lock() {
        let dead = dead_pid();
        let me = ProcessIdentity::current().unwrap();
        let stranger = ProcessIdentity { pid: dead, ns: me.ns.wrapping_add(1), ..me };
        assert!(ProcessIdentity { pid: dead, ..me }.pid_is_ours());
        // A peer that could not tell its namespace (0) is judged by its pid, as one of ours.
        let unknown = ProcessIdentity { pid: dead, ns: 0, ..me };
        assert!(unknown.pid_is_ours() && !unknown.is_alive(), "a namespace unknown to the peer counts as ours");
        assert!(!stranger.pid_is_ours() && stranger.is_alive(), "judged by a pid of another namespace");

        let name = format!("rshm_test_lock_{}", std::process::id());
        let owner = crate::shm::Mapping::create(&name, 4096).unwrap();
        let peer = crate::shm::Mapping::open(&name).unwrap();
        let watch = Watch::by_lock(stranger, peer.shared_fd());
        assert!(!watch.alive(), "no lock taken yet");
        let lock = hold_owner_lock(&name, &owner).unwrap();
        assert!(watch.alive() && !watch.pid_usable());
        drop(lock);
        // Gone at once, but for a process another test thread forks meanwhile: its child holds a
        // copy of the descriptor `hold_owner_lock` had open while it took the lock until it execs.
        let dl = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while watch.alive() {
            assert!(std::time::Instant::now() < dl, "the lock outlived its holder");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        crate::shm::unlink(&name).unwrap();
    }

    /// A child that sleeps `secs` seconds, and its identity as a peer's region records it.
    fn sleeping_child(secs: &str) -> (std::process::Child, ProcessIdentity) {
        let child = std::process::Command::new("sleep").arg(secs).spawn().unwrap();
        let ident =
            ProcessIdentity { pid: child.id(), start: start_time(child.id()).unwrap().unwrap(), ns: own_namespace() };
        (child, ident)
    }

    #[test]
    fn a_watch_sees_its_process_exit() {
        let (mut child, ident) = sleeping_child("5");
        let watch = Watch::new(ident);
        assert!(watch.alive());
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!watch.alive());
        assert!(!Watch::new(ProcessIdentity { start: 1, ..ident }).alive());
    }

    /// A look that found the process alive stands for `ALIVE_FOR` and no longer; one that found
    /// it gone stands for nothing (the next asks again, and says gone).
    #[test]
    fn a_look_found_alive_stands_for_a_while_only() {
        let (mut child, ident) = sleeping_child("5");
        let mut watch = Watch::new(ident);
        assert!(watch.alive_lately());
        child.kill().unwrap();
        child.wait().unwrap();
        let gone_at = std::time::Instant::now();
        while watch.alive_lately() {
            // The coarse clock's tick (up to 4 ms) may be added to ALIVE_FOR.
            assert!(gone_at.elapsed() < ALIVE_FOR + Duration::from_millis(20), "a look outlived ALIVE_FOR");
            std::thread::sleep(Duration::from_micros(200));
        }
        assert!(!watch.alive_lately(), "a look that found it gone stood for the next");
        assert!(!watch.alive());
        // A look older than ALIVE_FOR (and the coarse clock's tick) stands for nothing: a process
        // that exits after it is gone at the next ask.
        let (mut child, ident) = sleeping_child("5");
        let mut watch = Watch::new(ident);
        assert!(watch.alive_lately());
        std::thread::sleep(ALIVE_FOR + Duration::from_millis(30));
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!watch.alive_lately(), "a stale look was trusted");
    }
}
