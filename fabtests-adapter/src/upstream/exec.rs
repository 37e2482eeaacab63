//! Running one upstream fabtest for one provider the way runfabtests.sh does (`unit_test`,
//! `cs_test`, `complex_test`, `multinode_test`), with a deadline per process, and judging the
//! exit codes as it does.
//!
//! Isolation: by default the processes of one run share a private mount namespace with its own
//! tmpfs on /dev/shm and a private network namespace (loopback only), held open by a small
//! holder process (this binary's hidden `__hold`). Runs are then independent of each other
//! (shm names its endpoints after `-s` and the port, fabtests' OOB and ubertest control sockets
//! use fixed TCP ports) and whatever a killed process leaves in /dev/shm disappears with the
//! namespace. Without the privilege for that (`--isolate none`), runs go one at a time in the
//! machine's namespaces and the /dev/shm entries they created are removed afterwards.

use super::script::{Kind, TestDef};
use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// FI_ENODATA and FI_ENOSYS as fabtests exit codes (`ft_exit_code`: the absolute value).
pub const EXIT_ENODATA: i32 = libc::ENODATA;
pub const EXIT_ENOSYS: i32 = libc::ENOSYS;
/// Set by SIGINT/SIGTERM: running processes are killed and no new run starts.
pub static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// Turn SIGINT/SIGTERM into `STOP`, so an interrupted run leaves no process behind.
pub fn install_stop_handler() {
    let handler: extern "C" fn(libc::c_int) = on_signal;
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe {
            libc::signal(sig, handler as libc::sighandler_t);
        }
    }
}

pub fn stopped() -> bool {
    STOP.load(Ordering::SeqCst)
}

/// How long runfabtests.sh waits after a failed client before `kill -9` of the server.
const SERVER_GRACE: Duration = Duration::from_secs(2);
/// Between SIGTERM at the deadline and SIGKILL.
const TERM_GRACE: Duration = Duration::from_secs(2);

/// The verdict on one test for one provider.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Res {
    /// Passed; ubertest adds its `[passed/total]`.
    Pass(Option<String>),
    Fail(String),
    /// A process was still running at its deadline (runfabtests.sh: `timeout` → 124, a Fail).
    Timeout(String),
    /// runfabtests.sh's "Notrun": FI_ENODATA/FI_ENOSYS on every side (or ubertest exit 1).
    NotRun(String),
    /// Dropped by the exclude file (the pattern).
    Excluded(String),
    /// Not run for another reason (ubertest without a config).
    Skipped(String),
}

impl Res {
    pub fn cell(&self) -> String {
        match self {
            Res::Pass(None) => "pass".into(),
            Res::Pass(Some(x)) => format!("pass {x}"),
            Res::Fail(why) => format!("FAIL({})", short(why, 72)),
            Res::Timeout(_) => "timeout".into(),
            Res::NotRun(why) => format!("notrun({})", short(why, 40)),
            Res::Excluded(_) => "excluded".into(),
            Res::Skipped(why) => format!("skipped({})", short(why, 40)),
        }
    }

    pub fn is_pass(&self) -> bool {
        matches!(self, Res::Pass(_))
    }

    /// Was actually started (not excluded or skipped).
    pub fn ran(&self) -> bool {
        !matches!(self, Res::Excluded(_) | Res::Skipped(_))
    }
}

pub fn short(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let t: String = s.chars().take(n - 3).collect();
        format!("{t}...")
    }
}

/// How every run is set up.
pub struct ExecEnv {
    pub bin: PathBuf,
    /// FI_PROVIDER_PATH for every provider but the built-in `shm` (whose runs get none, as
    /// runfabtests.sh runs it).
    pub provider_path: Option<PathBuf>,
    /// Private mount + network namespaces per run.
    pub isolate: bool,
    pub timeout: Duration,
    pub complex_timeout: Duration,
    /// runfabtests.sh's `sleep 1` between server and client.
    pub server_wait: Duration,
    pub log_dir: PathBuf,
    pub cwd: PathBuf,
    /// runfabtests.sh's S_INTERFACE / C_INTERFACE / GOOD_ADDR.
    pub s_iface: String,
    /// Empty: the client gets no `-s` (a diagnostic departure from runfabtests.sh).
    pub c_iface: String,
    pub good_addr: String,
}

