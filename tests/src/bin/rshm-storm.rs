//! `rshm-storm`: one process of the kill storm (`tests/tests/kill_storm.rs`).
//!
//! ```text
//! rshm-storm --name N --id I --peers ID:NAME,ID:NAME,.. --sizes S,S,.. [--sar] [--window W]
//!            [--die-mid-copy P] [--seed X] [--max-secs T] [--incarnation K]
//! ```
//!
//! It creates endpoint N, prints `READY`, and after a `GO` line on stdin keeps up to W
//! delivery-complete sends in flight to every peer (sizes drawn from S, message `seq` to a peer
//! carrying the pattern of (I + 100 K, seq, size)), while it receives and checks everything sent to it.
//! One peer may die: the first error about a peer prints `DEAD name=.. us=<wall clock µs>`; sends
//! to it stop until a `RESTARTED` line, after which they are retried until one completes
//! (`REACHED name=..`). `TALKING` follows once, after a death, at least 3 messages came from every
//! other peer, and (if restarted) the new process was reached. `STOP` ends sending; `DRAINED`
//! follows when nothing is in flight. `REPORT` prints `RESULT` with per-peer figures and exits 0
//! (closing the endpoint); it carries the private memory (RssAnon: heap and stacks, not the
//! shared regions) after 1 s of traffic (`rss_warm`) and now (`rss_end`). Errors other than `PeerDead`, corrupt or duplicate messages are
//! counted in `RESULT` (`bad`, `errs`) and printed as `BAD` lines.
//!
//! `--die-mid-copy P` stops the P-th ring push half-way through its copy (see `smr_core::ring::hooks`).
//! The process exits (status 4) when stdin closes, and (status 3) after `--max-secs` (default 120).

use rshm_tests::{header, pattern, split_tag, verify, Node, Rng};
use smr_core::endpoint::{Params, PeerId, SendStatus};
use smr_core::Error;
use std::collections::HashMap;
use std::io::Write;
use std::sync::mpsc::{self, TryRecvError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn wall_us() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_micros() as u64).unwrap_or(0)
}

fn arg<'a>(args: &'a [String], key: &str) -> Option<&'a str> {
    args.iter().position(|a| a == key).and_then(|i| args.get(i + 1)).map(String::as_str)
}

fn num(args: &[String], key: &str, default: u64) -> u64 {
    arg(args, key).map(|v| v.parse().unwrap_or_else(|_| panic!("bad {key} {v}"))).unwrap_or(default)
}

/// One peer as this process sends to it.
struct Out {
    id: u32,
    name: String,
    peer: PeerId,
    next_seq: u32,
    staged: Option<(u32, usize)>,
    inflight: usize,
    /// An error said it is dead (cleared by `RESTARTED`).
    dead: bool,
    restarted: bool,
    reached: bool,
    ok: u64,
    ok_since_restart: u64,
}

/// What arrived from one sender id.
#[derive(Default)]
struct In {
    count: u64,
    bytes: u64,
    first: Option<u32>,
    /// The last sequence number offered (matched): messages are matched in order (msg_order is
    /// strict), while completions may come out of order (comp_order FI_ORDER_NONE: a large SAR
    /// message completes after smaller ones sent behind it).
    last: Option<u32>,
    /// Offered, not yet completed.
    pending: std::collections::HashSet<u32>,
    gaps: u64,
    order: u64,
    failed: u64,
    after_dead: u64,
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(p) = arg(&args, "--die-mid-copy") {
        std::env::set_var(smr_core::ring::hooks::DIE_ENV, p);
    }
    let give_up = Instant::now() + Duration::from_secs(num(&args, "--max-secs", 120));
    let name = arg(&args, "--name").expect("--name").to_string();
    // A restarted process signs its messages with its id + 100, so that receivers tell the two
    // incarnations' sequence numbers apart.
    let id = num(&args, "--id", 0) as u32 + 100 * num(&args, "--incarnation", 0) as u32;
    let sizes: Vec<usize> =
        arg(&args, "--sizes").expect("--sizes").split(',').map(|s| s.parse().expect("size")).collect();
    let window = num(&args, "--window", 4) as usize;
    let sar = args.iter().any(|a| a == "--sar");
    let mut rng = Rng(num(&args, "--seed", 0x5eed) | 1);

