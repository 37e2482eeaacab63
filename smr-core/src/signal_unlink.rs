//! Removing this process's region names from /dev/shm when a signal is about to kill it.
//!
//! An endpoint's region file is unlinked when the endpoint closes, and a dead process's files are
//! removed by the next rshm process that looks (`reap`). A process killed by a signal (a job
//! launcher's SIGTERM or SIGINT when a rank fails, an abort, a crash) left its files in /dev/shm
//! until then: a few MiB each, on a node where the next job may not use rshm at all.
//!
//! As the C shm does, a handler of the signals a dying job commonly gets (`SIGNALS`) is installed
//! in front of whatever handled them before (`install`, by the provider with its first endpoint),
//! except where the signal was ignored. It unlinks every name registered by this process
//! (`register`, by `Region::create`), puts the earlier action back and raises the signal again,
//! which is delivered through that action when the handler returns: the default one kills the
//! process as it would have (same status, same core dump), an application's handler runs as it
//! would have (Debian's libfabric 1.17 loads libinfinipath, which handles SIGINT, SIGTERM, SIGABRT,
//! SIGBUS and SIGSEGV). A fault that raised SIGSEGV or SIGBUS faults again on return and goes the
//! same way. The price, also the C shm's: an application whose own handler lets it live on
//! (Python's KeyboardInterrupt caught) has lost its names, so that no new peer can find it;
//! FI_RSHM_UNLINK_ON_SIGNAL=0 keeps them. The handler is taken once per signal: the next such
//! signal goes straight to the earlier action. A child forked without exec inherits the handler
//! and the table; the names it finds are its parent's, and it leaves them alone (each entry names
//! its process).
//!
//! What runs in the handler is async-signal-safe: atomic loads, `getpid`, `shm_unlink` (an
//! `unlink` of a path built on the stack), `sigaction` and `raise`. The table is a fixed array
//! written only outside the handler; an entry being written is skipped. An entry freed and
//! written again by another thread while the handler reads it could give the handler a mixed
//! name to unlink, which at worst names no file.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};

/// Region names this process can register at once; endpoints beyond are not cleaned up on a
/// signal (the next reap removes their files).
const ENTRIES: usize = 256;
/// "/" + a name of up to `NAME_MAX` bytes + NUL: the argument `shm_unlink` takes.
const PATH_LEN: usize = crate::layout::NAME_MAX + 2;

const FREE: u8 = 0;
const WRITING: u8 = 1;
const READY: u8 = 2;

/// The signals whose default action ends the process and that a dying job commonly gets.
const SIGNALS: [libc::c_int; 7] =
    [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT, libc::SIGABRT, libc::SIGBUS, libc::SIGSEGV];

struct Entry {
    state: AtomicU8,
    pid: AtomicU32,
    path: UnsafeCell<[u8; PATH_LEN]>,
}

// SAFETY: `path` is written only by the thread that moved `state` from FREE to WRITING, and read
// (by the handler) only in state READY, published with a release store after the write.
unsafe impl Sync for Entry {}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Entry = Entry { state: AtomicU8::new(FREE), pid: AtomicU32::new(0), path: UnsafeCell::new([0; PATH_LEN]) };
static TABLE: [Entry; ENTRIES] = [EMPTY; ENTRIES];

/// A name registered for unlinking on a fatal signal, until this is dropped.
#[derive(Debug)]
pub struct Registered {
    index: usize,
}

impl Drop for Registered {
    fn drop(&mut self) {
        TABLE[self.index].state.store(FREE, Ordering::Release);
    }
}