/// One process of a run, as the report shows it.
#[derive(Clone, Debug)]
pub struct ProcInfo {
    pub role: String,
    pub cmdline: String,
    pub status: String,
    pub elapsed: Duration,
    pub out: PathBuf,
    pub err: PathBuf,
}

/// Everything a run produced.
pub struct RunOut {
    pub res: Res,
    pub procs: Vec<ProcInfo>,
    pub elapsed: Duration,
    pub notes: Vec<String>,
}

/// A run that never started a process.
pub fn not_started(res: Res) -> RunOut {
    RunOut { res, procs: Vec::new(), elapsed: Duration::ZERO, notes: Vec::new() }
}

/// The namespaces one run shares: held by a child that waits for EOF on its stdin.
pub struct Ns {
    child: Child,
    mnt: File,
    net: File,
}

impl Ns {
    pub fn new() -> io::Result<Ns> {
        let mut cmd = Command::new("/proc/self/exe");
        cmd.arg("__hold").stdin(Stdio::piped()).stdout(Stdio::null()).stderr(Stdio::null()).process_group(0);
        // SAFETY: the closure runs in the forked child before exec and only makes system calls
        // (unshare, mount, socket, ioctl, close), which are async-signal-safe.
        unsafe {
            cmd.pre_exec(private_namespaces);
        }
        let mut child = cmd.spawn()?;
        let pid = child.id();
        let open = |what: &str| File::open(format!("/proc/{pid}/ns/{what}"));
        match (open("mnt"), open("net")) {
            (Ok(mnt), Ok(net)) => Ok(Ns { child, mnt, net }),
            (Err(e), _) | (_, Err(e)) => {
                let _ = child.kill();
                let _ = child.wait();
                Err(e)
            }
        }
    }

    fn fds(&self) -> (RawFd, RawFd) {
        (self.mnt.as_raw_fd(), self.net.as_raw_fd())
    }
}

impl Drop for Ns {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// In the holder, before exec: new mount and network namespaces, mounts made private (nothing
/// propagates back), a fresh tmpfs on /dev/shm and the loopback interface up.
fn private_namespaces() -> io::Result<()> {
    let err = |_| io::Error::last_os_error();
    // SAFETY: plain system calls on constant, NUL-terminated arguments; `ifr` is a properly
    // sized ifreq for SIOC[GS]IFFLAGS and the socket is closed before returning.
    unsafe {
        if libc::unshare(libc::CLONE_NEWNS | libc::CLONE_NEWNET) != 0 {
            return Err(io::Error::last_os_error());
        }
        if libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        ) != 0
        {
            return Err(io::Error::last_os_error());
        }
        if libc::mount(
            c"tmpfs".as_ptr(),
            c"/dev/shm".as_ptr(),
            c"tmpfs".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            c"mode=1777".as_ptr().cast(),
        ) != 0
        {
            return Err(io::Error::last_os_error());
        }
        let s = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if s < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut ifr: libc::ifreq = std::mem::zeroed();
        for (d, c) in ifr.ifr_name.iter_mut().zip(b"lo\0") {
            *d = *c as libc::c_char;
        }
        let r = (|| {
            if libc::ioctl(s, libc::SIOCGIFFLAGS as _, &mut ifr) != 0 {
                return Err(());
            }
            ifr.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
            if libc::ioctl(s, libc::SIOCSIFFLAGS as _, &mut ifr) != 0 {
                return Err(());
            }
            Ok(())
        })()
        .map_err(err);
        libc::close(s);
        r
    }
}

