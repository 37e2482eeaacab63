//! Who owns a region, and whether that process still lives.
//!
//! A process is identified by its pid and its start time (field 22 of /proc/<pid>/stat, in clock
//! ticks since boot), so a recycled pid is not mistaken for the old owner. This works across
//! `fork` (unlike a file lock, which the child would inherit) and needs no signal handlers.

use crate::error::{Error, Result};

/// A process, unambiguously.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessIdentity {
    pub pid: u32,
    pub start: u64,
}

impl ProcessIdentity {
    /// The calling process.
    pub fn current() -> Result<ProcessIdentity> {
        let pid = std::process::id();
        let start = start_time(pid)?.ok_or(Error::Invalid("cannot read own /proc/self/stat"))?;
        Ok(ProcessIdentity { pid, start })
    }

    /// True while the process runs (a zombie counts as dead: it will never send again).
    pub fn is_alive(&self) -> bool {
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
            std::fs::read_dir(format!("/proc/{pid}/task")).map(|d| d.count() <= 1).unwrap_or(true)
        }
        Ok(Some(_)) => false,
        Ok(None) => true,
        Err(_) => false,
    }
}

/// A cheap, repeatable liveness check of one process: a pidfd (which pins the process, so a
/// recycled pid cannot fool it) polled without blocking, or /proc where pidfds are unavailable.
#[derive(Debug)]
pub struct Watch {
    ident: ProcessIdentity,
    pidfd: Option<std::os::fd::OwnedFd>,
}

impl Watch {
    pub fn new(ident: ProcessIdentity) -> Watch {
        // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, ident.pid as libc::pid_t, 0) };
        let pidfd = (fd >= 0).then(|| {
            // SAFETY: a fresh fd returned by pidfd_open, owned by nobody else.
            unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd as i32) }
        });
        // The pidfd names whatever process has the pid now: make sure it is the one we mean.
        let pidfd = pidfd.filter(|_| ident.is_alive());
        Watch { ident, pidfd }
    }

    pub fn ident(&self) -> ProcessIdentity {
        self.ident
    }

    /// False once the process has exited (about a microsecond with a pidfd).
    pub fn alive(&self) -> bool {
        use std::os::fd::AsRawFd;
        match &self.pidfd {
            Some(fd) => {
                let mut pfd = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
                // SAFETY: one valid pollfd, zero timeout.
                let n = unsafe { libc::poll(&mut pfd, 1, 0) };
                // A pidfd polls readable when its process exits.
                !(n > 0 && pfd.revents & libc::POLLIN != 0)
            }
            None => self.ident.is_alive(),
        }
    }
}

/// The calling process's pid namespace (the inode number of /proc/self/ns/pid), or None where
/// /proc does not tell. Pids, and so the identities above, mean something only inside one
/// namespace: a process in another (a container sharing this /dev/shm) looks dead from here.
pub fn pid_namespace() -> Option<u64> {
    let link = std::fs::read_link("/proc/self/ns/pid").ok()?;
    parse_namespace_link(link.to_str()?)
}

/// "pid:[4026531836]" -> 4026531836.
fn parse_namespace_link(link: &str) -> Option<u64> {
    link.strip_prefix("pid:[")?.strip_suffix(']')?.parse().ok()
}

struct Stat {
    state: char,
    start: u64,
}

fn start_time(pid: u32) -> Result<Option<u64>> {
    Ok(read_stat(pid)?.map(|s| s.start))
}

/// Parse /proc/<pid>/stat; `None` when no such process exists.
fn read_stat(pid: u32) -> Result<Option<Stat>> {
    let text = match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::Os(e.raw_os_error().unwrap_or(libc::EIO))),
    };
    parse_stat(&text).map(Some).ok_or(Error::Corrupt("unparsable /proc stat"))
}

/// The command name may hold spaces and parentheses: fields are counted after the last ')'.
fn parse_stat(text: &str) -> Option<Stat> {
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?.chars().next()?;
    // After the state (field 3) the start time is field 22: skip fields 4..=21.
    let start = fields.nth(18)?.parse().ok()?;
    Some(Stat { state, start })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pid_namespace_is_read_and_parsed() {
        assert_eq!(parse_namespace_link("pid:[4026531836]"), Some(4026531836));
        assert_eq!(parse_namespace_link("net:[4026531836]"), None);
        assert_eq!(parse_namespace_link("pid:[]"), None);
        // This process is in some pid namespace, and asking twice gives the same one.
        let ns = pid_namespace().expect("/proc/self/ns/pid on Linux");
        assert_eq!(pid_namespace(), Some(ns));
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
        let ident = ProcessIdentity { pid: child.id(), start: start_time(child.id()).unwrap().unwrap_or(0) };
        child.wait().unwrap();
        assert!(!ident.is_alive());
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

    #[test]
    fn a_watch_sees_its_process_exit() {
        let mut child = std::process::Command::new("sleep").arg("5").spawn().unwrap();
        let ident = ProcessIdentity { pid: child.id(), start: start_time(child.id()).unwrap().unwrap() };
        let watch = Watch::new(ident);
        assert!(watch.alive());
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!watch.alive());
        assert!(!Watch::new(ProcessIdentity { start: 1, ..ident }).alive());
    }
}
