//! Kill storm: runs of a 4-process job (`rshm-storm`, every process sending delivery-complete
//! messages to every other and checking what it gets) in which one process is SIGKILLed at a
//! random point: during the handshake, in inline, inject, CMA or SAR traffic (either side of a
//! transfer, since everyone sends to everyone), or parked half-way through copying a command into
//! a peer's ring (`--die-mid-copy`, the slot then claimed and unpublished). Each run checks that:
//! - every survivor reports an error for the dead process (and for no other) within `NOTICE`;
//! - the survivors keep talking to each other (messages after the death, none lost: each
//!   receiver got exactly what the sender saw acknowledged, in order, intact, no duplicate);
//! - a process restarted under the dead one's name is reached by every survivor and gets, in
//!   order and intact, exactly what they saw acknowledged;
//! - no file of the job is left in /dev/shm once the processes exit (the dead one's was reclaimed
//!   by the restart).
//!
//! `kill_storm_short` (20 runs) runs with `cargo test`, and so does
//! `kill_storm_across_pid_namespaces_short` (20 runs, root only), in which each process and the
//! restart run at random in our pid namespace or in one of their own; the long version is
//! `RSHM_KILL_STORM_RUNS=200 cargo test --release -p rshm-tests --test kill_storm -- --ignored --nocapture`
//! (`RSHM_KILL_STORM_SEED` replays a seed). Both print figures: runs and kills per point, time to
//! error (min, median, max), messages and bytes checked.

use rshm_tests::{kv_u64, namespaces_or_skip, parse_kv, Rng, Scenario};
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const STORM: &str = env!("CARGO_BIN_EXE_rshm-storm");
/// How soon after the kill every survivor must report the death.
const NOTICE: Duration = Duration::from_secs(2);
/// Bound of every other wait (a hang fails the run instead of the whole test hanging).
const WAIT: Duration = Duration::from_secs(30);

fn wall_us() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_micros() as u64).unwrap_or(0)
}

/// Where the victim dies, and the traffic that makes that point likely.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Point {
    Handshake,
    Inline,
    Inject,
    Cma,
    Sar,
    Mixed,
    MidCommandCopy,
}

const POINTS: [Point; 7] =
    [Point::Handshake, Point::Inline, Point::Inject, Point::Cma, Point::Sar, Point::Mixed, Point::MidCommandCopy];

impl Point {
    fn sizes(self) -> &'static str {
        match self {
            Point::Handshake => "100,3000,100000",
            Point::Inline => "0,100",
            Point::Inject => "1000,4000",
            Point::Cma | Point::Sar => "70000,300000",
            Point::Mixed => "0,100,3000,70000,300000",
            Point::MidCommandCopy => "100,3000",
        }
    }
}

#[derive(Default)]
struct Figures {
    runs: usize,
    kills: BTreeMap<String, usize>,
    notice_us: Vec<u64>,
    messages: u64,
    bytes: u64,
    skipped_slots: u64,
    /// Answers read after their sends had failed (`dead_receivers.rs`): a live peer's entry stalled ahead
    /// of them for `stall_timeout`.
    late_answers: u64,
}

/// Where a run's processes live: all in ours, or each (and the restart) at random in ours or in
/// a pid namespace of its own (`unshare --pid`), as containers that share /dev/shm but not pids.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Placement {
    Ours,
    MixedNamespaces,
}

