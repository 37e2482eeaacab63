//! Endpoints and processes that come and go beside a long-lived endpoint: nothing may be left
//! behind in it. `unit/endpoint_churn`: endpoints of one process and domain, opened and closed
//! one after another. `unit/process_churn`: processes, each with an endpoint of its own, that
//! send one message and leave by `fi_close`, by exiting without closing, or by SIGKILL.

use super::{scn, Scenario};
use crate::fabric::{self, ffi, Cq, Ep, EAGAIN};
use crate::harness::{
    check_pattern, fi_ok, pattern, rss_anon_kib, shm_files_of, FiCtx, Node, NodeCfg, Rank, TResult, TestErr, Tx,
};
use crate::pmi::{hex, unhex};
use crate::{bail, ensure};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

pub fn scenarios() -> Vec<Scenario> {
    vec![
        scn(
            "unit/endpoint_churn",
            1,
            120,
            endpoint_churn,
            "2,000 endpoints opened, enabled, sending one message each and closed: memory, fds, mappings and /dev/shm files do not grow",
        ),
        scn(
            "unit/process_churn",
            1,
            180,
            process_churn,
            "150 processes, 4 at a time, each sending one message and leaving by fi_close, exit or SIGKILL: \
             every message intact, the receiver's memory, fds, mappings and /dev/shm files do not grow, no closed region left",
        ),
    ]
}

/// Endpoints a process opens and closes one after another (`endpoint_churn`), and after how many
/// the resources are first counted: the later ones must leave nothing behind.
const CHURN_EPS: u64 = 2_000;
const CHURN_WARMUP: u64 = 200;
/// Processes that send one message each (`process_churn`), and after how many the resources are
/// first counted.
const PROCESSES: u64 = 150;
const PROCESS_WARMUP: u64 = 40;
/// How many of them run at a time.
const PROCESSES_AT_ONCE: usize = 4;
/// How long the receiver progresses before each count (`settled`).
const CHURN_SETTLE: Duration = Duration::from_millis(500);
/// Growth of private memory allowed between the two counts.
const CHURN_RSS_GROWTH_MAX_KIB: u64 = 512;
/// The largest message a churn sends.
const CHURN_MSG_MAX: usize = 2048;

/// What a leak would grow: private resident memory (KiB), open fds, mappings of /dev/shm files,
/// and /dev/shm files named with this process's pid; and what the fds are, for a failure's
/// message.
struct Held {
    rss_kib: u64,
    fds: usize,
    shm_maps: usize,
    shm_files: usize,
    fd_names: Vec<String>,
}

impl Held {
    fn counts(&self) -> String {
        format!(
            "RssAnon {} KiB, {} fds, {} /dev/shm mappings, {} /dev/shm files",
            self.rss_kib, self.fds, self.shm_maps, self.shm_files
        )
    }
}

fn io<T>(r: std::io::Result<T>, what: &str) -> TResult<T> {
    r.map_err(|e| TestErr::Fail(format!("{what}: {e}")))
}

fn held_now() -> TResult<Held> {
    let rss_kib = rss_anon_kib().ok_or_else(|| TestErr::Fail("no RssAnon in /proc/self/status".into()))?;
    let fd_names: Vec<String> = io(std::fs::read_dir("/proc/self/fd"), "read /proc/self/fd")?
        .filter_map(|e| Some(std::fs::read_link(e.ok()?.path()).ok()?.to_string_lossy().into_owned()))
        .collect();
    let fds = fd_names.len();
    let maps = io(std::fs::read_to_string("/proc/self/maps"), "read /proc/self/maps")?;
    let shm_maps = maps.lines().filter(|l| l.contains("/dev/shm/")).count();
    let shm_files = shm_files_of(std::process::id()).len();
    Ok(Held { rss_kib, fds, shm_maps, shm_files, fd_names })
}

