//! rshm-engine-pingpong: cross-process ping-pong through two smr-core endpoints.
//!
//! Prints, per message size, the protocol the engine uses, the one-way latency (round trip / 2),
//! the bandwidth that latency implies, and the ratio to the bare cache-line handoff measured
//! between the same two processes on the same two CPUs. Each CMA size gets a second row, the
//! bare CMA read: the same `process_vm_readv` with nothing of the engine around it, so that
//! what the engine adds to a CMA message reads off as the difference. `--local` instead prints what one
//! message costs the engine in instructions: both endpoints in this process, one thread.

use rshm_benches::{
    cpu_model, median, parse_size, size_label, CpuSnapshot, LocalPair, Session, SessionConfig, Transport, INJECT_MAX,
};
use std::hint::black_box;
use std::process::ExitCode;
use std::time::{Duration, Instant};

const USAGE: &str = "\
usage: rshm-engine-pingpong [--iters N] [--sizes LIST] [--sar | --both] [--batches B] [--no-pin]
                            [--local]

  --iters N     round trips per message size up to 4 KiB (default 100000); larger sizes use
                N * 4096 / size (at least 100), the bare cache-line handoff uses 2 * N
  --sizes LIST  comma-separated sizes, with optional K/M suffix (default 8,1K,4K,64K,1M)
  --sar         move messages above 4 KiB with SAR (bounce buffers) instead of CMA
  --both        print a CMA table, then a SAR table
  --batches B   split each size's round trips into B batches (default 10)
  --no-pin      do not pin the two processes to different CPUs
  --local       no second process: both endpoints in this process, driven by one thread,
                to show the engine's own cost per message (no cache line crosses cores)
  --help        show this text