/// One run; returns what it measured. Panics (with every transcript) on a failed check.
fn run(rng: &mut Rng, n: usize, fig: &mut Figures, placement: Placement) {
    let point = POINTS[rng.below(POINTS.len() as u64) as usize];
    let victim = rng.below(4) as usize;
    // Which processes (the four, then the restart) run in a pid namespace of their own.
    let own: Vec<bool> = (0..5).map(|_| placement == Placement::MixedNamespaces && rng.below(2) == 1).collect();
    println!(
        "run {n}: {point:?}, victim p{victim}{}",
        if placement == Placement::Ours { String::new() } else { format!(", own pid namespace {own:?}") }
    );
    let mut sc = Scenario::new(STORM, "ks");
    let names: Vec<String> = (0..4).map(|i| sc.name(&format!("{i}"))).collect();
    let args_of = |i: usize, seed: u64| -> Vec<String> {
        let peers: Vec<String> = (0..4).filter(|&j| j != i).map(|j| format!("{}:{}", j + 1, names[j])).collect();
        let mut a = vec![
            "--name".to_string(),
            names[i].clone(),
            "--id".into(),
            (i + 1).to_string(),
            "--peers".into(),
            peers.join(","),
            "--sizes".into(),
            point.sizes().into(),
            "--seed".into(),
            seed.to_string(),
        ];
        if point == Point::Sar {
            a.push("--sar".into());
        }
        a
    };
    let mut procs: Vec<usize> = Vec::new();
    for (i, &own_namespace) in own[..4].iter().enumerate() {
        let mut a = args_of(i, rng.next_u64());
        if i == victim && point == Point::MidCommandCopy {
            a.extend(["--die-mid-copy".to_string(), (2 + rng.below(300)).to_string()]);
        }
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        procs.push(sc.spawn_placed(&format!("p{i}"), own_namespace, &a));
    }
    let dl = Instant::now() + WAIT;
    for &p in &procs {
        sc.child(p).expect_line("READY", dl);
    }
    for &p in &procs {
        sc.child(p).say("GO");
    }
    match point {
        Point::Handshake => std::thread::sleep(Duration::from_micros(rng.below(3000))),
        Point::MidCommandCopy => {
            sc.child(procs[victim]).expect_line("PARKED_MID_COPY", dl);
        }
        _ => std::thread::sleep(Duration::from_millis(30 + rng.below(300))),
    }
    let killed_us = wall_us();
    sc.child(procs[victim]).kill();
    let survivors: Vec<usize> = (0..4).filter(|&i| i != victim).collect();
    for &i in &survivors {
        let line = sc.child(procs[i]).expect_line("DEAD", Instant::now() + WAIT);
        let kv = parse_kv(&line);
        assert_eq!(kv["name"], names[victim], "run {n} ({point:?}): p{i} reported the wrong peer dead: {line}");
        let after = kv_u64(&kv, "us").saturating_sub(killed_us);
        assert!(
            Duration::from_micros(after) < NOTICE,
            "run {n} ({point:?}): p{i} learned of the death after {after} µs\n{}",
            sc.transcripts()
        );
        fig.notice_us.push(after);
    }

    // Restart the victim under its name; the survivors must reach it and each other.
    let mut a = args_of(victim, rng.next_u64());
    a.extend(["--incarnation".to_string(), "1".to_string()]);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let restarted = sc.spawn_placed(&format!("p{victim}'"), own[4], &a);
    procs[victim] = restarted;
    sc.child(restarted).expect_line("READY", dl);
    sc.child(restarted).say("GO");
    for &i in &survivors {
        sc.child(procs[i]).say("RESTARTED");
    }
    for &i in &survivors {
        sc.child(procs[i]).expect_line("TALKING", Instant::now() + WAIT);
    }
    for &p in &procs {
        sc.child(p).say("STOP");
    }
    for &p in &procs {
        sc.child(p).expect_line("DRAINED", Instant::now() + WAIT);
    }
    let mut results: HashMap<usize, HashMap<String, String>> = HashMap::new();
    for (i, &p) in procs.iter().enumerate() {
        sc.child(p).say("REPORT");
        let line = sc.child(p).expect_line("RESULT", Instant::now() + WAIT);
        results.insert(i, parse_kv(&line));
    }
    for &p in &procs {
        let status = sc.child(p).wait_exit(Instant::now() + WAIT);
        assert!(status.success(), "run {n}: {status}\n{}", sc.transcripts());
    }

    let ctx = || format!("run {n} ({point:?}, victim p{victim}): {results:?}\n{}", sc.transcripts());
    for (i, r) in &results {
        assert_eq!((kv_u64(r, "bad"), kv_u64(r, "errs"), kv_u64(r, "corrupt")), (0, 0, 0), "p{i}: {}", ctx());
        let deads = if *i == victim { 0 } else { 1 };
        assert_eq!(kv_u64(r, "deads"), deads, "p{i} took the wrong number of peers for dead: {}", ctx());
        fig.skipped_slots += kv_u64(r, "skipped");
        fig.late_answers += kv_u64(r, "late");
        for (key, v) in r {
            // Every sender, either incarnation: in order, and counted.
            if let Some(from) = key.strip_prefix("recv.") {
                fig.messages += v.parse::<u64>().unwrap();
                fig.bytes += kv_u64(r, &format!("bytes.{from}"));
                assert_eq!(kv_u64(r, &format!("order.{from}")), 0, "p{i} from sender {from} out of order: {}", ctx());
            }
        }
        for j in 0..4 {
            let from = (j + 1).to_string();
            let count = r.get(&format!("recv.{from}")).map_or(0, |c| c.parse::<u64>().unwrap());
            if j != victim && *i != victim && j != *i {
                // Between survivors: nothing lost, from the first message on.
                let ok = kv_u64(&results[&j], &format!("ok.{}", i + 1));
                assert_eq!(count, ok, "p{i} got {count} of the {ok} messages p{j} saw acknowledged: {}", ctx());
                assert_eq!(kv_u64(r, &format!("gaps.{from}")), 0, "p{i} from p{j}: {}", ctx());
                assert_eq!(kv_u64(r, &format!("first.{from}")), 0, "p{i} from p{j}: {}", ctx());
                assert_eq!(kv_u64(r, &format!("failed.{from}")), 0, "p{i} from p{j}: {}", ctx());
            }
            if *i == victim && j != *i {
                // The restarted process: what each survivor saw acknowledged since the restart.
                let ok = kv_u64(&results[&j], &format!("okr.{}", i + 1));
                assert!(ok > 0, "p{j} never reached the restarted p{i}: {}", ctx());
                assert_eq!(count, ok, "restarted p{i} got {count} of p{j}'s {ok}: {}", ctx());
            }
        }
    }
    for name in &names {
        assert!(
            !std::path::Path::new("/dev/shm").join(name).exists(),
            "run {n}: /dev/shm/{name} left behind: {}",
            ctx()
        );
    }
    *fig.kills.entry(format!("{point:?}")).or_default() += 1;
    fig.runs += 1;
}

