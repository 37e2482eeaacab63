//! Memory and connection cost as the number of endpoints on a node grows (issue 8: "connect time
//! and memory per peer at 2, 8, 32 and 128 endpoints, message ring and alltoall, no cliff").
//!
//! For each N, N processes each open one smr-core endpoint (the engine under every rshm
//! endpoint, default parameters), then:
//! - **alltoall**: each sends one 8-byte message to every other (connecting to each on first
//!   use) and waits for the N-1 messages sent to it, plus its own sends' completions;
//! - **ring**: a token goes round the ring 100 times (each hop one message to the next process).
//!
//! Each process reports its resident memory (VmRSS) before the endpoint exists, after it is
//! created, and after the alltoall (when it is connected to all N-1 peers), and the times. The
//! processes wait on their endpoint's futex when idle (no busy polling), so 128 processes share
//! two CPUs without starving each other. Usage:
//!
//! ```text
//! rshm-scale [--procs 2,8,32,128] [--laps 100]
//! ```

use smr_core::endpoint::{Disposition, Endpoint, Handler, Incoming, Params, PeerId, SendOpts};
use smr_core::iov::LocalIov;
use smr_core::{cmd::MsgHeader, Error as EngineError};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const CHILD_ARG: &str = "--rshm-scale-child";
/// Longest any one wait may take before the run counts as failed (never a hang).
const LIMIT: Duration = Duration::from_secs(120);
const TAG_ALLTOALL: u64 = 1;
const TAG_RING: u64 = 2;

#[derive(Default)]
struct Count {
    alltoall: usize,
    ring: usize,
    sends_done: usize,
    error: Option<String>,
}

impl Handler for Count {
    fn on_message(&mut self, msg: &Incoming, _src: &str) -> Disposition {
        Disposition::Deliver { dest: LocalIov::owned(vec![0; msg.hdr.len as usize]), ctx: msg.hdr.tag }
    }
    fn on_recv_done(&mut self, ctx: u64, result: smr_core::Result<usize>, _dest: LocalIov) {
        match (ctx, result) {
            (TAG_ALLTOALL, Ok(8)) => self.alltoall += 1,
            (TAG_RING, Ok(8)) => self.ring += 1,
            (tag, r) => self.error = Some(format!("message tag {tag}: {r:?}")),
        }
    }
    fn on_send_done(&mut self, _cookie: u64, result: smr_core::Result<()>) {
        self.sends_done += 1;
        if let Err(e) = result {
            self.error = Some(format!("send failed: {e}"));
        }
    }
}

/// (private, shared) resident KiB of this process: RssAnon, and RssFile + RssShmem. Shared
/// pages are mapped pages of region files (ours and peers'), counted in every process that
/// maps them (and the kernel maps up to 16 neighbours of a faulting page at once): they are not
/// memory this process allocated. What a region really holds is its file's allocated pages.
fn rss_kib() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    (field("RssAnon:"), field("RssFile:") + field("RssShmem:"))
}

/// KiB of memory the region file `name` holds (its allocated blocks, touched pages only).
fn region_kib(name: &str) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(format!("/dev/shm/{name}")).map_or(0, |m| m.blocks() * 512 / 1024)
}

fn name(run: &str, i: usize) -> String {
    format!("rshm_scale_{run}_{i}")
}

/// Progress until `done`, sleeping on the endpoint's futex when nothing moved.
fn wait_for(ep: &mut Endpoint, h: &mut Count, what: &str, done: impl Fn(&Count) -> bool) -> Result<(), String> {
    let start = Instant::now();
    while !done(h) {
        if let Some(e) = h.error.take() {
            return Err(e);
        }
        if ep.progress(h) == 0 {
            ep.wait(Some(Duration::from_millis(1)));
        }
        if start.elapsed() > LIMIT {
            return Err(format!("timed out waiting for {what}"));
        }
    }
    Ok(())
}

fn send(ep: &mut Endpoint, h: &mut Count, peer: PeerId, tag: u64) -> Result<(), String> {
    let start = Instant::now();
    let hdr = MsgHeader { app: 0, tag, data: 0, aux: 0, len: 8 };
    loop {
        match ep.send_bytes(peer, hdr, &[7; 8], SendOpts::default()) {
            Ok(_) => return Ok(()),
            // The peer's region may not exist yet, or its queue is full: progress and retry.
            Err(EngineError::Again) => {
                if ep.progress(h) == 0 {
                    ep.wait(Some(Duration::from_millis(1)));
                }
            }
            Err(e) => return Err(format!("send to peer {peer}: {e}")),
        }
        if start.elapsed() > LIMIT {
            return Err(format!("send to peer {peer} still refused"));
        }
    }
}