RSHM_SAR_HOLD=N in the environment sets how many SAR buffers each endpoint holds back after
copying out of them (the provider's FI_RSHM_SAR_HOLD; 0 gives each back at once).

A size that goes by CMA has a second row, \"bare cma read\": each process in turn reads the
other's buffer with one process_vm_readv and hands the turn over through one cache line, the
floor under a CMA message; the engine's row minus it is what the engine adds.

Both processes busy-poll. After a warm-up batch, the round trips run in B batches; the table
shows the median batch (bandwidth and ratio use it) and the best batch. The figures are only
meaningful on otherwise idle CPUs: each table ends with how long parent and child waited for a
CPU, and says so when other load inflated the figures. The best batch is the more robust figure
on a busy machine: a batch that ran without being preempted.
exit status: 0 ok (even if the 3x target is missed), 1 error, 2 usage error";

const CONTENDED: &str = " -- other load competed for these CPUs: the medians above are inflated";
/// The 8 B one-way latency should stay within this factor of the bare cache-line handoff.
const TARGET_RATIO: f64 = 3.0;

struct Opts {
    iters: u64,
    sizes: Vec<usize>,
    transports: Vec<Transport>,
    batches: u64,
    pin: bool,
    local: bool,
}

fn parse_args() -> Result<Option<Opts>, String> {
    let mut o = Opts {
        iters: 100_000,
        sizes: vec![8, 1 << 10, 4 << 10, 64 << 10, 1 << 20],
        transports: vec![Transport::Cma],
        batches: 10,
        pin: true,
        local: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--iters" => {
                let v = value()?;
                o.iters = v.parse().map_err(|e| format!("--iters {v:?}: {e}"))?;
                if o.iters < 10 {
                    return Err("--iters must be at least 10".to_string());
                }
            }
            "--batches" => {
                let v = value()?;
                o.batches = v.parse().map_err(|e| format!("--batches {v:?}: {e}"))?;
                if !(1..=1000).contains(&o.batches) {
                    return Err("--batches must be between 1 and 1000".to_string());
                }
            }
            "--sizes" => {
                o.sizes =
                    value()?.split(',').filter(|s| !s.trim().is_empty()).map(parse_size).collect::<Result<_, _>>()?;
                if o.sizes.is_empty() {
                    return Err("--sizes is empty".to_string());
                }
            }
            "--sar" => o.transports = vec![Transport::Sar],
            "--both" => o.transports = vec![Transport::Cma, Transport::Sar],
            "--no-pin" => o.pin = false,
            "--local" => o.local = true,
            "--help" | "-h" => return Ok(None),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(Some(o))
}

fn iters_for(size: usize, iters: u64) -> u64 {
    if size <= INJECT_MAX {
        iters
    } else {
        (iters.saturating_mul(INJECT_MAX as u64) / size as u64).max(100)
    }
}

/// Per-operation time in microseconds: the median and the best batch.
#[derive(Clone, Copy)]
struct Figure {
    median: f64,
    best: f64,
}

/// Run `run(n)` once to warm up, then in `batches` batches; time / (`div` * n) per batch, in us.
fn measure(
    total: u64,
    batches: u64,
    div: f64,
    mut run: impl FnMut(u64) -> Result<Duration, String>,
) -> Result<Figure, String> {
    run((total / 10).max(10))?;
    let per = (total / batches).max(1);
    let mut samples: Vec<f64> = Vec::new();
    for _ in 0..batches {
        let t = run(per)?;
        samples.push(t.as_secs_f64() * 1e6 / (div * per as f64));
    }
    let best = samples.iter().copied().fold(f64::INFINITY, f64::min);
    Ok(Figure { median: median(&mut samples), best })
}

fn table(o: &Opts, transport: Transport) -> Result<(), String> {
    let max_size = o.sizes.iter().copied().max().unwrap_or(8).max(8);
    let mut s = Session::start(SessionConfig { transport, max_size, pin: o.pin })?;
    let placement = match s.cpus() {
        Some((p, c)) => {
            format!("parent pid {} on cpu {p}, echo child pid {} on cpu {c}", std::process::id(), s.child_pid())
        }
        None => format!("parent pid {}, echo child pid {} (not pinned)", std::process::id(), s.child_pid()),
    };
    let large = match (transport, s.cma_enabled()) {
        (Transport::Cma, true) => "CMA (process_vm_readv from the sender's buffer)",
        (Transport::Cma, false) => "SAR: CMA was asked for but the kernel refuses it",
        (Transport::Sar, _) => "SAR (32 KiB bounce buffers in the receiver's region)",
    };
    println!();
    println!("== {}: messages above {INJECT_MAX} B go through {large}", transport.name().to_uppercase());
    println!("   {placement}");
    println!(
        "{:>9}  {:<16}{:>9}  {:>14}  {:>10}  {:>17}  {:>7}",
        "size", "protocol", "iters", "one-way (us)", "best (us)", "bandwidth (MB/s)", "x bare"
    );

    let before = s.cpu_snapshot();
    let line_iters = o.iters.saturating_mul(2);
    let bare = measure(line_iters, o.batches, 2.0, |n| s.line_round_trips(n))?;
    let row = |size: usize, proto: &str, iters: u64, f: Figure| {
        let mbs = size as f64 / f.median; // bytes per microsecond = MB/s
        println!(
            "{:>9}  {proto:<16}{iters:>9}  {:>14.3}  {:>10.3}  {mbs:>17.1}  {:>6.2}x",
            size_label(size),
            f.median,
            f.best,
            f.median / bare.median
        );
    };
    row(8, "bare cache line", line_iters, bare);
    let mut small = None;
    for &size in &o.sizes {
        let iters = iters_for(size, o.iters);
        let f = measure(iters, o.batches, 2.0, |n| s.round_trips(size, n))?;
        row(size, s.protocol(size), iters, f);
        if s.protocol(size) == "cma" {
            // The floor under it: the same read with nothing of the engine around it, the turn
            // handed over through one line. What the engine adds is the difference.
            let floor = measure(iters, o.batches, 2.0, |n| s.cma_round_trips(size, n))?;
            row(size, "bare cma read", iters, floor);
        }
        if size == 8 {
            small = Some(f);
        }
    }
    let after = s.cpu_snapshot();
    let share = before.share_until(&after);
    let contended = share.is_some_and(|sh| sh.contended());
    if let Some(f) = small {
        let ratio = f.median / bare.median;
        let verdict = match (contended, ratio <= TARGET_RATIO) {
            (true, _) => "not meaningful in a contended run; compare with",
            (false, true) => "within",
            (false, false) => "MISSES",
        };
        println!(
            "8 B inline one-way {:.3} us = {ratio:.2}x the bare cache-line handoff ({:.3} us): {verdict} the \
             {TARGET_RATIO}x target (best batches: {:.3} / {:.3} us = {:.2}x)",
            f.median,
            bare.median,
            f.best,
            bare.best,
            f.best / bare.best
        );
    }
    if let Some(share) = share {
        println!(
            "on CPU: parent {:.1}%, child {:.1}% of the time; waiting for a CPU: parent {:.1}%, child {:.1}%; \
             hypervisor steal {:.1}%{}",
            share.parent * 100.0,
            share.child * 100.0,
            share.parent_waiting * 100.0,
            share.child_waiting * 100.0,
            share.steal * 100.0,
            if contended { CONTENDED } else { "" }
        );
    }
    Ok(())
}

fn local(o: &Opts) -> Result<(), String> {
    let max_size = o.sizes.iter().copied().max().unwrap_or(8).max(8);
    let before = CpuSnapshot::take(None);
    let ns = |f: Figure| format!("{:>16.1}  {:>10.1}", f.median * 1e3, f.best * 1e3);
    for &transport in &o.transports {
        let mut p = LocalPair::new(transport, max_size)?;
        println!();
        println!(
            "== {} in one process, one thread: send on one endpoint, progress the other until delivered",
            transport.name().to_uppercase()
        );
        println!("{:>9}  {:>9}  {:>16}  {:>10}", "size", "iters", "per message (ns)", "best (ns)");
        for &size in &o.sizes {
            let iters = iters_for(size, o.iters);
            let f = measure(iters, o.batches, 1.0, |n| {
                let t = Instant::now();
                for _ in 0..n {
                    p.send_and_receive(size)?;
                }
                Ok(t.elapsed())
            })?;
            println!("{:>9}  {iters:>9}  {}", size_label(size), ns(f));
        }
        let idle = measure(o.iters, o.batches, 1.0, |n| {
            let t = Instant::now();
            for _ in 0..n {
                black_box(p.progress_idle());
            }
            Ok(t.elapsed())
        })?;
        println!("{:>30}  {}", "progress() with nothing to do", ns(idle));
    }
    let now = measure(o.iters, o.batches, 1.0, |n| {
        let t = Instant::now();
        for _ in 0..n {
            black_box(Instant::now());
        }
        Ok(t.elapsed())
    })?;
    println!("{:>30}  {}", "std Instant::now()", ns(now));
    if let Some(share) = before.share_until(&CpuSnapshot::take(None)) {
        println!(
            "on CPU: {:.1}% of the time; waiting for a CPU: {:.1}%; hypervisor steal {:.1}%{}",
            share.parent * 100.0,
            share.parent_waiting * 100.0,
            share.steal * 100.0,
            if share.contended() { CONTENDED } else { "" }
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    rshm_benches::run_child_if_requested();
    let o = match parse_args() {
        Ok(Some(o)) => o,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("rshm-engine-pingpong: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    println!("rshm-engine-pingpong: cross-process ping-pong through two smr-core endpoints");
    println!(
        "{} cpus allowed ({}), busy polling; one-way = round trip / 2; median and best of {} batches; \
         MB/s = 10^6 B/s",
        rshm_benches::allowed_cpus().len(),
        cpu_model(),
        o.batches
    );
    if cfg!(debug_assertions) {
        println!("warning: debug build; build with --release for meaningful figures");
    }
    let result = if o.local { local(&o) } else { o.transports.iter().try_for_each(|&t| table(&o, t)) };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rshm-engine-pingpong: {e}");
            ExitCode::FAILURE
        }
    }
}
