//! `rshm-peer`: one process of a multi-process test, playing the role its arguments select.
//!
//! ```text
//! rshm-peer node  --name N [--id I] [--to A,B] [--sizes 0,1,..] [--count C] [--also TO:SIZE]..
//!                 [--expect K] [--sar] [--dc] [--hold] [--echo] [--check-order]
//!                 [--at-least] [--sleep-ms S] [--wait-go] [--stall-on-first] [--mark-after M]
//!                 [--exit-when-sent close|abandon]
//!                 [--cmd-len L] [--inject-count L] [--sar-count L] [--sar-size B]
//!                 [--die-mid-copy P]
//! rshm-peer hang  --name N [--sar]
//! rshm-peer fuzz  --target N --count K [--seed S] [--bias]
//! rshm-peer scribble --target N --count K [--seed S] [--gap-us G] [--aim control|mr]
//!                 [--forge-key K --forge-base B --forge-len L]
//! rshm-peer rma   --name N --target T [--key K] [--len L] [--after A] [--gap-us G]
//! ```
//!
//! `node` creates endpoint N and prints `READY`, sleeps S ms without progressing (and with
//! `--wait-go` until a `GO` line arrives on stdin), then sends
//! `count` rounds of every size to every target (message `seq` to a target carries the pattern
//! of (I, seq, size)), plus the `--also` extras, and receives K messages, verifying each one's
//! pattern and checksum. It prints `SENT` when every send is issued, `MARK` after M sends,
//! `AGAIN` the first time a send answers `Again`, and
//! `RESULT key=value..` when done (`cma_reads` counts the messages it copied with CMA); then it
//! keeps progressing until its stdin closes and exits 0 if everything checked out (exactly K
//! messages received, or with `--at-least` K or more), 1 otherwise. With `--exit-when-sent` it
//! exits right after `RESULT` instead, without progressing again: `close` closes the endpoint
//! first (as a process that calls `fi_close` and exits does), `abandon` leaves it as it is (as a
//! process that exits without closing does, region file and all). `--echo` sends every received
//! message back to its sender (and runs until stdin closes). `--stall-on-first` prints `STARTED`
//! when the first message is offered and then stops dead inside the handler, to be killed
//! mid-transfer. `--die-mid-copy P` stops this process's P-th ring push (counting every push
//! that claimed a slot, CONNECTs and responses included) half-way through copying its entry,
//! prints `PARKED_MID_COPY` and sleeps there until killed (`smr_core::ring::hooks`).
//!
//! `hang` creates N, prints `READY` and never progresses. `fuzz` pushes K random commands into
//! N's command ring and prints `FUZZED`. `scribble` writes K bursts of random bytes at random
//! offsets of N's region file (a quarter into its first page) and prints `SCRIBBLED`; with
//! `--aim control` every burst (1-8 bytes) lands on a shared control word instead: the claim
//! counter of either ring, the head of either free stack, or a link of either stack; with
//! `--aim peers` on the peer-table entries of the senders connected when it starts; with
//! `--aim mr` on N's table of published registrations, and with `--forge-*` every fourth burst
//! is a forgery instead: the entry of key K rewritten whole but for its seal (an even count,
//! K, base B, length L, live and open to reads and writes), as a faulty peer that wrote
//! plausible values would leave it.
//!
//! `rma` creates N and does, on its own with CMA as a peer of T may, a write of a pattern into
//! the first L bytes of the registration T published under K, then a read of them back, again
//! and again (`Endpoint::peer_mr`, `write_published`, `read_published`). A lookup or copy
//! refused (an entry scribbled over, or being rewritten) is counted, and tried again after G µs.
//! It prints `FIRST` once a write and its read went through; after a `GO` line on stdin it goes
//! on until A more have, then prints `RESULT writes=.. refused=.. wrong=.. last=I`: `last` names
//! the pattern of its last write (every write is followed by a read that went through), and
//! `wrong` counts reads that came back other than what was just written. It exits 0 if none did.
//!
//! Every role exits (status 4) when its stdin closes early, and gives up (status 3) after
//! `--max-secs` (default 60), so a test that dies cannot leave a process behind.