/// Register region `name` (checked by `region::check_name`: at most `NAME_MAX` bytes, no NUL)
/// of this process. None if the name is too long or the table is full.
pub fn register(name: &str) -> Option<Registered> {
    let bytes = name.as_bytes();
    if bytes.len() > crate::layout::NAME_MAX || bytes.contains(&0) {
        return None;
    }
    let index = TABLE
        .iter()
        .position(|e| e.state.compare_exchange(FREE, WRITING, Ordering::Acquire, Ordering::Relaxed).is_ok())?;
    let entry = &TABLE[index];
    // SAFETY: the entry is WRITING and ours (the exchange above): nobody else writes `path`, and
    // the handler does not read it until READY.
    let path = unsafe { &mut *entry.path.get() };
    path[0] = b'/';
    path[1..=bytes.len()].copy_from_slice(bytes);
    path[bytes.len() + 1] = 0;
    entry.pid.store(std::process::id(), Ordering::Relaxed);
    entry.state.store(READY, Ordering::Release);
    Some(Registered { index })
}

/// The action each signal had before ours (indexed by signal number), written before ours is
/// installed and read by the handler.
struct Earlier([UnsafeCell<libc::sigaction>; 32]);

// SAFETY: each element is written once, by `install_one` before it installs the handler that
// reads it (the `sigaction` call orders the two), and never again.
unsafe impl Sync for Earlier {}

static EARLIER: Earlier = Earlier(
    // SAFETY: sigaction is plain data; all-zero is a valid value.
    [const { UnsafeCell::new(unsafe { std::mem::zeroed::<libc::sigaction>() }) }; 32],
);

/// The signals `install` took.
static TAKEN: std::sync::OnceLock<Vec<libc::c_int>> = std::sync::OnceLock::new();

/// Install the handler in front of every signal of `SIGNALS` not ignored, once per process.
/// Returns the signals it took.
pub fn install() -> &'static [libc::c_int] {
    TAKEN.get_or_init(|| SIGNALS.iter().copied().filter(|&sig| install_one(sig)).collect())
}

/// Put the earlier action back wherever ours is still installed: before the library holding the
/// handler is unloaded (libfabric's core `dlclose`s a provider after its `cleanup`, at exit and
/// whenever the core itself is unloaded, as Open MPI does with components it does not keep),
/// a signal would otherwise jump into unmapped code. A handler installed after ours, which may
/// call ours, is left as it is. Returns the signals given back.
pub fn uninstall() -> Vec<libc::c_int> {
    let Some(taken) = TAKEN.get() else { return Vec::new() };
    taken
        .iter()
        .copied()
        .filter(|&sig| {
            current_action(sig).is_some_and(|now| now.sa_sigaction == ours())
                // SAFETY: `EARLIER` holds the action `install_one` found before it installed
                // ours (`sig` is one it took), a complete action.
                && unsafe { libc::sigaction(sig, EARLIER.0[sig as usize].get(), std::ptr::null_mut()) } == 0
        })
        .collect()
}

/// Our handler, as `sigaction` names it.
fn ours() -> libc::sighandler_t {
    on_fatal_signal as extern "C" fn(libc::c_int) as libc::sighandler_t
}

/// The action `sig` has now.
fn current_action(sig: libc::c_int) -> Option<libc::sigaction> {
    // SAFETY: sigaction is plain data; all-zero is a valid value to be filled in.
    let mut now: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: a null new action only reads the current one into `now`.
    (unsafe { libc::sigaction(sig, std::ptr::null(), &mut now) } == 0).then_some(now)
}

fn install_one(sig: libc::c_int) -> bool {
    let (Some(earlier), Some(old)) = (EARLIER.0.get(sig as usize), current_action(sig)) else { return false };
    if old.sa_sigaction == libc::SIG_IGN {
        return false;
    }
    // SAFETY: `earlier` is written here only, once (`install` runs once), before the handler
    // that reads it is installed.
    unsafe { *earlier.get() = old };
    // SAFETY: sigaction is plain data; all-zero is a valid value.
    let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
    act.sa_sigaction = ours();
    act.sa_flags = libc::SA_ONSTACK;
    // SAFETY: `act.sa_mask` is a valid sigset to clear; `act` is a complete action whose handler
    // is async-signal-safe (`on_fatal_signal`).
    unsafe {
        libc::sigemptyset(&mut act.sa_mask);
        libc::sigaction(sig, &act, std::ptr::null_mut()) == 0
    }
}