/// One completion from `cq`, if any (anything but an entry or -FI_EAGAIN fails).
fn read_one(cq: &Cq, what: &str) -> TResult<Option<ffi::fi_cq_tagged_entry>> {
    let mut entry = [ffi::fi_cq_tagged_entry::default()];
    match cq.read(&mut entry) {
        1 => Ok(Some(entry[0])),
        ret if ret == EAGAIN as isize => Ok(None),
        ret => bail!("{what}: fi_cq_read returned {}", fabric::errname(ret as i32)),
    }
}

/// `warm` and `end` counted after `first` and `last` senders: nothing may have grown but
/// private memory, by at most `CHURN_RSS_GROWTH_MAX_KIB`.
fn nothing_grew(r: &mut Rank, senders: &str, (first, warm): (u64, Held), (last, end): (u64, Held)) -> TResult {
    let grown = end.rss_kib.saturating_sub(warm.rss_kib);
    let only_in = |a: &Held, b: &Held| -> Vec<String> {
        a.fd_names.iter().filter(|n| !b.fd_names.contains(n)).cloned().collect()
    };
    ensure!(
        end.fds == warm.fds && end.shm_maps == warm.shm_maps && end.shm_files == warm.shm_files,
        "after {first} {senders} {}, after {last} {}: fds only then {:?}, only now {:?}",
        warm.counts(),
        end.counts(),
        only_in(&warm, &end),
        only_in(&end, &warm)
    );
    ensure!(
        grown <= CHURN_RSS_GROWTH_MAX_KIB,
        "private memory grew by {grown} KiB from {senders} {first} to {last} ({} -> {})",
        warm.counts(),
        end.counts()
    );
    r.pmi.step(&format!("held after {first} {senders} {}, after {last} {}", warm.counts(), end.counts()));
    Ok(())
}

/// The long-lived endpoint of a churn, with a CQ of its own in `node`'s domain, one receive
/// buffer and one context. Not the harness's `Node` endpoint, which keeps every finished
/// operation's context (some 160 bytes each) and would grow by itself.
struct Receiver {
    // Field order is drop order: the endpoint closes before the buffer and the context that a
    // receive still posted (a failure's path) names go.
    ep: Ep,
    cq: Cq,
    buf: Vec<u8>,
    ctx: Box<ffi::fi_context2>,
}

/// An endpoint of `node`'s domain bound to its AV and to `cq` for both directions, enabled.
fn open_ep(node: &Node, cq: &Cq) -> TResult<Ep> {
    let ep = Ep::open(node.domain(), &node.info).ctx("fi_endpoint")?;
    fi_ok("fi_ep_bind(av)", ep.bind(node.av().fid(), 0))?;
    fi_ok("fi_ep_bind(cq)", ep.bind(cq.fid(), (ffi::FI_TRANSMIT | ffi::FI_RECV) as u64))?;
    fi_ok("fi_enable", ep.enable())?;
    Ok(ep)
}

fn open_cq(node: &Node, what: &str) -> TResult<Cq> {
    let mut attr = ffi::fi_cq_attr { format: ffi::FI_CQ_FORMAT_TAGGED, ..Default::default() };
    Cq::open(node.domain(), &mut attr).ctx(what)
}

impl Receiver {
    fn open(node: &Node) -> TResult<Receiver> {
        let cq = open_cq(node, "fi_cq_open (receiver)")?;
        let ep = open_ep(node, &cq)?;
        Ok(Receiver { ep, cq, buf: vec![0; CHURN_MSG_MAX], ctx: Box::default() })
    }

