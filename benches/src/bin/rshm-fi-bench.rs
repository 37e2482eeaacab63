//! rshm-fi-bench: latency, bandwidth and message-rate sweeps of one libfabric provider, through
//! libfabric's public API, between two processes pinned to two CPUs.
//!
//! The process started by the user is the initiator; it starts itself again (`--peer`) as the
//! responder and drives it with one-line commands over the child's stdin/stdout (address
//! exchange, "run this test at this size for N iterations", "ready", "ok"). The fabric traffic
//! itself only goes through the provider. Which libfabric core runs is whatever the dynamic
//! linker finds (LD_LIBRARY_PATH selects the 2.x core of the PyPI mpich wheel); the core's
//! version is printed with every result.
//!
//! Every point: a verified run (data checked), a calibration that doubles the iteration count
//! until a run takes a few milliseconds, then the timed run, repeated (up to --tries) while
//! another task took the CPUs away from the two processes (scheduler run-queue wait in
//! /proc/<pid>/schedstat, hypervisor steal in /proc/stat). A point that stayed busy is printed
//! with busy=1: it is reported, never silently mixed with clean figures.

use rshm_benches::fi::endpoint::Result;
use rshm_benches::fi::fabric;
use rshm_benches::fi::tests::{self, Run};
use rshm_benches::fi::{Endpoint, Family, RemoteMr, Test};
use rshm_benches::{allowed_cpus, parse_size, pin_to_cpu, CpuSnapshot};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitCode, Stdio};
use std::time::Duration;