/// Whether this process may create private namespaces (tries once).
pub fn namespaces_available() -> Result<(), String> {
    Ns::new().map(drop).map_err(|e| e.to_string())
}

/// The hidden `__hold` command: keep the namespaces alive until stdin closes.
pub fn hold_main() -> i32 {
    let mut buf = [0u8; 64];
    loop {
        match io::Read::read(&mut io::stdin(), &mut buf) {
            Ok(0) | Err(_) => return 0,
            Ok(_) => {}
        }
    }
}

/// One started process.
struct Proc {
    role: String,
    cmdline: String,
    child: Child,
    pid: i32,
    start: Instant,
    end: Option<Instant>,
    deadline: Instant,
    term_sent: Option<Instant>,
    timed_out: bool,
    /// Killed by the runner for a reason other than its deadline.
    killed: Option<String>,
    status: Option<ExitStatus>,
    out: PathBuf,
    err: PathBuf,
}

/// Send `sig` to the process group of a child we started (its own group, see `spawn`).
fn signal_group(pid: i32, sig: i32) {
    // SAFETY: kill has no memory-safety preconditions; `pid` is the group of a child of ours
    // that has not been reaped yet or was reaped a moment ago (stragglers it may have forked).
    unsafe {
        libc::kill(-pid, sig);
    }
}

impl Proc {
    fn poll(&mut self, now: Instant) {
        if self.status.is_some() {
            return;
        }
        if let Ok(Some(st)) = self.child.try_wait() {
            self.status = Some(st);
            self.end = Some(now);
            signal_group(self.pid, libc::SIGKILL);
            return;
        }
        if now >= self.deadline && self.term_sent.is_none() {
            self.timed_out = true;
            self.term_sent = Some(now);
            signal_group(self.pid, libc::SIGTERM);
        }
        if self.term_sent.is_some_and(|t| now >= t + TERM_GRACE) {
            signal_group(self.pid, libc::SIGKILL);
        }
    }

    fn kill(&mut self, why: &str) {
        if self.status.is_none() {
            self.killed.get_or_insert_with(|| why.to_string());
            signal_group(self.pid, libc::SIGKILL);
            if let Ok(st) = self.child.wait() {
                self.status = Some(st);
            }
            self.end = Some(Instant::now());
        }
    }

    fn running(&self) -> bool {
        self.status.is_none()
    }

    fn code(&self) -> Option<i32> {
        self.status.and_then(|s| s.code())
    }

    fn status_text(&self) -> String {
        let base = match self.status {
            Some(s) => match (s.code(), s.signal()) {
                (Some(c), _) => format!("exit {c}"),
                (None, Some(sig)) => format!("signal {sig}{}", if s.core_dumped() { " (core dumped)" } else { "" }),
                _ => "unknown status".into(),
            },
            None => "still running".into(),
        };
        if self.timed_out {
            format!("timed out, {base}")
        } else if let Some(k) = &self.killed {
            format!("{k}, {base}")
        } else {
            base
        }
    }

    fn info(&self) -> ProcInfo {
        ProcInfo {
            role: self.role.clone(),
            cmdline: self.cmdline.clone(),
            status: self.status_text(),
            elapsed: self.end.unwrap_or_else(Instant::now).duration_since(self.start),
            out: self.out.clone(),
            err: self.err.clone(),
        }
    }

    /// The last non-empty line of stderr, else of stdout.
    fn last_line(&self) -> String {
        last_lines(&self.err, 1).pop().or_else(|| last_lines(&self.out, 1).pop()).unwrap_or_default()
    }
}

/// The last `n` non-empty lines of a file.
pub fn last_lines(path: &Path, n: usize) -> Vec<String> {
    let Ok(bytes) = std::fs::read(path) else { return Vec::new() };
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<&str> = text.lines().map(str::trim_end).filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..].iter().map(|s| s.to_string()).collect()
}