    /// Post a receive (with `tagged`, of any tag) and wait up to `timeout` for its completion,
    /// calling `turn` before each poll (it sends, where the sender is ours, or watches the
    /// senders); the tag and the bytes received.
    fn receive(
        &mut self,
        what: &str,
        tagged: bool,
        timeout: Duration,
        mut turn: impl FnMut() -> TResult,
    ) -> TResult<(u64, &[u8])> {
        self.buf.fill(0);
        let ctx: *mut std::ffi::c_void = (&mut *self.ctx as *mut ffi::fi_context2).cast();
        let (buf, len, any) = (self.buf.as_mut_ptr(), self.buf.len(), fabric::FI_ADDR_UNSPEC);
        // SAFETY: the buffer and the context live as long as the endpoint (`Receiver`'s field
        // order) and are not touched again before the completion below takes the receive.
        let ret = unsafe {
            if tagged {
                self.ep.trecv(buf, len, std::ptr::null_mut(), any, 0, u64::MAX, ctx)
            } else {
                self.ep.recv(buf, len, std::ptr::null_mut(), any, ctx)
            }
        };
        fi_ok(if tagged { "fi_trecv" } else { "fi_recv" }, ret as i64)?;
        let deadline = Instant::now() + timeout;
        let done = loop {
            turn()?;
            if let Some(e) = read_one(&self.cq, "receiver")? {
                break e;
            }
            ensure!(Instant::now() < deadline, "{what}: no receive completion after {timeout:?}");
        };
        ensure!(done.op_context == ctx, "{what}: completion for context {:?}", done.op_context);
        ensure!(done.flags & ffi::FI_RECV as u64 != 0, "{what}: flags {:#x} lack FI_RECV", done.flags);
        Ok((done.tag, &self.buf[..done.len.min(CHURN_MSG_MAX)]))
    }