const USAGE: &str = "\
usage: rshm-fi-bench --provider NAME [--families LIST] [--tests LIST] [--sizes LIST]
                     [--time-ms MS] [--tries N] [--no-pin]
       rshm-fi-bench --list-tests   (each family's tests, `family test` per line, in run order)

  --provider NAME   libfabric provider (rshm, shm, sm2, ...); rshm needs FI_PROVIDER_PATH
  --families LIST   comma-separated: tagged,msg,rma,atomic (default all)
  --tests LIST      only these tests: lat,bw,write_lat,write_lat_tc,write_bw,read_lat,read_bw,
                    fetch_lat,cswap_lat,atomic_read_lat,atomic_lat,atomic_rate,bw_msg,bw_more,
                    atomic_rate_more,atomic_lat_tc,atomic_rate_tc,bw_data (default all of the
                    chosen families; the _more ones post with FI_MORE on all but the last of a
                    window, bw_msg is bw_more's call without FI_MORE, bw_data is bw with remote
                    CQ data on every message (MPI's sends), the _tc ones post fi_writemsg or
                    fi_atomicmsg with FI_TRANSMIT_COMPLETE; cswap_lat is fi_compare_atomic, atomic_read_lat
                    fi_fetch_atomicmsg FI_ATOMIC_READ)
  --sizes LIST      message sizes, K/M suffixes allowed (default 8,64,256,1K,4K,16K,64K,256K,1M,4M)
  --time-ms MS      target duration of one timed run (default 100)
  --tries N         timed runs per point while other load is seen (default 3)
  --no-pin          do not pin the two processes to two CPUs
  --peer-pid-namespace
                    start the responder in a pid namespace of its own (`unshare --pid --fork
                    --mount-proc`, root only), as in a container sharing /dev/shm but not its
                    pids: a check that every test works across namespaces

Prints one line per point on stdout, tab-separated key=value fields:
  RESULT prov core family test size iters ops ns load busy tries
  INFO   prov core family version inject_size   (once per family opened)
  NA     prov core family test reason       (the provider does not offer it)
  FAIL   prov core family test size reason  (an error, a data check included)
ns is the timed run's duration; ops the messages/operations in it (latency tests: round trips
for lat, operations otherwise). load is the largest share of the run during which either
process waited for its CPU (or the hypervisor stole it); busy=1 when it stayed above 2%.
exit status: 0 when nothing failed, 1 on a failure, 2 on a usage error";

const DEFAULT_SIZES: &str = "8,64,256,1K,4K,16K,64K,256K,1M,4M";
const PEER_ARG: &str = "--peer";

struct Opts {
    provider: String,
    families: Vec<Family>,
    tests: Option<Vec<Test>>,
    sizes: Vec<usize>,
    time: Duration,
    tries: u32,
    pin: bool,
    peer_own_pid_namespace: bool,
}

fn parse_list<T>(s: &str, what: &str, f: impl Fn(&str) -> Option<T>) -> std::result::Result<Vec<T>, String> {
    s.split(',').filter(|x| !x.is_empty()).map(|x| f(x).ok_or_else(|| format!("unknown {what} {x:?}"))).collect()
}

fn parse_args(args: &[String]) -> std::result::Result<Option<Opts>, String> {
    let mut o = Opts {
        provider: String::new(),
        families: Family::ALL.to_vec(),
        tests: None,
        sizes: parse_list(DEFAULT_SIZES, "size", |s| parse_size(s).ok())?,
        time: Duration::from_millis(100),
        tries: 3,
        pin: true,
        peer_own_pid_namespace: false,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || it.next().cloned().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--provider" => o.provider = val()?,
            "--families" => o.families = parse_list(&val()?, "family", Family::parse)?,
            "--tests" => o.tests = Some(parse_list(&val()?, "test", Test::parse)?),
            "--sizes" => o.sizes = parse_list(&val()?, "size", |s| parse_size(s).ok())?,
            "--time-ms" => o.time = Duration::from_millis(val()?.parse().map_err(|e| format!("--time-ms: {e}"))?),
            "--tries" => o.tries = val()?.parse().map_err(|e| format!("--tries: {e}"))?,
            "--no-pin" => o.pin = false,
            "--peer-pid-namespace" => o.peer_own_pid_namespace = true,
            "--help" | "-h" => return Ok(None),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if o.provider.is_empty() {
        return Err("--provider is required".into());
    }
    if o.sizes.is_empty() || o.sizes.contains(&0) {
        return Err("sizes must be at least 1 byte".into());
    }
    o.tries = o.tries.max(1);
    Ok(Some(o))
}

fn core_version() -> String {
    let v = fabric::core_version();
    format!("{}.{}", v >> 16, v & 0xffff)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Result<Vec<u8>> {
    if s.len() & 1 != 0 {
        return Err(format!("bad hex {s:?}"));
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).map_err(|e| e.to_string())).collect()
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some(PEER_ARG) {
        return match peer_main(&args[1..]) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("rshm-fi-bench peer: {e}");
                ExitCode::FAILURE
            }
        };
    }
    if args == ["--list-tests"] {
        for family in Family::ALL {
            for test in Test::of(family) {
                println!("{} {}", family.name(), test.name());
            }
        }
        return ExitCode::SUCCESS;
    }
    let opts = match parse_args(&args) {
        Ok(Some(o)) => o,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("rshm-fi-bench: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match initiator_main(&opts) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("rshm-fi-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The responder

fn peer_main(args: &[String]) -> Result<()> {
    // Die with the initiator, whatever happens to it.
    // SAFETY: prctl(PR_SET_PDEATHSIG) takes a signal number; no memory is passed.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
    if let Some(cpu) = args.iter().position(|a| a == "--cpu").and_then(|i| args.get(i + 1)) {
        pin_to_cpu(cpu.parse().map_err(|e| format!("--cpu: {e}"))?)?;
    }
    let stdin = std::io::stdin();
    let mut out = std::io::stdout();
    let mut say = |s: String| -> Result<()> {
        writeln!(out, "{s}").and_then(|_| out.flush()).map_err(|e| format!("write to initiator: {e}"))
    };
    let mut ep: Option<Endpoint> = None;
    let mut provider = String::new();
    for line in stdin.lock().lines() {
        let line = line.map_err(|e| format!("read from initiator: {e}"))?;
        let w: Vec<&str> = line.split_whitespace().collect();
        match w.as_slice() {
            ["provider", p] => provider = p.to_string(),
            ["open", fam, max] => {
                let family = Family::parse(fam).ok_or("bad family")?;
                let max: usize = max.parse().map_err(|_| "bad size")?;
                ep = None;
                match Endpoint::open(&provider, family, max).and_then(|e| e.name().map(|n| (e, n))) {
                    Ok((e, name)) => {
                        let mr = e.remote_mr();
                        say(format!("addr {} {} {}", hex(&name), mr.key, mr.addr))?;
                        ep = Some(e);
                    }
                    Err(e) => say(format!("na {e}"))?,
                }
            }
            ["peer", addr] => {
                let e = ep.as_mut().ok_or("peer before open")?;
                match e.connect(&unhex(addr)?) {
                    Ok(()) => say("ok".into())?,
                    Err(err) => say(format!("err {err}"))?,
                }
            }
            ["run", test, size, iters, verify] => {
                let e = ep.as_mut().ok_or("run before open")?;
                let r = Run {
                    test: Test::parse(test).ok_or("bad test")?,
                    size: size.parse().map_err(|_| "bad size")?,
                    iters: iters.parse().map_err(|_| "bad iters")?,
                    verify: *verify == "1",
                    remote: RemoteMr::default(),
                };
                if let Err(err) = tests::prepare_responder(e, &r) {
                    say(format!("err {err}"))?;
                    continue;
                }
                say("ready".into())?;
                match tests::respond(e, &r) {
                    Ok(()) => say("ok".into())?,
                    Err(err) => say(format!("err {err}"))?,
                }
            }
            ["close"] => {
                ep = None;
                say("ok".into())?;
            }
            ["quit"] => break,
            _ => return Err(format!("unknown command {line:?}")),
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The initiator

/// The responder process and its command channel.
struct Peer {
    child: Child,
    input: ChildStdin,
    output: BufReader<ChildStdout>,
    /// Started under `unshare` (`--peer-pid-namespace`): the responder is `child`'s child.
    under_unshare: bool,
    /// The responder's pid here, once known (`responder_pid`).
    responder: Option<u32>,
}

impl Peer {
    fn start(cpu: Option<usize>, provider: &str, own_pid_namespace: bool) -> Result<Peer> {
        let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
        let mut cmd = if own_pid_namespace {
            let mut unshare = Command::new("unshare");
            unshare.args(["--pid", "--fork", "--mount-proc", "--kill-child"]).arg(exe);
            unshare
        } else {
            Command::new(exe)
        };
        cmd.arg(PEER_ARG).stdin(Stdio::piped()).stdout(Stdio::piped());
        if let Some(cpu) = cpu {
            cmd.args(["--cpu", &cpu.to_string()]);
        }
        let mut child = cmd.spawn().map_err(|e| format!("start the peer: {e}"))?;
        let input = child.stdin.take().ok_or("no peer stdin")?;
        let output = BufReader::new(child.stdout.take().ok_or("no peer stdout")?);
        let mut p = Peer { child, input, output, under_unshare: own_pid_namespace, responder: None };
        p.send(&format!("provider {provider}"))?;
        Ok(p)
    }

    /// The pid (in our namespace) of the process that runs the responder, whose CPU the load
    /// figures watch: `unshare --fork` waits while its child runs the command.
    fn responder_pid(&mut self) -> u32 {
        if !self.under_unshare {
            return self.child.id();
        }
        if self.responder.is_none() {
            let unshare = self.child.id();
            let children = std::fs::read_to_string(format!("/proc/{unshare}/task/{unshare}/children"));
            self.responder = children.ok().and_then(|c| c.split_whitespace().next()?.parse().ok());
        }
        self.responder.unwrap_or_else(|| self.child.id())
    }

    fn send(&mut self, line: &str) -> Result<()> {
        writeln!(self.input, "{line}").and_then(|_| self.input.flush()).map_err(|e| format!("write to the peer: {e}"))
    }

    fn recv(&mut self) -> Result<String> {
        let mut s = String::new();
        match self.output.read_line(&mut s) {
            Ok(0) => Err("the peer exited".into()),
            Ok(_) => Ok(s.trim_end().to_string()),
            Err(e) => Err(format!("read from the peer: {e}")),
        }
    }

    /// Expect "ok" (or `want`); "err ..." becomes the error.
    fn expect(&mut self, want: &str) -> Result<()> {
        let line = self.recv()?;
        if line == want {
            Ok(())
        } else if let Some(e) = line.strip_prefix("err ") {
            Err(format!("peer: {e}"))
        } else {
            Err(format!("peer answered {line:?}, expected {want:?}"))
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.send("quit");
        let _ = self.child.wait();
    }
}

struct Ctx<'a> {
    opts: &'a Opts,
    core: String,
    failed: bool,
}

impl Ctx<'_> {
    fn head(&self, kind: &str, family: Family, test: Test) -> String {
        format!(
            "{kind}\tprov={}\tcore={}\tfamily={}\ttest={}",
            self.opts.provider,
            self.core,
            family.name(),
            test.name()
        )
    }

    fn na(&self, family: Family, test: Test, reason: &str) {
        println!("{}\treason={}", self.head("NA", family, test), reason.replace(['\t', '\n'], " "));
    }

    fn fail(&mut self, family: Family, test: Test, size: usize, reason: &str) {
        self.failed = true;
        println!("{}\tsize={size}\treason={}", self.head("FAIL", family, test), reason.replace(['\t', '\n'], " "));
        eprintln!("rshm-fi-bench: {} {} {} {size}: {reason}", self.opts.provider, family.name(), test.name());
    }
}

fn initiator_main(opts: &Opts) -> Result<bool> {
    // A driver that is killed (scripts/bench.py, `timeout`) takes the bench with it.
    // SAFETY: prctl(PR_SET_PDEATHSIG) takes a signal number; no memory is passed.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) };
    let cpus = allowed_cpus();
    let (mine, theirs) = match (opts.pin, cpus) {
        (true, [a, b, ..]) => (Some(*a), Some(*b)),
        _ => (None, None),
    };
    if opts.pin && mine.is_none() {
        eprintln!("rshm-fi-bench: fewer than two CPUs allowed: not pinning (figures will be poor)");
    }
    if let Some(cpu) = mine {
        pin_to_cpu(cpu)?;
    }
    let mut peer = Peer::start(theirs, &opts.provider, opts.peer_own_pid_namespace)?;
    let mut ctx = Ctx { opts, core: core_version(), failed: false };
    let max = opts.sizes.iter().copied().max().unwrap_or(8).max(64);
    for &family in &opts.families {
        let tests: Vec<Test> = Test::of(family)
            .iter()
            .copied()
            .filter(|t| opts.tests.as_ref().is_none_or(|only| only.contains(t)))
            .collect();
        if tests.is_empty() {
            continue;
        }
        // After a failure the family starts afresh (new endpoints on both sides) at the next
        // point: one provider's stuck operation must not cost every later figure.
        let mut from = Some((0, 0));
        while let Some(start) = from {
            from = run_family(&mut ctx, &mut peer, family, &tests, start, max)?;
        }
    }
    Ok(!ctx.failed)
}

/// Open the family's endpoints on both sides and run `tests` from `start` (test index, size
/// index); returns where to resume after a failed point, `None` when done.
fn run_family(
    ctx: &mut Ctx,
    peer: &mut Peer,
    family: Family,
    tests: &[Test],
    start: (usize, usize),
    max: usize,
) -> Result<Option<(usize, usize)>> {
    peer.send(&format!("open {} {max}", family.name()))?;
    let reply = peer.recv()?;
    let na = |ctx: &Ctx, why: &str| tests[start.0..].iter().for_each(|&t| ctx.na(family, t, why));
    if let Some(why) = reply.strip_prefix("na ") {
        na(ctx, why);
        return Ok(None);
    }
    let w: Vec<&str> = reply.split_whitespace().collect();
    let ["addr", addr, key, raddr] = w.as_slice() else { return Err(format!("peer answered {reply:?}")) };
    let remote = RemoteMr { key: key.parse().map_err(|_| "bad key")?, addr: raddr.parse().map_err(|_| "bad address")? };
    let mut ep = match Endpoint::open(&ctx.opts.provider, family, max) {
        Ok(e) => e,
        Err(why) => {
            na(ctx, &why);
            peer.send("close")?;
            return peer.expect("ok").map(|_| None);
        }
    };
    eprintln!("rshm-fi-bench: {} on libfabric core {}: {}", ep.describe(), ctx.core, family.name());
    println!(
        "INFO\tprov={}\tcore={}\tfamily={}\tversion={}\tinject_size={}",
        ctx.opts.provider,
        ctx.core,
        family.name(),
        ep.describe(),
        ep.inject_size
    );
    ep.connect(&unhex(addr)?)?;
    peer.send(&format!("peer {}", hex(&ep.name()?)))?;
    peer.expect("ok")?;
    let mut resume = None;
    'tests: for (ti, &test) in tests.iter().enumerate().skip(start.0) {
        if family == Family::Atomic && !ep.sum_u64_valid() {
            ctx.na(family, test, "fi_atomicvalid(FI_UINT64, FI_SUM) declines");
            continue;
        }
        let sizes: Vec<usize> = match test.fixed_size() {
            Some(s) => vec![s],
            None => ctx.opts.sizes.iter().copied().filter(|&n| n <= test.max_size()).collect(),
        };
        let first = if ti == start.0 { start.1 } else { 0 };
        for (si, &size) in sizes.iter().enumerate().skip(first) {
            if let Err(e) = point(ctx, peer, &mut ep, test, size, remote) {
                ctx.fail(family, test, size, &e);
                // The endpoints may hold half-finished operations: close them, and go on
                // with fresh ones from the next point.
                resume = Some(if si + 1 < sizes.len() { (ti, si + 1) } else { (ti + 1, 0) });
                break 'tests;
            }
        }
    }
    drop(ep);
    peer.send("close")?;
    peer.expect("ok")?;
    Ok(resume.filter(|&(ti, _)| ti < tests.len()))
}

/// One run of `iters` iterations on both sides; the initiator's time.
fn run(peer: &mut Peer, ep: &mut Endpoint, r: &Run) -> Result<Duration> {
    tests::prepare_initiator(ep, r)?;
    peer.send(&format!("run {} {} {} {}", r.test.name(), r.size, r.iters, r.verify as u8))?;
    peer.expect("ready")?;
    let mine = tests::initiate(ep, r);
    let theirs = peer.expect("ok");
    let d = mine?;
    theirs?;
    Ok(d)
}

fn point(ctx: &Ctx, peer: &mut Peer, ep: &mut Endpoint, test: Test, size: usize, remote: RemoteMr) -> Result<()> {
    // A test that checks each fetched value against the one before needs a few to check.
    let mut r = Run { test, size, iters: if test.fetches() { 4 } else { 2 }, verify: true, remote };
    run(peer, ep, &r)?;
    r.verify = false;
    // Calibrate: double until one run takes at least 1/16 of the target time.
    r.iters = 4;
    let per_iter = loop {
        let d = run(peer, ep, &r)?;
        if d >= ctx.opts.time / 16 || r.iters >= 1 << 24 {
            break d.as_secs_f64() / r.iters as f64;
        }
        r.iters *= 2;
    };
    r.iters = ((ctx.opts.time.as_secs_f64() / per_iter.max(1e-9)) as u64).clamp(3, 1 << 26);
    // The least disturbed timed run: (duration, iterations, load, busy).
    let mut best: Option<(Duration, u64, f64, bool)> = None;
    let mut tries = 0;
    let mut rescaled = 0;
    while tries < ctx.opts.tries {
        let before = CpuSnapshot::take(Some(peer.responder_pid()));
        let d = run(peer, ep, &r)?;
        let after = CpuSnapshot::take(Some(peer.responder_pid()));
        if d < ctx.opts.time / 2 && rescaled < 4 && r.iters < 1 << 26 {
            // A calibration run that was preempted makes the timed run too short to mean
            // anything (or to judge the load over): scale up and run again.
            let scale = ctx.opts.time.as_secs_f64() / d.as_secs_f64().max(1e-6);
            r.iters = ((r.iters as f64 * scale) as u64).clamp(r.iters + 1, 1 << 26);
            rescaled += 1;
            continue;
        }
        tries += 1;
        let (load, busy) = match before.share_until(&after) {
            Some(s) => (s.parent_waiting.max(s.child_waiting).max(s.steal), s.contended()),
            None => (0.0, false),
        };
        if best.is_none_or(|(_, _, l, _)| load < l) {
            best = Some((d, r.iters, load, busy));
        }
        if !busy {
            break;
        }
        if d > ctx.opts.time * 4 {
            // A run stretched far past its target (a stalled provider, or heavy load): aim the
            // next try back at the target, so a busy point cannot cost minutes.
            let scale = ctx.opts.time.as_secs_f64() / d.as_secs_f64();
            r.iters = ((r.iters as f64 * scale) as u64).max(3);
        }
    }
    let (d, iters, load, busy) = best.expect("at least one try");
    if busy {
        eprintln!(
            "rshm-fi-bench: warning: {} {} {size} B: other load took {:.1}% of the CPUs in each of {tries} tries",
            ctx.opts.provider,
            test.name(),
            load * 100.0
        );
    }
    println!(
        "{}\tsize={size}\titers={}\tops={}\tns={}\tload={load:.4}\tbusy={}\ttries={tries}",
        ctx.head("RESULT", ep.family, test),
        iters,
        iters * test.ops_per_iter(),
        d.as_nanos(),
        busy as u8
    );
    Ok(())
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn hex_round_trip() {
        let b = [0u8, 1, 0xab, 0xff];
        assert_eq!(unhex(&hex(&b)).unwrap(), b);
        assert!(unhex("abc").is_err());
    }

    #[test]
    fn args() {
        let a: Vec<String> = ["--provider", "shm", "--sizes", "8,4K", "--families", "tagged,rma"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let o = parse_args(&a).unwrap().unwrap();
        assert_eq!(o.sizes, vec![8, 4096]);
        assert_eq!(o.families, vec![Family::Tagged, Family::Rma]);
        assert!(parse_args(&["--sizes".to_string(), "8".to_string()]).is_err());
        assert!(parse_args(&["--provider".into(), "x".into(), "--tests".into(), "nope".into()]).is_err());
    }
}