/// The handler: unlink this process's registered names, put the earlier action back and raise
/// the signal again, blocked until this returns: then delivered through that action (the
/// default one kills the process; a fault that raised SIGSEGV or SIGBUS faults again).
extern "C" fn on_fatal_signal(sig: libc::c_int) {
    // SAFETY: getpid, shm_unlink, sigaction and raise are async-signal-safe; each path is a
    // NUL-terminated string in a READY entry (see `register`); `sig` is one `install_one` took,
    // whose earlier action it stored before installing this handler.
    unsafe {
        let pid = libc::getpid() as u32;
        for entry in &TABLE {
            if entry.state.load(Ordering::Acquire) == READY && entry.pid.load(Ordering::Relaxed) == pid {
                libc::shm_unlink(entry.path.get().cast());
            }
        }
        if let Some(earlier) = EARLIER.0.get(sig as usize) {
            libc::sigaction(sig, earlier.get(), std::ptr::null_mut());
        }
        libc::raise(sig);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// As a child (the test binary run again): create a region, take the handlers, say its name,
    /// and wait to be signalled.
    #[test]
    fn child_waiting_for_a_signal() {
        let Ok(name) = std::env::var("RSHM_SIGNAL_CHILD") else { return };
        if std::env::var_os("RSHM_SIGNAL_CHILD_OWN_TERM").is_some() {
            // SAFETY: installs a handler that only calls _exit (async-signal-safe).
            unsafe {
                extern "C" fn own(_: libc::c_int) {
                    // SAFETY: _exit is async-signal-safe.
                    unsafe { libc::_exit(42) }
                }
                libc::signal(libc::SIGTERM, own as extern "C" fn(libc::c_int) as libc::sighandler_t);
            }
        }
        let _region = crate::region::Region::create(
            &name,
            crate::layout::Counts {
                cmd_len: 64,
                resp_len: 64,
                inject_count: 4,
                sar_count: 2,
                sar_size: 65536,
                max_peers: 8,
            },
            0,
        )
        .unwrap();
        install();
        println!("ready");
        std::thread::sleep(std::time::Duration::from_secs(30));
    }

    /// This test binary run again as a child, running only the test `name` of this module, with
    /// `var` set to `value`: the handlers are process-wide, so each case gets a process.
    fn child_test(name: &str, var: &str, value: &str) -> std::process::Command {
        crate::test_child::rerun(&format!("signal_unlink::tests::{name}"), var, value)
    }

    /// Run `child_waiting_for_a_signal` as a child process with region `name`, send it `sig`
    /// once it is ready, and return its exit status.
    fn signalled_child(name: &str, sig: libc::c_int, own_term: bool) -> std::process::ExitStatus {
        use std::io::BufRead;
        let mut cmd = child_test("child_waiting_for_a_signal", "RSHM_SIGNAL_CHILD", name);
        cmd.stdout(std::process::Stdio::piped());
        if own_term {
            cmd.env("RSHM_SIGNAL_CHILD_OWN_TERM", "1");
        }
        let mut child = cmd.spawn().unwrap();
        let out = std::io::BufReader::new(child.stdout.take().unwrap());
        assert!(out.lines().map_while(|l| l.ok()).any(|l| l.contains("ready")), "the child never got ready");
        assert!(std::path::Path::new(&crate::shm::file_of(name)).exists(), "the child's region file");
        // SAFETY: a signal to our own child.
        unsafe { libc::kill(child.id() as libc::pid_t, sig) };
        child.wait().unwrap()
    }

    /// A process killed by SIGTERM leaves no region file behind and still dies of SIGTERM; one
    /// with a SIGTERM handler of its own loses its file too, and its handler runs as before.
    #[test]
    fn a_fatal_signal_unlinks_the_names_and_still_kills() {
        use std::os::unix::process::ExitStatusExt;
        let name = format!("rshm_sigtest_{}", std::process::id());
        let status = signalled_child(&name, libc::SIGTERM, false);
        assert_eq!(status.signal(), Some(libc::SIGTERM), "the child died of the signal: {status:?}");
        assert!(!std::path::Path::new(&crate::shm::file_of(&name)).exists(), "the file outlived the signal");

        let name = format!("rshm_sigtest_own_{}", std::process::id());
        let status = signalled_child(&name, libc::SIGTERM, true);
        assert_eq!(status.code(), Some(42), "the application's own handler ran: {status:?}");
        assert!(!std::path::Path::new(&crate::shm::file_of(&name)).exists(), "the file outlived the signal");
    }

    /// As a child: register a name of ours, take the handlers, fork a process that SIGTERM
    /// kills, and report whether our name outlived it.
    #[test]
    fn child_forking_a_signalled_child() {
        let Ok(name) = std::env::var("RSHM_SIGNAL_FORK_CHILD") else { return };
        let map = crate::shm::Mapping::create(&name, 4096).unwrap();
        let registered = register(&name).unwrap();
        install();
        // SAFETY: the forked process only raises a signal (whose handler is async-signal-safe)
        // and exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: as above.
            unsafe {
                libc::raise(libc::SIGTERM);
                libc::_exit(0)
            }
        }
        let mut status = 0;
        // SAFETY: waiting for our own child, into a valid int.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGTERM, "status {status:#x}");
        let kept = std::path::Path::new(&crate::shm::file_of(&name)).exists();
        println!("{}", if kept { "kept" } else { "lost" });
        drop((registered, map));
        crate::shm::unlink(&name).unwrap();
    }

    /// A process forked without exec inherits the table and the handlers; a signal that kills
    /// it leaves its parent's names alone.
    #[test]
    fn a_forked_child_killed_by_a_signal_leaves_its_parents_names() {
        let name = format!("rshm_sigtest_fork_{}", std::process::id());
        let out = child_test("child_forking_a_signalled_child", "RSHM_SIGNAL_FORK_CHILD", &name).output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success() && stdout.contains("kept"), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    }

    /// As a child: take the handlers, then give them back, and report whether SIGTERM's
    /// action is the default again.
    #[test]
    fn child_installing_and_uninstalling() {
        if std::env::var_os("RSHM_SIGNAL_UNINSTALL_CHILD").is_none() {
            return;
        }
        let current = || current_action(libc::SIGTERM).unwrap().sa_sigaction;
        assert_eq!(current(), libc::SIG_DFL);
        assert!(install().contains(&libc::SIGTERM));
        assert_ne!(current(), libc::SIG_DFL, "ours is installed");
        assert!(uninstall().contains(&libc::SIGTERM));
        assert_eq!(current(), libc::SIG_DFL, "the earlier action is back");
        println!("uninstalled");
    }

    /// `uninstall` puts back the action `install` found (run in a child: the handlers are
    /// process-wide).
    #[test]
    fn uninstall_puts_the_earlier_action_back() {
        let out = child_test("child_installing_and_uninstalling", "RSHM_SIGNAL_UNINSTALL_CHILD", "1").output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("uninstalled"),
            "{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[test]
    fn registration_takes_a_free_entry_and_gives_it_back() {
        let a = register("rshm_reg_a").unwrap();
        let b = register("rshm_reg_b").unwrap();
        assert_ne!(a.index, b.index);
        // SAFETY: READY entries are not written while registered.
        let path = unsafe { &*TABLE[a.index].path.get() };
        assert_eq!(&path[..12], b"/rshm_reg_a\0");
        let freed = a.index;
        drop(a);
        assert_eq!(TABLE[freed].state.load(Ordering::Relaxed), FREE);
        assert!(register(&"x".repeat(crate::layout::NAME_MAX + 1)).is_none());
        assert!(register("a\0b").is_none(), "a name with a NUL");
        let longest = "y".repeat(crate::layout::NAME_MAX);
        let c = register(&longest).expect("a name of NAME_MAX bytes");
        // SAFETY: as above.
        let path = unsafe { &*TABLE[c.index].path.get() };
        assert_eq!((path[0], &path[1..=longest.len()], path[longest.len() + 1]), (b'/', longest.as_bytes(), 0));
    }
}