    /// `held_now` once this endpoint has had the time to let go of the senders that left: it
    /// keeps what it holds for a live sender (a mapping of its region, a descriptor to watch it
    /// by) until it handles the sender's goodbye or, at its next liveness checks, finds it gone.
    fn settled(&self) -> TResult<Held> {
        let end = Instant::now() + CHURN_SETTLE;
        while Instant::now() < end {
            if let Some(e) = read_one(&self.cq, "settling")? {
                bail!("a completion nobody asked for: {e:?}");
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        held_now()
    }

    fn close(self) -> TResult {
        self.ep.close().ctx("fi_close(receiver)")?;
        self.cq.close().ctx("fi_close(cq)")?;
        Ok(())
    }
}

/// Endpoint churn through libfabric: `CHURN_EPS` endpoints of one domain, one after another,
/// each bound, enabled, sending one message (8 B inline or 2 KiB through an inject buffer, so
/// that the receiver's buffers a departing sender held must come back) to a long-lived endpoint
/// of the same domain that checks it, and closed. The receiver's peer table sees every one come
/// and go. From the `CHURN_WARMUP`th on, nothing may grow: open fds, mappings and /dev/shm files
/// exactly, private memory by at most `CHURN_RSS_GROWTH_MAX_KIB`.
fn endpoint_churn(r: &mut Rank) -> TResult {
    let node = Node::open(&r.prov, &NodeCfg::default(), r.timeout)?;
    let mut rx = Receiver::open(&node)?;
    let tx_cq = open_cq(&node, "fi_cq_open (senders)")?;
    let (ret, dest) = node.av().insert(&rx.ep.getname().ctx("fi_getname")?, 0);
    ensure!(ret == 1, "fi_av_insert returned {}", fabric::errname(ret));
    let mut warm = None;
    for i in 0..CHURN_EPS {
        if i % 500 == 0 {
            r.pmi.step(&format!("endpoint {i}"));
        }
        let ep = open_ep(&node, &tx_cq)?;
        let len = if i % 2 == 0 { 8 } else { CHURN_MSG_MAX };
        let payload = pattern(i, len);
        let mut sent = false;
        let (_, got) = rx.receive(&format!("endpoint {i}"), false, r.timeout, || {
            if !sent {
                let ret = ep.inject(&payload, dest);
                sent = ret == 0;
                ensure!(
                    sent || ret == EAGAIN as isize,
                    "endpoint {i}: fi_inject returned {}",
                    fabric::errname(ret as i32)
                );
                // The sender's CQ read drives it (an inject completes nothing there).
                ensure!(read_one(&tx_cq, "senders")?.is_none(), "endpoint {i}: a completion for an inject");
            }
            Ok(())
        })?;
        check_pattern("recv", i, got, len)?;
        ep.close().ctx("fi_close(ep)")?;
        if i + 1 == CHURN_WARMUP {
            warm = Some(rx.settled()?);
        }
    }
    let warm = warm.expect("counted at the warm-up");
    nothing_grew(r, "endpoints", (CHURN_WARMUP, warm), (CHURN_EPS, rx.settled()?))?;
    rx.close()?;
    tx_cq.close().ctx("fi_close(cq)")?;
    Ok(())
}

/// How a churned process leaves once its message completed.
#[derive(Clone, Copy, Debug)]
enum Leave {
    /// SIGKILL: nothing closed, nothing said.
    Kill,
    /// `exit(0)` without closing anything (libfabric objects and rshm's region left as they are).
    Exit,
    /// Every object closed (`Node`'s drop), then exit.
    Close,
}

impl Leave {
    const ALL: [Leave; 3] = [Leave::Kill, Leave::Exit, Leave::Close];

    fn name(self) -> &'static str {
        match self {
            Leave::Kill => "kill",
            Leave::Exit => "exit",
            Leave::Close => "close",
        }
    }

    fn named(name: &str) -> Option<Leave> {
        Leave::ALL.into_iter().find(|l| l.name() == name)
    }

    /// Whether `status` is how a process leaving this way ends.
    fn ended(self, status: ExitStatus) -> bool {
        use std::os::unix::process::ExitStatusExt;
        match self {
            Leave::Kill => status.signal() == Some(libc::SIGKILL),
            Leave::Exit | Leave::Close => status.success(),
        }
    }
}

/// Process churn through libfabric: `PROCESSES` processes, each opening an endpoint of its own
/// (`__churn_child`), sending one tagged message (8 B inline or 2 KiB through the receiver's
/// inject buffers) to a long-lived endpoint here, waiting for its completion and leaving by
/// SIGKILL, by exiting without closing anything, or by `fi_close` (with rshm; other providers'
/// processes only close, as what they leave when killed is not this test's concern). Up to
/// `PROCESSES_AT_ONCE` run at a time (each spends some 100 ms loading libfabric's own
/// dependencies). Every message must arrive intact, once, and from the `PROCESS_WARMUP`th
/// process on nothing may grow here (as in `endpoint_churn`; both counts taken with no process
/// running). With rshm the receiver's peer table has 8 entries (FI_RSHM_MAX_PEERS), so each is
/// reused many times; and a process that closed must have left no region in /dev/shm. The
/// regions of the others, if a later process's first endpoint did not remove them
/// (FI_RSHM_REAP_DEAD, which `scripts/test.sh` turns off so that its last step sees every region
/// a test leaked), are removed here.
///
/// A process leaves as soon as its send completed, often before the receiver has read anything
/// of it, so that a successor comes for its entry of the receiver's peer table while its
/// message still waits there (a message was lost that way, until a dead sender's entry passed
/// on only once the receiver had handled its commands: `claim_slot` in smr-core's
/// `endpoint/entry.rs`).
fn process_churn(r: &mut Rank) -> TResult {
    let rshm = r.prov == "rshm";
    if rshm {
        std::env::set_var("FI_RSHM_MAX_PEERS", "8");
    }
    let node = Node::open(&r.prov, &NodeCfg::default(), r.timeout)?;
    let mut rx = Receiver::open(&node)?;
    let to = hex(&rx.ep.getname().ctx("fi_getname")?);
    let exe = std::env::current_exe().map_err(|e| TestErr::Fail(format!("current_exe: {e}")))?;
    let (mut warm, mut pids, mut running, mut next, mut left) = (None, Vec::new(), Vec::<Churned>::new(), 0, 0);
    while left < PROCESSES {
        // Counts are taken with no process running: none starts past the warm-up until then.
        let limit = if warm.is_none() { PROCESS_WARMUP } else { PROCESSES };
        while running.len() < PROCESSES_AT_ONCE && next < limit {
            let leave = if rshm { Leave::ALL[next as usize % Leave::ALL.len()] } else { Leave::Close };
            let c = Churned::spawn(&exe, &r.prov, &to, next, leave)?;
            pids.push((c.child.id(), leave));
            running.push(c);
            next += 1;
        }
        if running.is_empty() {
            warm = Some(rx.settled()?);
            continue;
        }
        if running.iter().any(|c| !c.received) {
            let received = rx.receive("a churned process's message", true, r.timeout, || {
                running.iter_mut().try_for_each(|c| c.check_exit().map(drop))
            });
            let (tag, got) = match received {
                Ok(got) => got,
                Err(e) => {
                    let states: Vec<String> = running
                        .iter_mut()
                        .map(|c| {
                            format!("{} received {} exited {}: {}", c.what(), c.received, c.exited, reap(&mut c.child))
                        })
                        .collect();
                    bail!("{e:?}; the processes running: {}", states.join("; "))
                }
            };
            let c = running.iter_mut().find(|c| c.seq == tag && !c.received);
            let c =
                c.ok_or_else(|| TestErr::Fail(format!("a message tagged {tag}: from no process still expected")))?;
            check_pattern(&c.what(), c.seq, got, Churned::len(c.seq))?;
            c.received = true;
        } else {
            wait_for_exit(&mut running, r.timeout, &rx.cq)?;
        }
        for c in running.iter_mut() {
            c.check_exit()?;
        }
        let before = running.len();
        running.retain(|c| !(c.received && c.exited));
        left += (before - running.len()) as u64;
        if left % 50 == 0 && before != running.len() {
            r.pmi.step(&format!("{left} processes left"));
        }
    }
    let warm = warm.expect("counted at the warm-up");
    nothing_grew(r, "processes", (PROCESS_WARMUP, warm), (PROCESSES, rx.settled()?))?;
    if rshm {
        let mut closed_left = Vec::new();
        for (pid, leave) in pids {
            for name in shm_files_of(pid) {
                match leave {
                    Leave::Close => closed_left.push(name),
                    _ => io(std::fs::remove_file(format!("/dev/shm/{name}")), "remove a churned process's region")?,
                }
            }
        }
        ensure!(closed_left.is_empty(), "regions of churned processes that closed, left in /dev/shm: {closed_left:?}");
    }
    rx.close()
}

/// One process of `process_churn`.
struct Churned {
    seq: u64,
    leave: Leave,
    child: Child,
    received: bool,
    exited: bool,
}

impl Churned {
    fn spawn(exe: &std::path::Path, prov: &str, to: &str, seq: u64, leave: Leave) -> TResult<Churned> {
        let mut cmd = Command::new(exe);
        cmd.args(["__churn_child", "--provider", prov, "--to", to, "--seq", &seq.to_string(), "--leave", leave.name()]);
        // Under AddressSanitizer (scripts/asan-provider.sh) a process that exits without closing
        // leaks by design: only the receiver here is checked for leaks.
        if let Ok(asan) = std::env::var("ASAN_OPTIONS") {
            cmd.env("ASAN_OPTIONS", format!("{asan}:detect_leaks=0"));
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| TestErr::Fail(format!("spawn process {seq}: {e}")))?;
        Ok(Churned { seq, leave, child, received: false, exited: false })
    }