/// One process of the job: prints "anon_start anon_created anon_connected shared_created
/// shared_connected region_kib alltoall_us ring_us".
fn child(run: &str, me: usize, n: usize, laps: usize) -> Result<(), String> {
    let rss_start = rss_kib();
    let mut ep = Endpoint::create(&name(run, me), Params::default()).map_err(|e| format!("create: {e}"))?;
    let rss_created = rss_kib();
    // Barrier: every endpoint exists before the clock starts (the parent answers "created"
    // from all of them with a line on every stdin).
    {
        use std::io::{BufRead, Write};
        println!("created");
        std::io::stdout().flush().map_err(|e| e.to_string())?;
        let mut go = String::new();
        std::io::stdin().lock().read_line(&mut go).map_err(|e| e.to_string())?;
    }
    let mut h = Count::default();
    let peers: Vec<PeerId> =
        (0..n).map(|i| ep.add_peer(&name(run, i)).map_err(|e| format!("add_peer: {e}"))).collect::<Result<_, _>>()?;
    let t = Instant::now();
    for k in 1..n {
        let to = (me + k) % n;
        send(&mut ep, &mut h, peers[to], TAG_ALLTOALL)?;
    }
    wait_for(&mut ep, &mut h, "the alltoall", |h| h.alltoall == n - 1)?;
    let alltoall = t.elapsed();
    let rss_connected = rss_kib();
    let t = Instant::now();
    let next = peers[(me + 1) % n];
    for lap in 0..laps {
        if me == 0 {
            send(&mut ep, &mut h, next, TAG_RING)?;
            wait_for(&mut ep, &mut h, "the token", |h| h.ring == lap + 1)?;
        } else {
            wait_for(&mut ep, &mut h, "the token", |h| h.ring == lap + 1)?;
            send(&mut ep, &mut h, next, TAG_RING)?;
        }
    }
    let ring = t.elapsed();
    let region = region_kib(&name(run, me));
    println!(
        "{} {} {} {} {} {region} {} {}",
        rss_start.0,
        rss_created.0,
        rss_connected.0,
        rss_created.1,
        rss_connected.1,
        alltoall.as_micros(),
        ring.as_micros()
    );
    // Stay until everyone is done with us: a last alltoall of "finished" would do; waiting for
    // the ring's last hop (process 0 saw it) and a short grace keeps it simple.
    let linger = Instant::now();
    while linger.elapsed() < Duration::from_millis(200) {
        if ep.progress(&mut h) == 0 {
            ep.wait(Some(Duration::from_millis(5)));
        }
    }
    Ok(())
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn run(n: usize, laps: usize) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let run = format!("{}_{n}", std::process::id());
    let mut children: Vec<_> = (0..n)
        .map(|i| {
            Command::new(&exe)
                .args([CHILD_ARG, &run, &i.to_string(), &n.to_string(), &laps.to_string()])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .map_err(|e| e.to_string())
        })
        .collect::<Result<_, _>>()?;
    {
        use std::io::{BufRead, Write};
        let mut readers = Vec::new();
        for c in &mut children {
            let mut r = std::io::BufReader::new(c.stdout.take().expect("piped"));
            let mut line = String::new();
            r.read_line(&mut line).map_err(|e| e.to_string())?;
            if line.trim() != "created" {
                return Err(format!("a process of the {n}-endpoint job did not start: {line:?}"));
            }
            readers.push(r);
        }
        for c in &mut children {
            writeln!(c.stdin.as_mut().expect("piped"), "go").map_err(|e| e.to_string())?;
        }
        for (c, r) in children.iter_mut().zip(readers) {
            c.stdout = Some(r.into_inner());
        }
    }
    let mut rows = Vec::new();
    for c in children {
        let out = c.wait_with_output().map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(format!("a process of the {n}-endpoint job failed ({})", out.status));
        }
        let line = String::from_utf8_lossy(&out.stdout);
        let v: Vec<f64> = line.split_whitespace().filter_map(|x| x.parse().ok()).collect();
        if v.len() != 8 {
            return Err(format!("unexpected output {line:?}"));
        }
        rows.push(v);
    }
    let col = |f: &dyn Fn(&Vec<f64>) -> f64| rows.iter().map(f).collect::<Vec<f64>>();
    let peers = (n - 1) as f64;
    let mut region = col(&|r| r[5]);
    let mut private = col(&|r| r[1] - r[0]);
    let mut private_peer = col(&|r| (r[2] - r[1]) / peers);
    let mut mapped_peer = col(&|r| (r[4] - r[3]) / peers);
    let mut alltoall = col(&|r| r[6]);
    let slowest = alltoall.iter().cloned().fold(0.0, f64::max);
    let ring_hop = rows[0][7] / (laps * n) as f64;
    let a = median(&mut alltoall);
    println!(
        "{n:>5} {:>10.0} {:>10.0} {:>12.1} {:>12.1} {:>12.0} {:>10.0} {:>11.1} {:>9.2}",
        median(&mut region),
        median(&mut private),
        median(&mut private_peer),
        median(&mut mapped_peer),
        a,
        slowest,
        a / peers,
        ring_hop,
    );
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(CHILD_ARG) {
        let parse = |i: usize| args.get(i).and_then(|s| s.parse::<usize>().ok()).unwrap_or(0);
        if let Err(e) = child(&args[2], parse(3), parse(4), parse(5)) {
            eprintln!("rshm-scale process {}: {e}", args[3]);
            std::process::exit(1);
        }
        return;
    }
    let mut procs = vec![2usize, 8, 32, 128];
    let mut laps = 100usize;
    let mut it = args.iter().skip(1);
    while let Some(a) = it.next() {
        match (a.as_str(), it.next()) {
            ("--procs", Some(v)) => procs = v.split(',').filter_map(|x| x.parse().ok()).collect(),
            ("--laps", Some(v)) => laps = v.parse().unwrap_or(100),
            _ => {
                eprintln!("usage: rshm-scale [--procs 2,8,32,128] [--laps 100]");
                std::process::exit(2);
            }
        }
    }
    println!("rshm-scale: N processes, one smr-core endpoint each (default parameters); medians over the processes");
    println!("  region: KiB its /dev/shm file holds; private: KiB of anonymous memory the endpoint added;");
    println!("  per peer: private KiB, and shared region pages mapped (not allocated), per connected peer");
    println!(
        "{:>5} {:>10} {:>10} {:>12} {:>12} {:>12} {:>10} {:>11} {:>9}",
        "N", "region", "private", "priv/peer", "mapped/peer", "alltoall us", "slowest", "us/peer", "ring hop"
    );
    for n in procs {
        if n < 2 {
            continue;
        }
        if let Err(e) = run(n, laps) {
            eprintln!("{n} endpoints: {e}");
            std::process::exit(1);
        }
    }
}