fn storm(runs: usize, placement: Placement) -> Figures {
    let seed = std::env::var("RSHM_KILL_STORM_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| wall_us() | 1);
    println!("kill storm: {runs} runs, seed {seed} (RSHM_KILL_STORM_SEED={seed} replays it)");
    let mut rng = Rng(seed);
    let mut fig = Figures::default();
    let started = Instant::now();
    for n in 0..runs {
        run(&mut rng, n, &mut fig, placement);
    }
    fig.notice_us.sort_unstable();
    let q = |f: f64| fig.notice_us[((fig.notice_us.len() - 1) as f64 * f) as usize] as f64 / 1000.0;
    println!(
        "kill storm: {} runs in {:.0?}, kills by point {:?}; time to error over {} survivors: min {:.1} ms, \
         median {:.1} ms, p99 {:.1} ms, max {:.1} ms; {} messages ({} bytes) checked; {} ring slots skipped, {} late answers",
        fig.runs,
        started.elapsed(),
        fig.kills,
        fig.notice_us.len(),
        q(0.0),
        q(0.5),
        q(0.99),
        q(1.0),
        fig.messages,
        fig.bytes,
        fig.skipped_slots,
        fig.late_answers
    );
    fig
}

#[test]
fn kill_storm_short() {
    let fig = storm(20, Placement::Ours);
    assert_eq!(fig.runs, 20);
}

/// The same with each process at random in our pid namespace or in one of its own: the dead
/// one is judged by its region lock where its pid means nothing, its half-written ring slot
/// named by its incarnation (`namespaces.rs`).
#[test]
fn kill_storm_across_pid_namespaces_short() {
    if namespaces_or_skip("kill_storm_across_pid_namespaces_short") {
        let fig = storm(20, Placement::MixedNamespaces);
        assert_eq!(fig.runs, 20);
    }
}

/// `RSHM_KILL_STORM_NAMESPACES=1` places the processes as `kill_storm_across_pid_namespaces_short`
/// does (where it can).
#[test]
#[ignore = "long: RSHM_KILL_STORM_RUNS=200 cargo test --release -p rshm-tests --test kill_storm -- --ignored"]
fn kill_storm_long() {
    let runs = std::env::var("RSHM_KILL_STORM_RUNS").ok().and_then(|s| s.parse().ok()).unwrap_or(200);
    let placement = if std::env::var("RSHM_KILL_STORM_NAMESPACES").is_ok_and(|v| v == "1") {
        if !namespaces_or_skip("kill_storm_long across pid namespaces") {
            return;
        }
        Placement::MixedNamespaces
    } else {
        Placement::Ours
    };
    let fig = storm(runs, placement);
    assert_eq!(fig.runs, runs);
}