fn shell_quote(a: &str) -> String {
    if !a.is_empty() && a.bytes().all(|c| c.is_ascii_alphanumeric() || b"-_./:=,@+".contains(&c)) {
        a.to_string()
    } else {
        format!("'{}'", a.replace('\'', "'\\''"))
    }
}

/// A file-name-safe form of a label.
pub fn slug(s: &str) -> String {
    let mut out: String = s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect();
    while out.contains("__") {
        out = out.replace("__", "_");
    }
    out.trim_matches('_').to_string()
}

/// How many CPUs a run keeps busy: fabtests poll, so every process spins on one.
pub fn cpus_of(kind: Kind) -> usize {
    match kind {
        Kind::Unit | Kind::Neg => 1,
        Kind::Cs | Kind::Complex => 2,
        Kind::Multinode(n) => n.max(1),
    }
}

/// One job: a test on a provider.
pub struct Job<'a> {
    pub id: usize,
    pub test: &'a TestDef,
    pub prov: &'a str,
    /// Unique per job: the server's `-B` and the client's `-P`.
    pub port: u16,
    /// The ubertest config for this provider (Complex only).
    pub complex_cfg: Option<&'a Path>,
}

impl ExecEnv {
    fn spawn(
        &self,
        job: &Job,
        role: &str,
        args: &[String],
        env: &[(&str, &str)],
        ns: Option<&Ns>,
        limit: Duration,
    ) -> io::Result<Proc> {
        let exe = self.bin.join(job.test.exe());
        let base = format!("{:03}-{}-{}.{}", job.id, job.prov, slug(&job.test.label()), slug(role));
        let out = self.log_dir.join(format!("{base}.out"));
        let err = self.log_dir.join(format!("{base}.err"));
        let mut cmd = Command::new(&exe);
        cmd.args(args)
            .current_dir(&self.cwd)
            .stdin(Stdio::null())
            .stdout(File::create(&out)?)
            .stderr(File::create(&err)?)
            .env_remove("FI_PROVIDER")
            .process_group(0);
        if job.prov == "shm" {
            cmd.env_remove("FI_PROVIDER_PATH");
        } else if let Some(p) = &self.provider_path {
            cmd.env("FI_PROVIDER_PATH", p);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        if let Some(ns) = ns {
            let (mfd, nfd) = ns.fds();
            let cwd = CString::new(self.cwd.as_os_str().as_bytes()).map_err(io::Error::other)?;
            // SAFETY: runs in the forked child before exec; setns and chdir are system calls
            // (async-signal-safe); the descriptors stay open in the parent (`ns`) during spawn.
            unsafe {
                cmd.pre_exec(move || {
                    if libc::setns(mfd, libc::CLONE_NEWNS) != 0 || libc::setns(nfd, libc::CLONE_NEWNET) != 0 {
                        return Err(io::Error::last_os_error());
                    }
                    // Entering a mount namespace moves the working directory to its root.
                    if libc::chdir(cwd.as_ptr()) != 0 {
                        return Err(io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let mut cmdline = String::new();
        for (k, v) in env {
            cmdline.push_str(&format!("{k}={} ", shell_quote(v)));
        }
        cmdline.push_str(&shell_quote(&exe.to_string_lossy()));
        for a in args {
            cmdline.push(' ');
            cmdline.push_str(&shell_quote(a));
        }
        let start = Instant::now();
        let child = cmd.spawn()?;
        Ok(Proc {
            role: role.to_string(),
            cmdline,
            pid: child.id() as i32,
            child,
            start,
            end: None,
            deadline: start + limit,
            term_sent: None,
            timed_out: false,
            killed: None,
            status: None,
            out,
            err,
        })
    }

    /// Run one job to its verdict.
    pub fn run(&self, job: &Job) -> RunOut {
        let t0 = Instant::now();
        let mut notes = Vec::new();
        let ns = if self.isolate {
            match Ns::new() {
                Ok(ns) => Some(ns),
                Err(e) => {
                    let res = Res::Fail(format!("cannot create namespaces: {e}"));
                    return RunOut { res, procs: Vec::new(), elapsed: t0.elapsed(), notes };
                }
            }
        } else {
            None
        };
        let before = if ns.is_none() { shm_entries() } else { Vec::new() };
        let mut procs: Vec<Proc> = Vec::new();
        let res = match self.start_and_wait(job, ns.as_ref(), &mut procs) {
            Ok(()) if stopped() => Res::Skipped("interrupted".into()),
            Ok(()) => judge(job.test.kind, &procs),
            Err(e) => Res::Fail(format!("cannot start: {e}")),
        };
        for p in procs.iter_mut() {
            p.kill("killed at the end of the run");
        }
        drop(ns);
        if self.isolate {
            // The tmpfs went away with the namespace.
        } else {
            let pids: Vec<i32> = procs.iter().map(|p| p.pid).collect();
            let removed = sweep_new_shm(&before, &pids, job.port, &self.c_iface);
            if !removed.is_empty() {
                notes.push(format!("removed from /dev/shm: {}", removed.join(", ")));
            }
        }
        RunOut { res, procs: procs.iter().map(Proc::info).collect(), elapsed: t0.elapsed(), notes }
    }

    /// The command lines runfabtests.sh would use (plus unique ports), started and waited for.
    fn start_and_wait(&self, job: &Job, ns: Option<&Ns>, procs: &mut Vec<Proc>) -> io::Result<()> {
        let words: Vec<String> = job.test.spec.split_whitespace().skip(1).map(str::to_string).collect();
        let prov = job.prov.to_string();
        let port = job.port.to_string();
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<String>>();
        let limit = self.timeout;
        match job.test.kind {
            Kind::Unit | Kind::Neg => {
                let mut args: Vec<String> = words
                    .iter()
                    .map(|w| w.replace("GOOD_ADDR", &self.good_addr).replace("SERVER_ADDR", &self.s_iface))
                    .collect();
                args.extend(s(&["-p", &prov]));
                procs.push(self.spawn(job, "test", &args, &[], ns, limit)?);
                self.wait_all(procs, None);
            }
            Kind::Cs | Kind::Multinode(_) => {
                let (server_args, client_args, nclients) = if let Kind::Multinode(n) = job.test.kind {
                    let mut a = words.clone();
                    a.extend(s(&["-n", &n.to_string(), "-p", &prov, "-B", &port, "-s", &self.s_iface]));
                    (a.clone(), a, n.saturating_sub(1))
                } else {
                    let mut sa = words.clone();
                    sa.extend(s(&["-p", &prov, "-B", &port, "-s", &self.s_iface]));
                    let mut ca = words.clone();
                    ca.extend(s(&["-p", &prov, "-P", &port]));
                    if !self.c_iface.is_empty() {
                        ca.extend(s(&["-s", &self.c_iface]));
                    }
                    ca.push(self.s_iface.clone());
                    (sa, ca, 1)
                };
                procs.push(self.spawn(job, "server", &server_args, &[], ns, limit)?);
                self.pause(procs);
                for i in 0..nclients {
                    let role = if nclients == 1 { "client".to_string() } else { format!("client{}", i + 1) };
                    procs.push(self.spawn(job, &role, &client_args, &[], ns, limit)?);
                }
                self.wait_all(procs, Some(0));
            }
            Kind::Complex => {
                let cfg = job.complex_cfg.map(|p| p.to_string_lossy().into_owned()).unwrap_or_default();
                let env = [("FI_LOG_LEVEL", "error")];
                let limit = self.complex_timeout;
                procs.push(self.spawn(job, "server", &s(&["-x", "-B", &port]), &env, ns, limit)?);
                self.pause(procs);
                procs.push(self.spawn(
                    job,
                    "client",
                    &s(&["-u", &cfg, "-P", &port, &self.s_iface]),
                    &env,
                    ns,
                    limit,
                )?);
                self.wait_all(procs, Some(0));
            }
        }
        Ok(())
    }

    /// runfabtests.sh's `sleep 1` after starting the server (deadlines still enforced).
    fn pause(&self, procs: &mut [Proc]) {
        let until = Instant::now() + self.server_wait;
        while Instant::now() < until && !stopped() {
            let now = Instant::now();
            procs.iter_mut().for_each(|p| p.poll(now));
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Wait for every process. With `server = Some(i)`: once every other process has exited and
    /// one of them failed, the server gets `SERVER_GRACE`, then `kill -9` (runfabtests.sh).
    fn wait_all(&self, procs: &mut [Proc], server: Option<usize>) {
        let mut grace_end: Option<Instant> = None;
        loop {
            let now = Instant::now();
            procs.iter_mut().for_each(|p| p.poll(now));
            if procs.iter().all(|p| !p.running()) || stopped() {
                return;
            }
            if let Some(si) = server {
                let others_done = procs.iter().enumerate().all(|(i, p)| i == si || !p.running());
                let others_failed =
                    procs.iter().enumerate().any(|(i, p)| i != si && (p.timed_out || p.code() != Some(0)));
                if others_done && others_failed && procs[si].running() {
                    let end = *grace_end.get_or_insert(now + SERVER_GRACE);
                    if now >= end {
                        procs[si].kill("killed after the client failed");
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// runfabtests.sh's verdict from the processes' ends.
fn judge(kind: Kind, procs: &[Proc]) -> Res {
    let describe = |p: &Proc| {
        let line = p.last_line();
        let st = p.status_text();
        if line.is_empty() {
            format!("{} {st}", p.role)
        } else {
            format!("{} {st}: {line}", p.role)
        }
    };
    if let Some(p) = procs.iter().find(|p| p.timed_out) {
        let secs = p.deadline.duration_since(p.start).as_secs();
        let line = p.last_line();
        let last = if line.is_empty() { "no output".to_string() } else { format!("last output: {line}") };
        return Res::Timeout(format!("{} still running after {secs}s ({last})", p.role));
    }
    let codes: Vec<Option<i32>> = procs.iter().map(Proc::code).collect();
    let all = |c: i32| !codes.is_empty() && codes.iter().all(|x| *x == Some(c));
    match kind {
        Kind::Unit => match codes.first().copied().flatten() {
            Some(0) => Res::Pass(None),
            Some(c) if c == EXIT_ENODATA || c == EXIT_ENOSYS => Res::NotRun(crate::fabric::errname(-c)),
            _ => Res::Fail(describe(&procs[0])),
        },
        Kind::Neg => match codes.first().copied().flatten() {
            Some(c) if c == EXIT_ENODATA => Res::Pass(None),
            _ => Res::Fail(format!("expected exit {EXIT_ENODATA} (FI_ENODATA); {}", describe(&procs[0]))),
        },
        Kind::Cs | Kind::Multinode(_) => {
            if all(EXIT_ENODATA) || all(EXIT_ENOSYS) {
                Res::NotRun(crate::fabric::errname(-codes[0].unwrap_or(0)))
            } else if all(0) {
                Res::Pass(None)
            } else {
                // The client's failure is the interesting one; a server killed after it is not.
                let first_bad = procs
                    .iter()
                    .skip(1)
                    .find(|p| p.code() != Some(0))
                    .or_else(|| procs.iter().find(|p| p.code() != Some(0)))
                    .expect("some process failed");
                Res::Fail(describe(first_bad))
            }
        }
        Kind::Complex => {
            let text = procs.get(1).and_then(|c| std::fs::read_to_string(&c.out).ok()).unwrap_or_default();
            let u = uber_counts(&text);
            let summary =
                format!("[{}/{}] passed, ENODATA {}, ENOSYS+ERROR {}", u.success, u.total, u.enodata, u.failed);
            if codes.contains(&Some(1)) {
                let p = procs.iter().find(|p| p.code() == Some(1)).expect("exit 1");
                Res::NotRun(format!("exit 1 (no config or bad option): {}", p.last_line()))
            } else if let Some(p) = procs.iter().find(|p| p.code() != Some(0)) {
                // ubertest exits with -FI_ENODATA/-FI_ENOSYS when any test got it: a Fail for
                // runfabtests.sh; the counts say what happened.
                if u.total > 0 {
                    Res::Fail(format!("{} {}: {summary}", p.role, p.status_text()))
                } else {
                    Res::Fail(describe(p))
                }
            } else if u.failed == 0 {
                Res::Pass(Some(format!("[{}/{}]", u.success, u.total)))
            } else {
                Res::Fail(summary)
            }
        }
    }
}

/// ubertest's summary lines (`Success: N`, `ENODATA: N`, `ENOSYS : N`, `ERROR  : N`).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct UberCounts {
    pub success: u64,
    pub enodata: u64,
    /// ENOSYS + ERROR: what runfabtests.sh counts as failed.
    pub failed: u64,
    pub total: u64,
}

pub fn uber_counts(text: &str) -> UberCounts {
    let mut u = UberCounts::default();
    for line in text.lines() {
        let Some((k, v)) = line.split_once(':') else { continue };
        let Ok(n) = v.trim().parse::<u64>() else { continue };
        match k.trim() {
            "Success" => u.success += n,
            "ENODATA" => u.enodata += n,
            "ENOSYS" | "ERROR" => u.failed += n,
            _ => continue,
        }
        u.total += n;
    }
    u
}

fn shm_entries() -> Vec<String> {
    let Ok(rd) = std::fs::read_dir("/dev/shm") else { return Vec::new() };
    rd.filter_map(|e| e.ok()).filter_map(|e| e.file_name().into_string().ok()).collect()
}

/// Without namespaces: remove the /dev/shm entries that appeared during the run and carry one
/// of its pids or its port as a token (`rshm_<uid>_p<pidns>_<pid>_<n>`, `rshm_<uid>_ns_<port>`,
/// shm's `<pid>:<uid>:<n>` and `<node>:<port>`), or shm's name for the client (`<c_iface>:`).
fn sweep_new_shm(before: &[String], pids: &[i32], port: u16, c_iface: &str) -> Vec<String> {
    let port = port.to_string();
    let pids: Vec<String> = pids.iter().map(i32::to_string).collect();
    let mut removed = Vec::new();
    for name in shm_entries() {
        if before.contains(&name) {
            continue;
        }
        let ours = name.split(['_', ':']).any(|t| t == port || pids.iter().any(|p| p == t))
            || (!c_iface.is_empty() && name.starts_with(&format!("{c_iface}:")));
        if ours && std::fs::remove_file(Path::new("/dev/shm").join(&name)).is_ok() {
            removed.push(name);
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uber_summary() {
        let text = "Starting test 1\nbw: 1\nSuccess: 770\nENODATA: 4\nENOSYS : 0\nERROR  : 0\n";
        assert_eq!(uber_counts(text), UberCounts { success: 770, enodata: 4, failed: 0, total: 774 });
        assert_eq!(
            uber_counts("Success: 3\nSkipped: 1\nERROR  : 2\n"),
            UberCounts { success: 3, enodata: 0, failed: 2, total: 5 }
        );
    }

    #[test]
    fn cells_and_names() {
        assert_eq!(Res::Pass(None).cell(), "pass");
        assert_eq!(Res::Pass(Some("[1/2]".into())).cell(), "pass [1/2]");
        assert_eq!(Res::Timeout("x".into()).cell(), "timeout");
        assert!(Res::Fail("y".repeat(300)).cell().len() < 90);
        assert_eq!(slug("functional/fi_rdm -U"), "functional_fi_rdm_-U");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("-p"), "-p");
    }
}
