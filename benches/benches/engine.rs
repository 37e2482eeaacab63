//! Criterion benchmarks of the engine between two processes.
//!
//! Every cross-process benchmark uses `iter_custom` with a [`Session`]: `iters` round trips
//! between this process and its echo child, reported as half the elapsed time, so criterion's
//! "time per iteration" is the one-way latency and its throughput (`Throughput::Bytes(size)`)
//! is the one-way bandwidth. `bare` is the floor: one `AtomicU64` handed back and forth between
//! the same two processes on the same two CPUs. `local` runs both endpoints in this process on
//! one thread: the engine's instruction cost with no cache line crossing cores. `copy` times the
//! payload copy alone.
//!
//! Run with `cargo bench -p rshm-benches` (about two minutes).

use criterion::{BenchmarkId, Criterion, Throughput};
use rshm_benches::{size_label, CpuSnapshot, LocalPair, Session, SessionConfig, Transport};
use std::hint::black_box;
use std::time::{Duration, Instant};

const SIZES: [usize; 5] = [8, 1 << 10, 4 << 10, 64 << 10, 1 << 20];
const MAX_SIZE: usize = 1 << 20;

fn id(s: &Session, size: usize) -> String {
    format!("{}_{}", size_label(size).replace(' ', ""), s.protocol(size))
}

fn session(transport: Transport) -> Session {
    Session::start(SessionConfig { transport, max_size: MAX_SIZE, pin: true })
        .unwrap_or_else(|e| panic!("cannot start the {} session: {e}", transport.name()))
}

fn one_way(c: &mut Criterion, transport: Transport) {
    let mut s = session(transport);
    let before = s.cpu_snapshot();
    let mut g = c.benchmark_group(format!("oneway_{}", transport.name()));
    if transport == Transport::Cma {
        g.warm_up_time(Duration::from_millis(300)).measurement_time(Duration::from_secs(1)).sample_size(40);
        g.throughput(Throughput::Bytes(8));
        g.bench_function("8B_bare_cache_line", |b| {
            b.iter_custom(|iters| s.line_round_trips(iters).unwrap_or_else(|e| panic!("bare: {e}")) / 2)
        });
    }
    for size in SIZES {
        let big = size > rshm_benches::INJECT_MAX;
        g.warm_up_time(Duration::from_millis(300))
            .measurement_time(Duration::from_millis(if big { 1500 } else { 1000 }))
            .sample_size(if big { 20 } else { 40 });
        g.throughput(Throughput::Bytes(size as u64));
        let name = id(&s, size);
        g.bench_function(BenchmarkId::from_parameter(name), |b| {
            b.iter_custom(|iters| s.round_trips(size, iters).unwrap_or_else(|e| panic!("{size} B: {e}")) / 2)
        });
    }
    g.finish();
    report_cpu(&format!("oneway_{}", transport.name()), &before, &s.cpu_snapshot());
}

/// Say whether parent and child really had a CPU each: busy-polling figures are only meaningful
/// on otherwise idle CPUs.
fn report_cpu(group: &str, before: &CpuSnapshot, after: &CpuSnapshot) {
    if let Some(share) = before.share_until(after) {
        eprintln!(
            "{group}: on CPU parent {:.1}%, child {:.1}%; waiting for a CPU parent {:.1}%, child {:.1}%; \
             hypervisor steal {:.1}%{}",
            share.parent * 100.0,
            share.child * 100.0,
            share.parent_waiting * 100.0,
            share.child_waiting * 100.0,
            share.steal * 100.0,
            if share.contended() { " -- CONTENDED: other load inflated these figures" } else { "" }
        );
    }
}

fn local(c: &mut Criterion) {
    let mut p = LocalPair::new(Transport::Cma, 4096).unwrap_or_else(|e| panic!("local pair: {e}"));
    let before = CpuSnapshot::take(None);
    let mut g = c.benchmark_group("local");
    g.warm_up_time(Duration::from_millis(300)).measurement_time(Duration::from_secs(1)).sample_size(40);
    g.bench_function("progress_idle", |b| b.iter(|| black_box(p.progress_idle())));
    for size in [8, 4096] {
        g.throughput(Throughput::Bytes(size as u64));
        g.bench_function(BenchmarkId::new("send_and_receive", size_label(size).replace(' ', "")), |b| {
            b.iter(|| p.send_and_receive(size).unwrap_or_else(|e| panic!("local {size} B: {e}")))
        });
    }
    g.throughput(Throughput::Elements(1));
    g.bench_function("instant_now", |b| b.iter(|| black_box(Instant::now())));
    g.finish();
    report_cpu("local", &before, &CpuSnapshot::take(None));
}

/// The payload copy every protocol makes (`smr_core::copy::copy_bytes`), in this process with
/// the bytes in cache: into a destination at a 64-byte boundary and into one 16 bytes past it,
/// where `malloc` puts an application's large buffers.
fn copy(c: &mut Criterion) {
    let src = vec![0x5au8; 64 << 10];
    let mut dst = vec![0u8; (64 << 10) + 128];
    let mut g = c.benchmark_group("copy");
    g.warm_up_time(Duration::from_millis(300)).measurement_time(Duration::from_secs(1)).sample_size(40);
    for size in [4 << 10, 32 << 10] {
        g.throughput(Throughput::Bytes(size as u64));
        for dst_offset in [0, 16] {
            let at = dst.as_ptr().align_offset(64) + dst_offset;
            let name = format!("{}_dst+{dst_offset}", size_label(size).replace(' ', ""));
            g.bench_function(name, |b| {
                // SAFETY: `src` holds `size` bytes and `dst` at least `at + size` (`at` < 128);
                // two distinct vectors do not overlap.
                b.iter(|| unsafe {
                    smr_core::copy::copy_bytes(src.as_ptr(), dst.as_mut_ptr().add(at), black_box(size))
                })
            });
        }
    }
    g.finish();
}

fn main() {
    // This executable is also the echo child of every session.
    rshm_benches::run_child_if_requested();
    let mut c = Criterion::default().configure_from_args();
    one_way(&mut c, Transport::Cma);
    one_way(&mut c, Transport::Sar);
    local(&mut c);
    copy(&mut c);
    c.final_summary();
}