use rshm_tests::{header, split_tag, verify, Node};
use smr_core::cmd::{op, proto, CmdEntry, MsgHeader};
use smr_core::endpoint::{Params, PeerId};
use smr_core::layout::Counts;
use smr_core::ring::PushError;
use smr_core::Error;
use std::collections::{HashMap, HashSet, VecDeque};
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

static STDIN_CLOSED: AtomicBool = AtomicBool::new(false);
static GO: AtomicBool = AtomicBool::new(false);
static MY_REGION: OnceLock<String> = OnceLock::new();
static GIVE_UP_AT: OnceLock<Instant> = OnceLock::new();

/// Leave now: remove our region (an exit skips destructors) and exit with `code`.
fn bail(code: i32, why: &str) -> ! {
    eprintln!("rshm-peer: {why}");
    if let Some(name) = MY_REGION.get() {
        let _ = smr_core::shm::unlink(name);
    }
    std::process::exit(code)
}

/// Exit if the test went away (stdin closed) or the time limit passed.
fn watchdog() {
    stdin_watchdog(true)
}

fn stdin_watchdog(stdin_matters: bool) {
    if stdin_matters && STDIN_CLOSED.load(Ordering::Relaxed) {
        bail(4, "stdin closed before the work was done");
    }
    if GIVE_UP_AT.get().is_some_and(|t| Instant::now() > *t) {
        bail(3, "time limit reached");
    }
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

struct Opts {
    values: HashMap<String, Vec<String>>,
    flags: HashSet<String>,
}

const FLAGS: &[&str] = &["sar", "dc", "hold", "echo", "check-order", "stall-on-first", "bias", "wait-go", "at-least"];

impl Opts {
    fn parse(args: &[String]) -> Opts {
        let mut o = Opts { values: HashMap::new(), flags: HashSet::new() };
        let mut it = args.iter();
        while let Some(a) = it.next() {
            let Some(key) = a.strip_prefix("--") else { bail(2, &format!("unexpected argument {a}")) };
            if FLAGS.contains(&key) {
                o.flags.insert(key.to_string());
            } else {
                let Some(v) = it.next() else { bail(2, &format!("--{key} needs a value")) };
                o.values.entry(key.to_string()).or_default().push(v.clone());
            }
        }
        o
    }

    fn flag(&self, key: &str) -> bool {
        self.flags.contains(key)
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.values.get(key).and_then(|v| v.last()).map(String::as_str)
    }

    fn req(&self, key: &str) -> String {
        self.get(key).unwrap_or_else(|| bail(2, &format!("--{key} is required"))).to_string()
    }

    fn num<T: std::str::FromStr>(&self, key: &str, default: T) -> T {
        match self.get(key) {
            None => default,
            Some(v) => v.parse().unwrap_or_else(|_| bail(2, &format!("bad --{key} {v}"))),
        }
    }

    fn list(&self, key: &str) -> Vec<String> {
        self.get(key).map(|v| v.split(',').filter(|s| !s.is_empty()).map(String::from).collect()).unwrap_or_default()
    }

    fn all(&self, key: &str) -> Vec<String> {
        self.values.get(key).cloned().unwrap_or_default()
    }
}

fn params(o: &Opts) -> Params {
    let d = Params::default();
    Params {
        cma: !o.flag("sar"),
        counts: Counts {
            cmd_len: o.num("cmd-len", d.counts.cmd_len),
            inject_count: o.num("inject-count", d.counts.inject_count),
            sar_count: o.num("sar-count", d.counts.sar_count),
            sar_size: o.num("sar-size", d.counts.sar_size),
            ..d.counts
        },
        ..d
    }
}

fn create(o: &Opts) -> Node {
    let name = o.req("name");
    match Node::create(&name, params(o)) {
        Ok(node) => {
            let _ = MY_REGION.set(name.clone());
            say(&format!("READY name={name} cma={}", u8::from(node.ep.cma_enabled())));
            node
        }
        Err(e) => {
            say(&format!("ERROR create {name}: {e:?}"));
            std::process::exit(2)
        }
    }
}

/// The messages a node sends: `count` rounds of every size to every target, then extras.
struct Plan {
    peers: Vec<PeerId>,
    sizes: Vec<usize>,
    rounds: u64,
    next: u64,
    extras: VecDeque<(usize, usize)>,
    seq: Vec<u32>,
}

impl Plan {
    fn total(&self) -> u64 {
        self.rounds * (self.sizes.len() * self.peers.len()) as u64 + self.extras.len() as u64
    }

    /// (target index, seq, size) of the next message.
    fn next(&mut self) -> Option<(usize, u32, usize)> {
        let per_round = (self.sizes.len() * self.peers.len()) as u64;
        let (target, len) = if per_round > 0 && self.next < self.rounds * per_round {
            let i = self.next % per_round;
            self.next += 1;
            ((i % self.peers.len() as u64) as usize, self.sizes[(i / self.peers.len() as u64) as usize])
        } else {
            self.extras.pop_front()?
        };
        let seq = self.seq[target];
        self.seq[target] += 1;
        Some((target, seq, len))
    }
}

#[derive(Default)]
struct Tally {
    received: u64,
    bytes: u64,
    bad: u64,
    dups: u64,
    order_errors: u64,
    seen: HashSet<(u32, u32)>,
    next_seq: HashMap<u32, u32>,
    per_sender: HashMap<u32, u64>,
}

impl Tally {
    fn take(&mut self, hdr: &MsgHeader, result: &smr_core::Result<usize>, bytes: &[u8]) {
        self.received += 1;
        self.bytes += bytes.len() as u64;
        let (sender, seq) = split_tag(hdr.tag);
        *self.per_sender.entry(sender).or_default() += 1;
        if !self.seen.insert((sender, seq)) {
            self.dups += 1;
            self.complain(&format!("duplicate sender {sender} seq {seq}"));
        }
        let next = self.next_seq.entry(sender).or_default();
        if seq != *next {
            self.order_errors += 1;
        }
        *next = seq.wrapping_add(1);
        let outcome = match result {
            Ok(n) if *n as u64 == hdr.len => verify(hdr, bytes),
            other => Err(format!("sender {sender} seq {seq}: receive result {other:?}")),
        };
        if let Err(e) = outcome {
            self.bad += 1;
            self.complain(&e);
        }
    }

    fn complain(&self, what: &str) {
        if self.bad + self.dups < 20 {
            say(&format!("BAD {what}"));
        }
    }

    fn senders(&self) -> String {
        let mut v: Vec<_> = self.per_sender.iter().collect();
        v.sort();
        v.iter().map(|(s, n)| format!("{s}:{n}")).collect::<Vec<_>>().join(",")
    }
}

fn run_node(o: &Opts) -> i32 {
    let mut node = create(o);
    let id: u32 = o.num("id", 0);
    let dc = o.flag("dc");
    let echo = o.flag("echo");
    let check_order = o.flag("check-order");
    let expect: u64 = o.num("expect", 0);
    let mark_after: u64 = o.num("mark-after", 0);
    let at_least = o.flag("at-least");
    let exit_when_sent = o.get("exit-when-sent").map(String::from);
    if exit_when_sent.as_deref().is_some_and(|how| how != "close" && how != "abandon") {
        bail(2, "--exit-when-sent wants close or abandon");
    }
    node.h.hold = o.flag("hold");
    if o.flag("stall-on-first") {
        node.h.on_offer = Some(Box::new(|msg| {
            say(&format!("STARTED len={}", msg.hdr.len));
            loop {
                watchdog();
                std::thread::sleep(Duration::from_millis(5));
            }
        }));
    }
    let mut plan = Plan {
        peers: Vec::new(),
        sizes: o.list("sizes").iter().map(|s| s.parse().unwrap_or_else(|_| bail(2, "bad size"))).collect(),
        rounds: o.num("count", 1),
        next: 0,
        extras: VecDeque::new(),
        seq: Vec::new(),
    };
    let mut targets: Vec<String> = Vec::new();
    let mut target_index = |node: &mut Node, plan: &mut Plan, name: &str| -> usize {
        if let Some(i) = targets.iter().position(|t| t == name) {
            return i;
        }
        let peer = node.ep.add_peer(name).unwrap_or_else(|e| bail(2, &format!("add_peer {name}: {e}")));
        targets.push(name.to_string());
        plan.peers.push(peer);
        plan.seq.push(0);
        targets.len() - 1
    };
    for t in o.list("to") {
        target_index(&mut node, &mut plan, &t);
    }
    for extra in o.all("also") {
        let (t, size) = extra.split_once(':').unwrap_or_else(|| bail(2, "--also wants TO:SIZE"));
        let size = size.parse().unwrap_or_else(|_| bail(2, "bad --also size"));
        let i = target_index(&mut node, &mut plan, t);
        plan.extras.push_back((i, size));
    }
    let total = plan.total();

    std::thread::sleep(Duration::from_millis(o.num("sleep-ms", 0)));
    if o.flag("wait-go") {
        while !GO.load(Ordering::Relaxed) {
            watchdog();
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    let mut tally = Tally::default();
    let mut replies: VecDeque<(PeerId, MsgHeader, Vec<u8>)> = VecDeque::new();
    let mut staged: Option<(PeerId, MsgHeader, Vec<u8>, bool)> = None;
    let (mut sent, mut echoed, mut send_errors) = (0u64, 0u64, 0u64);
    // Sends refused outright (not `Again`): they count as issued.
    let mut refused = 0u64;
    let mut done_seen = 0;
    let mut announced_sent = false;
    let mut again_announced = false;
    loop {
        // An echo runs until its stdin closes.
        stdin_watchdog(!echo);
        let mut busy = false;
        if staged.is_none() {
            if let Some((peer, hdr, data)) = replies.pop_front() {
                staged = Some((peer, hdr, data, true));
            } else if let Some((target, seq, len)) = plan.next() {
                let data = rshm_tests::pattern(id, seq, len);
                staged = Some((plan.peers[target], header(id, seq, &data), data, false));
            }
        }
        if let Some((peer, hdr, data, is_reply)) = staged.take() {
            match node.try_send(peer, hdr, data, dc) {
                Ok(_) => {
                    busy = true;
                    if is_reply {
                        echoed += 1;
                    } else {
                        sent += 1;
                        if sent == mark_after {
                            say(&format!("MARK sent={sent}"));
                        }
                    }
                }
                Err((Error::Again, data)) => {
                    if !again_announced {
                        again_announced = true;
                        say(&format!("AGAIN sent={sent}"));
                    }
                    staged = Some((peer, hdr, data, is_reply));
                }
                Err((e, _)) => {
                    send_errors += 1;
                    refused += u64::from(!is_reply);
                    say(&format!("SENDERR tag={:#x} len={} err={e:?}", hdr.tag, hdr.len));
                }
            }
        }
        if !announced_sent && staged.is_none() && sent + refused >= total && replies.is_empty() {
            announced_sent = true;
            say(&format!("SENT n={sent}"));
        }
        let events = node.pump();
        if node.h.hold {
            node.deliver_held();
        }
        for (cookie, result) in &node.h.sends_done[done_seen..] {
            if let Err(e) = result {
                send_errors += 1;
                say(&format!("SENDERR cookie={cookie} err={e:?}"));
            }
        }
        done_seen = node.h.sends_done.len();
        for r in std::mem::take(&mut node.h.received) {
            tally.take(&r.hdr, &r.result, &r.bytes);
            if echo {
                let name = node.ep.src_name(r.src).unwrap_or_else(|| bail(1, "echo: unknown source")).to_string();
                let peer = node.ep.add_peer(&name).unwrap_or_else(|e| bail(1, &format!("echo add_peer: {e}")));
                replies.push_back((peer, MsgHeader { app: 1, ..r.hdr }, r.bytes));
            }
        }
        let finished = announced_sent && node.sends_in_flight() == 0 && tally.received >= expect;
        if finished && !echo {
            break;
        }
        if echo && STDIN_CLOSED.load(Ordering::Relaxed) && staged.is_none() && replies.is_empty() {
            break;
        }
        if events == 0 && !busy {
            if staged.is_some() {
                std::thread::sleep(Duration::from_micros(50));
            } else {
                node.ep.wait(Some(Duration::from_millis(1)));
            }
        }
    }
    let stats = node.ep.stats().clone();
    say(&format!(
        "RESULT name={} sent={sent} echoed={echoed} received={} bytes={} bad={} dups={} order_errors={} \
         again={} send_errors={send_errors} corrupt={} skipped={} fallbacks={} cma={} cma_reads={} senders={}",
        node.ep.name(),
        tally.received,
        tally.bytes,
        tally.bad,
        tally.dups,
        tally.order_errors,
        node.again,
        stats.corrupt_commands,
        stats.skipped_slots,
        stats.cma_fallbacks,
        u8::from(node.ep.cma_enabled()),
        stats.cma_reads,
        tally.senders(),
    ));
    let ok = tally.bad == 0
        && tally.dups == 0
        && (!check_order || tally.order_errors == 0)
        && send_errors == 0
        && (echo || tally.received == expect || (at_least && tally.received > expect));
    match exit_when_sent.as_deref() {
        Some("close") => {
            drop(node);
            std::process::exit(i32::from(!ok))
        }
        // No destructor runs: the region stays, marked ready, owned by a dead process.
        Some(_) => std::process::exit(i32::from(!ok)),
        None => {}
    }
    // Stay reachable (acks, echoes, CMA reads of our buffers) until the test lets go.
    while !STDIN_CLOSED.load(Ordering::Relaxed) {
        if GIVE_UP_AT.get().is_some_and(|t| Instant::now() > *t) {
            bail(3, "time limit reached while lingering");
        }
        node.pump_or_wait(Duration::from_millis(5));
        if node.h.hold {
            node.deliver_held();
        }
        node.h.received.clear();
    }
    drop(node);
    i32::from(!ok)
}

fn run_hang(o: &Opts) -> i32 {
    let node = create(o);
    while !STDIN_CLOSED.load(Ordering::Relaxed) {
        stdin_watchdog(false);
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(node);
    0
}

fn run_rma(o: &Opts) -> i32 {
    use smr_core::iov::LocalIov;
    let mut node = create(o);
    let target = o.req("target");
    let (key, len, after): (u64, usize, u64) = (o.num("key", 1), o.num("len", 4096), o.num("after", 100));
    let gap = Duration::from_micros(o.num("gap-us", 50));
    let peer = node.ep.add_peer(&target).unwrap_or_else(|e| bail(2, &format!("add_peer {target}: {e}")));
    let (mut writes, mut refused, mut wrong, mut since_go) = (0u64, 0u64, 0u64, 0u64);
    let mut round = 0u32;
    loop {
        watchdog();
        node.pump();
        round = round.wrapping_add(1);
        let bytes = rshm_tests::rma_pattern(round, len);
        let wrote = node
            .ep
            .peer_mr(peer, key)
            .is_some_and(|p| node.ep.write_published(peer, &p, 0, &LocalIov::owned(bytes.clone())).is_ok());
        // Read back until a read goes through: a refused write may have left the bytes undefined
        // (a copy cut short), and `last` must name what the registration holds.
        let mut back = None;
        while wrote && back.is_none() {
            watchdog();
            let mut into = LocalIov::owned(vec![0; len]);
            match node.ep.peer_mr(peer, key).map(|p| node.ep.read_published(peer, &p, 0, &mut into)) {
                Some(Ok(n)) if n == len => back = into.into_owned(),
                _ => {
                    refused += 1;
                    std::thread::sleep(gap);
                }
            }
        }
        let Some(back) = back else {
            refused += 1;
            std::thread::sleep(gap);
            continue;
        };
        writes += 1;
        wrong += u64::from(back != bytes);
        if writes == 1 {
            say("FIRST");
        }
        if GO.load(Ordering::Relaxed) {
            since_go += 1;
            if since_go >= after {
                break;
            }
        }
        std::thread::sleep(gap);
    }
    say(&format!("RESULT writes={writes} refused={refused} wrong={wrong} last={round}"));
    while !STDIN_CLOSED.load(Ordering::Relaxed) {
        stdin_watchdog(false);
        node.pump_or_wait(Duration::from_millis(1));
    }
    i32::from(wrong != 0)
}

fn random_entry(rng: &mut rshm_tests::Rng, bias: bool) -> CmdEntry {
    let mut e = CmdEntry::default();
    for chunk in e.payload.chunks_mut(8) {
        let n = chunk.len();
        chunk.copy_from_slice(&rng.next_u64().to_le_bytes()[..n]);
    }
    let r = rng.next_u64();
    e.op = (r % 6) as u8;
    e.proto = (r >> 8) as u8 % 6;
    e.flags = (r >> 16) as u8;
    e.app = (r >> 24) as u8;
    e.src = (r >> 32) as u32 % 2048;
    let r2 = rng.next_u64();
    e.len = r2 >> (r2 % 64);
    e.tag = rng.next_u64();
    e.data = rng.next_u64();
    e.msg_id = rng.next_u64() % 4;
    if bias && r2 & 1 == 0 {
        // Plausible fields, so decoding gets past the range checks more often.
        e.op = if r2 & 4 == 0 { op::MSG } else { op::SAR_SEG };
        e.proto = [proto::INLINE, proto::INJECT, proto::IOV, proto::SAR][(r2 >> 3) as usize % 4];
        e.src %= 1024;
        e.len = (r2 >> 8) % 70_000;
        e.payload[0..4].copy_from_slice(&((r2 >> 40) as u32 % 40).to_le_bytes());
        e.payload[4..8].copy_from_slice(&((r2 >> 20) as u32 % 4096).to_le_bytes());
        e.payload[8..16].copy_from_slice(&0u64.to_le_bytes());
    }
    e
}

fn run_fuzz(o: &Opts) -> i32 {
    let target = o.req("target");
    let count: u64 = o.num("count", 1000);
    let mut rng = rshm_tests::Rng(o.num("seed", 0x1234_5678_9abc_def0u64) | 1);
    let bias = o.flag("bias");
    let region = loop {
        watchdog();
        match smr_core::region::Region::open(&target) {
            Ok(r) => break r,
            Err(Error::Again | Error::NoSuchPeer) => std::thread::sleep(Duration::from_millis(2)),
            Err(e) => bail(1, &format!("open {target}: {e}")),
        }
    };
    let mut full = 0u64;
    for _ in 0..count {
        let e = random_entry(&mut rng, bias);
        loop {
            match region.cmd_ring().push(&e) {
                Ok(()) => {
                    smr_core::wake::notify(region.wake_word());
                    break;
                }
                Err(PushError::Full | PushError::Busy) => {
                    full += 1;
                    watchdog();
                    std::thread::sleep(Duration::from_micros(100));
                }
            }
        }
    }
    say(&format!("FUZZED pushed={count} full={full}"));
    0
}

/// `scribble`: write random bytes at random offsets of N's region file (`write_at` on the file
/// in /dev/shm, which every mapping of it sees), `count` bursts of 1..=64 bytes, one every
/// `--gap-us` µs, a quarter of them into the first page (header, ring control words); or aimed
/// (`--aim`), and with forgeries of one published registration (`--forge-key`).
fn run_scribble(o: &Opts) -> i32 {
    use std::os::unix::fs::FileExt;
    let target = o.req("target");
    let count: u64 = o.num("count", 1000);
    let gap = Duration::from_micros(o.num("gap-us", 100));
    let mut rng = rshm_tests::Rng(o.num("seed", 0x5c71_bb1e_u64) | 1);
    let path = std::path::Path::new("/dev/shm").join(&target);
    let file = match std::fs::OpenOptions::new().read(true).write(true).open(&path) {
        Ok(f) => f,
        Err(e) => bail(1, &format!("open {}: {e}", path.display())),
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    if len < 4096 {
        bail(1, "region too small");
    }
    // `--aim control`: (offset, length) of every shared control word, from the header as the
    // owner wrote it (read before we scribble on it).
    let geometry = || match smr_core::region::Region::open(&target) {
        Ok(r) => *r.geometry(),
        Err(e) => bail(1, &format!("open region {target}: {e:?}")),
    };
    let mut mrs = None;
    let aims: Vec<(u64, u64)> = match o.get("aim") {
        None => Vec::new(),
        Some("mr") => {
            let at = geometry().mrs;
            mrs = Some(at);
            vec![(at, smr_core::layout::MR_SLOTS * std::mem::size_of::<smr_core::layout::MrSlot>() as u64)]
        }
        Some("peers") => {
            // The entries of the senders connected now (state word not `SLOT_FREE`).
            let g = geometry();
            let size = std::mem::size_of::<smr_core::layout::PeerSlot>() as u64;
            let mut state = [0u8; 8];
            (0..g.counts.max_peers)
                .map(|i| g.peers + i * size)
                .filter(|&at| file.read_exact_at(&mut state, at).is_ok() && u64::from_ne_bytes(state) != 0)
                .map(|at| (at, size))
                .collect()
        }
        Some("control") => {
            let g = geometry();
            vec![
                (g.cmd_ctl, 8),
                (g.resp_ctl, 8),
                (g.inject_head, 8),
                (g.sar_head, 8),
                (g.inject_links, 4 * g.counts.inject_count),
                (g.sar_links, 4 * g.counts.sar_count),
            ]
        }
        Some(other) => bail(1, &format!("unknown --aim {other}")),
    };
    let forge = o.get("forge-key").map(|k| {
        let k = k.parse::<u64>().unwrap_or_else(|_| bail(2, "bad --forge-key"));
        (k, o.num::<u64>("forge-base", 0), o.num::<u64>("forge-len", 0))
    });
    let (mut bytes, mut forged) = (0u64, 0u64);
    for i in 0..count {
        watchdog();
        if let (Some(at), Some(f), 3) = (mrs, forge, i % 4) {
            forged += u64::from(forge_entry(&file, at, f));
            std::thread::sleep(gap);
            continue;
        }
        let (n, off) = if aims.is_empty() {
            let n = 1 + (rng.next_u64() % 64) as usize;
            let span = if i % 4 == 0 { 4096 } else { len };
            (n, rng.next_u64() % (span - n as u64))
        } else {
            let (at, span) = aims[(rng.next_u64() % aims.len() as u64) as usize];
            let off = rng.next_u64() % span;
            (1 + (rng.next_u64() % 8).min(span - off - 1) as usize, at + off)
        };
        let junk: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
        if file.write_at(&junk, off).is_ok() {
            bytes += n as u64;
        }
        std::thread::sleep(gap);
    }
    say(&format!("SCRIBBLED writes={count} bytes={bytes} forged={forged} aims={}", aims.len()));
    0
}

/// Rewrite the published entry of `key` in the table at `table` whole but for its seal: an even
/// count, the key, `base`, `len`, live and open to peers' reads and writes. False when no entry
/// names the key now (a burst before scribbled over it, and the owner has not put it back yet).
fn forge_entry(file: &std::fs::File, table: u64, (key, base, len): (u64, u64, u64)) -> bool {
    use smr_core::published::{LIVE, REMOTE_READ, REMOTE_WRITE, USED};
    use std::os::unix::fs::FileExt;
    let size = std::mem::size_of::<smr_core::layout::MrSlot>() as u64;
    let word = |at: u64| {
        let mut w = [0u8; 8];
        file.read_exact_at(&mut w, at).map(|_| u64::from_ne_bytes(w)).unwrap_or(0)
    };
    let Some(slot) = (0..smr_core::layout::MR_SLOTS).map(|i| table + i * size).find(|&at| word(at + 8) == key) else {
        return false;
    };
    // seq, key, base, len, flags: the first five words of `MrSlot`.
    let words = [word(slot) & !1, key, base, len, USED | LIVE | REMOTE_READ | REMOTE_WRITE];
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
    file.write_at(&bytes, slot).is_ok()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((role, rest)) = args.split_first() else { bail(2, "usage: rshm-peer node|hang|fuzz --name N ...") };
    let o = Opts::parse(rest);
    if let Some(n) = o.get("die-mid-copy") {
        // Read once, at the first push, by the hook (single-threaded still: no race).
        std::env::set_var(smr_core::ring::hooks::DIE_ENV, n);
    }
    let _ = GIVE_UP_AT.set(Instant::now() + Duration::from_secs(o.num("max-secs", 60)));
    std::thread::spawn(|| {
        for line in std::io::stdin().lines() {
            match line {
                Ok(l) if l.trim() == "GO" => GO.store(true, Ordering::Relaxed),
                Ok(_) => {}
                Err(_) => break,
            }
        }
        STDIN_CLOSED.store(true, Ordering::Relaxed);
    });
    let code = match role.as_str() {
        "node" => run_node(&o),
        "hang" => run_hang(&o),
        "fuzz" => run_fuzz(&o),
        "scribble" => run_scribble(&o),
        "rma" => run_rma(&o),
        other => bail(2, &format!("unknown role {other}")),
    };
    std::process::exit(code)
}