    let (tx, commands) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::stdin().lines() {
            let Ok(line) = line else { break };
            if tx.send(line.trim().to_string()).is_err() {
                break;
            }
        }
    });

    let params = Params { cma: !sar, ..Params::default() };
    let mut node = match Node::create(&name, params) {
        Ok(n) => n,
        Err(e) => {
            say(&format!("ERROR create {name}: {e:?}"));
            std::process::exit(2)
        }
    };
    say(&format!("READY name={name} cma={}", u8::from(node.ep.cma_enabled())));

    let mut outs: Vec<Out> = Vec::new();
    for spec in arg(&args, "--peers").unwrap_or("").split(',').filter(|s| !s.is_empty()) {
        let (pid, pname) = spec.split_once(':').expect("--peers wants ID:NAME");
        let peer = node.ep.add_peer(pname).expect("add_peer");
        outs.push(Out {
            id: pid.parse().expect("peer id"),
            name: pname.to_string(),
            peer,
            next_seq: 0,
            staged: None,
            inflight: 0,
            dead: false,
            restarted: false,
            reached: false,
            ok: 0,
            ok_since_restart: 0,
        });
    }
    let mut ins: HashMap<u32, In> = HashMap::new();
    let mut cookies: HashMap<u64, (usize, bool)> = HashMap::new();
    let (mut bad, mut errs) = (0u64, 0u64);
    let mut dead_seen: Option<usize> = None;
    let (mut go, mut stopping, mut drained, mut talking) = (false, false, false, false);
    let mut go_at: Option<Instant> = None;
    let mut rss_warm: Option<u64> = None;
    let complain = |bad: u64, what: &str| {
        if bad < 20 {
            say(&format!("BAD {what}"));
        }
    };

    loop {
        if Instant::now() > give_up {
            eprintln!("rshm-storm {name}: time limit reached");
            std::process::exit(3);
        }
        loop {
            match commands.try_recv() {
                Ok(cmd) => match cmd.as_str() {
                    "GO" => {
                        go = true;
                        go_at = Some(Instant::now());
                    }
                    "RESTARTED" => {
                        for o in outs.iter_mut().filter(|o| o.dead) {
                            o.restarted = true;
                        }
                    }
                    "STOP" => stopping = true,
                    "REPORT" => {
                        report(&name, &outs, &ins, bad, errs, &node, rss_warm);
                        drop(node);
                        std::process::exit(0);
                    }
                    _ => {}
                },
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => std::process::exit(4),
            }
        }
        if rss_warm.is_none() && go_at.is_some_and(|t| t.elapsed() >= Duration::from_secs(1)) {
            rss_warm = Some(rss_kib());
        }
        let mut busy = false;
        if go && !stopping {
            for (i, o) in outs.iter_mut().enumerate() {
                if (o.dead && !o.restarted) || o.inflight >= window {
                    continue;
                }
                let (seq, len) = *o.staged.get_or_insert_with(|| {
                    let s = (o.next_seq, sizes[rng.below(sizes.len() as u64) as usize]);
                    o.next_seq += 1;
                    s
                });
                let data = pattern(id, seq, len);
                match node.try_send(o.peer, header(id, seq, &data), data, true) {
                    Ok((SendStatus::Pending, cookie)) => {
                        o.staged = None;
                        o.inflight += 1;
                        cookies.insert(cookie, (i, o.restarted));
                        busy = true;
                    }
                    Ok((SendStatus::Done, _)) => {
                        o.staged = None;
                        o.ok += 1;
                        o.ok_since_restart += u64::from(o.restarted);
                    }
                    Err((Error::Again, _)) => {}
                    Err((Error::PeerDead, _)) => {
                        if !o.dead && !o.restarted {
                            o.dead = true;
                            dead_seen.get_or_insert(i);
                            say(&format!("DEAD name={} us={} how=send", o.name, wall_us()));
                        }
                    }
                    Err((e, _)) => {
                        errs += 1;
                        complain(bad + errs, &format!("send to {}: {e:?}", o.name));
                        o.staged = None;
                    }
                }
            }
        }
        let events = node.pump();
        for (cookie, result) in node.h.sends_done.iter() {
            let Some((i, after_restart)) = cookies.remove(cookie) else { continue };
            let o = &mut outs[i];
            o.inflight -= 1;
            match result {
                Ok(()) => {
                    o.ok += 1;
                    if after_restart {
                        o.ok_since_restart += 1;
                        if !o.reached {
                            o.reached = true;
                            say(&format!("REACHED name={}", o.name));
                        }
                    }
                }
                Err(Error::PeerDead) => {
                    if !o.dead && !o.restarted {
                        o.dead = true;
                        dead_seen.get_or_insert(i);
                        say(&format!("DEAD name={} us={} how=completion", o.name, wall_us()));
                    }
                }
                Err(e) => {
                    errs += 1;
                    complain(bad + errs, &format!("completion of a send to {}: {e:?}", o.name));
                }
            }
        }
        for m in &node.h.offered {
            let (sender, seq) = split_tag(m.hdr.tag);
            let s = ins.entry(sender).or_default();
            s.first.get_or_insert(seq);
            if let Some(last) = s.last {
                if seq <= last {
                    s.order += 1;
                    complain(bad + errs + s.order, &format!("from {sender}: seq {seq} matched after {last}"));
                } else if seq != last + 1 {
                    s.gaps += 1;
                }
            }
            s.last = Some(seq);
            s.pending.insert(seq);
        }
        node.forget_done();
        for r in std::mem::take(&mut node.h.received) {
            let (sender, seq) = split_tag(r.hdr.tag);
            let s = ins.entry(sender).or_default();
            if !s.pending.remove(&seq) {
                s.order += 1;
                complain(bad + errs + s.order, &format!("from {sender}: seq {seq} completed twice or never offered"));
            }
            match &r.result {
                Err(Error::PeerDead) => {
                    s.failed += 1;
                    continue;
                }
                Err(e) => {
                    bad += 1;
                    complain(bad + errs, &format!("receive from {sender} seq {seq}: {e:?}"));
                    continue;
                }
                Ok(_) => {}
            }
            if let Err(e) = verify(&r.hdr, &r.bytes) {
                bad += 1;
                complain(bad + errs, &e);
                continue;
            }
            s.count += 1;
            s.bytes += r.bytes.len() as u64;
            s.after_dead += u64::from(dead_seen.is_some());
        }
        if let Some(d) = dead_seen {
            let others_heard = outs
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != d)
                .all(|(_, o)| ins.get(&o.id).is_some_and(|s| s.after_dead >= 3));
            if !talking && others_heard && outs[d].reached {
                talking = true;
                say("TALKING");
            }
        }
        if stopping && !drained && outs.iter().all(|o| o.inflight == 0) {
            drained = true;
            say("DRAINED");
        }
        if events == 0 && !busy {
            node.ep.wait(Some(Duration::from_millis(1)));
        }
    }
}

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn report(name: &str, outs: &[Out], ins: &HashMap<u32, In>, bad: u64, errs: u64, node: &Node, rss_warm: Option<u64>) {
    let mut line =
        format!("RESULT name={name} bad={bad} errs={errs} rss_warm={} rss_end={}", rss_warm.unwrap_or(0), rss_kib());
    for o in outs {
        line += &format!(" ok.{}={} okr.{}={}", o.id, o.ok, o.id, o.ok_since_restart);
    }
    for (id, s) in ins {
        line += &format!(
            " recv.{id}={} bytes.{id}={} first.{id}={} gaps.{id}={} order.{id}={} failed.{id}={}",
            s.count,
            s.bytes,
            s.first.unwrap_or(0),
            s.gaps,
            s.order,
            s.failed
        );
    }
    let st = node.ep.stats();
    let deads = outs.iter().filter(|o| o.dead).count();
    line += &format!(
        " deads={deads} skipped={} corrupt={} late={}",
        st.skipped_slots, st.corrupt_commands, st.late_answers
    );
    say(&line);
}