    /// The length of process `seq`'s message.
    fn len(seq: u64) -> usize {
        if seq.is_multiple_of(2) {
            8
        } else {
            CHURN_MSG_MAX
        }
    }

    fn what(&self) -> String {
        format!("process {} ({})", self.seq, self.leave.name())
    }

    /// Note whether it has exited, and fail if it did not end the way it was to leave.
    fn check_exit(&mut self) -> TResult<bool> {
        if !self.exited {
            if let Some(status) = self.child.try_wait().map_err(|e| TestErr::Fail(format!("waitpid: {e}")))? {
                ensure!(
                    self.leave.ended(status),
                    "{} ended with {status}; it said: {}",
                    self.what(),
                    reap(&mut self.child)
                );
                self.exited = true;
            }
        }
        Ok(self.exited)
    }
}

impl Drop for Churned {
    fn drop(&mut self) {
        if !self.exited {
            reap(&mut self.child);
        }
    }
}

/// Wait up to `timeout` for one of `running` (every message received) to exit, reading `cq`
/// meanwhile (nothing may complete).
fn wait_for_exit(running: &mut [Churned], timeout: Duration, cq: &Cq) -> TResult {
    let deadline = Instant::now() + timeout;
    loop {
        for c in running.iter_mut() {
            if c.check_exit()? {
                return Ok(());
            }
        }
        if let Some(e) = read_one(cq, "while senders leave")? {
            bail!("a completion nobody asked for: {e:?}");
        }
        if Instant::now() > deadline {
            let said: Vec<String> =
                running.iter_mut().map(|c| format!("{}: {}", c.what(), reap(&mut c.child))).collect();
            bail!("no churned process exited within {timeout:?}: {}", said.join("; "));
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Kill `child` if it still runs, and what it wrote to stderr.
fn reap(child: &mut Child) -> String {
    use std::io::Read;
    let _ = child.kill();
    let _ = child.wait();
    let mut said = String::new();
    if let Some(mut err) = child.stderr.take() {
        let _ = err.read_to_string(&mut said);
    }
    said.trim().to_string()
}

/// `__churn_child --provider P --to ADDR --seq N --leave kill|exit|close`: one process of
/// `process_churn`, whose message is tagged N and `Churned::len(N)` bytes long. Exit status 0
/// (or death by SIGKILL) once its message completed; 1, with the reason on stderr, otherwise.
pub fn child_main(args: &[String]) -> i32 {
    match churn_child(args) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("churn child: {e:?}");
            1
        }
    }
}

fn churn_child(args: &[String]) -> TResult {
    let arg = |key: &str| -> TResult<&str> {
        let at = args.iter().position(|a| a == key).ok_or_else(|| TestErr::Fail(format!("{key} missing")))?;
        args.get(at + 1).map(String::as_str).ok_or_else(|| TestErr::Fail(format!("{key} needs a value")))
    };
    let num = |key: &str| -> TResult<u64> { arg(key)?.parse().map_err(|_| TestErr::Fail(format!("bad {key}"))) };
    let to = unhex(arg("--to")?).ok_or_else(|| TestErr::Fail("bad --to".into()))?;
    let seq = num("--seq")?;
    let leave = Leave::named(arg("--leave")?).ok_or_else(|| TestErr::Fail("bad --leave".into()))?;
    // Each stage said on stderr, which the receiver shows if this process fails it.
    let mut node = Node::open(arg("--provider")?, &NodeCfg::default(), Duration::from_secs(20))?;
    let dest = node.insert(&to)?;
    eprintln!("opened");
    let id = node.send(&pattern(seq, Churned::len(seq)), dest, &Tx::tagged(seq))?;
    eprintln!("sent");
    node.wait_ok(id, "the message")?;
    eprintln!("completed");
    match leave {
        Leave::Kill => {
            // SAFETY: raise(2) with a signal number; no memory is involved.
            unsafe { libc::raise(libc::SIGKILL) };
            bail!("survived SIGKILL")
        }
        Leave::Exit => std::process::exit(0),
        Leave::Close => {
            drop(node);
            let late = crate::harness::take_drop_failures();
            ensure!(late.is_empty(), "closing: {}", late.join("; "));
            Ok(())
        }
    }
}
