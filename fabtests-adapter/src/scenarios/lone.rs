//! Writes and reads sent alone to a target that polls: where the target published the
//! registration, rshm chooses by measurement between its ordinary way through the target (SAR
//! or an answer, the target copying) and its own `process_vm_writev`/`readv`, and switches
//! between them as it learns (both ways, in turn, from the first operations) and rechecks.
//! Whichever way each goes, written bytes must land in order, at the right offsets and nowhere
//! else, and read bytes must be the target's, into the local buffer and nowhere else; a wrong
//! key, a range past the registration's end or a read-only registration must fail with both
//! sides untouched; every write into a registration bound to a FI_REMOTE_WRITE counter (counted
//! by the initiator's copy or by the target) is counted once. Bursts of writes in flight
//! together (the ordinary way) are mixed in.
//! Rank 0 writes and reads, rank 1 is the target.

use super::passive::{initiator_targets, must_fail, target_mrs};
use super::passive_write::same;
use super::rma_util::{must, payload, Peer, Spec, Target, BASIC, MSG, REMOTE_READ, REMOTE_WRITE, RMA, SCALABLE};
use super::{scn, Scenario};
use crate::ensure;
use crate::fabric::ffi;
use crate::harness::{pattern, Rank, TResult};
use std::time::Duration;

pub fn scenarios() -> Vec<Scenario> {
    let what = "fi_write of 2 KiB to 72 KiB and fi_read of 513 B to 16 KiB, each alone, with a target that polls: \
                bytes in place at completion whichever way each goes, errors with both sides untouched, counted writes";
    let raw =
        "fi_read of 1500 or 3000 B alone after a 2 KiB fi_writemsg(FI_TRANSMIT_COMPLETE) completed, to a target that \
               polls slowly: the read sees the write (FI_ORDER_RMA_RAW, both within max_order_raw_size)";
    vec![
        scn("rma/scalable/lone_ops", 2, 60, run::<SCALABLE>, what),
        scn("rma/basic/lone_ops", 2, 60, run::<BASIC>, what),
        scn("rma/scalable/lone_raw", 2, 60, raw_after_unacked::<SCALABLE>, raw),
        scn("rma/basic/lone_raw", 2, 60, raw_after_unacked::<BASIC>, raw),
    ]
}

/// Rounds of `raw_after_unacked`: enough that a chooser of reads sent alone tries both ways.
const RAW_ROUNDS: u64 = 80;

/// A write that completes once queued (FI_TRANSMIT_COMPLETE: rshm does not wait for the
/// target's answer) and then a read alone of the same bytes, both within max_order_raw_size:
/// FI_ORDER_RMA_RAW says the read sees the write. The target polls every 300 us, so the write
/// waits in its ring while the read is posted; a read by the initiator's own CMA copy would
/// pass it and return the old bytes.
fn raw_after_unacked<const M: u8>(r: &mut Rank) -> TResult {
    let mut p = Peer::open(r, &Spec::new(MSG | RMA, M))?;
    p.exchange(r)?;
    if r.rank == TARGET {
        let regs: Vec<usize> = (0..3).map(|_| p.alloc(LEN)).collect();
        let (_ma, _c) = target_mrs(&mut p, r, &regs, LEN, (REMOTE_READ, REMOTE_WRITE), 0x7C0)?;
        r.pmi.wait_key_with("raw_done", &mut || {
            p.progress()?;
            std::thread::sleep(Duration::from_micros(300));
            Ok(())
        })?;
        return p.barrier(r);
    }
    let ([a, _, _], _) = initiator_targets(&mut p, r, TARGET)?;
    r.pmi.step("rounds of an unacknowledged 2 KiB write, then a 1500 or 3000 B read alone of its bytes");
    let flags = (ffi::FI_COMPLETION | ffi::FI_TRANSMIT_COMPLETE) as u64;
    for i in 0..RAW_ROUNDS {
        let t = a.at((i as usize * 4099) % (LEN - 4096));
        let bytes = pattern(0x500 + i, 2048);
        let rma = [ffi::fi_rma_iov { addr: t.addr, len: 2048, key: t.key }];
        let what = format!("fi_writemsg(FI_TRANSMIT_COMPLETE) {i} of 2048 B");
        let id = must(&what, p.writemsg(&what, vec![bytes.clone()], t.dest, &rma, flags, 0)?)?;
        p.wait_ok(id)?;
        // Both sides of rshm's `lone::SMALL_READ_TOP`, whose reads have choosers of their own.
        let len = if i % 2 == 0 { 3000 } else { 1500 };
        let what = format!("fi_read {i} of {len} B after it");
        let id = must(&what, p.read(&what, len, t)?)?;
        let d = p.wait_ok(id)?;
        let n = len.min(2048);
        same(&payload(&what, &d.bufs[0], len)?[..n], &bytes[..n], &what)?;
    }
    r.pmi.set("raw_done", "1");
    p.barrier(r)
}

const TARGET: usize = 1;
const LEN: usize = 256 * 1024;
/// Sizes of the writes, in turn: across rshm's `LONE_WRITE_MIN` (2 KiB), within an inject buffer
/// (to 4 KiB, where `lone::SMALL_WRITE_TOP` gives them a chooser of their own), above it, within
/// one SAR segment and beyond, where the way is chosen, and across rshm's `LONE_WRITE_MAX`
/// (64 KiB).
const SIZES: [usize; 15] =
    [2048, 2049, 3000, 4096, 4097, 5000, 8192, 12_345, 16_384, 16_385, 32_768, 40_000, 65_536, 65_537, 72_000];
const WRITES: usize = 240;
/// Every `BURST_EVERY`-th write starts a burst of `BURST` writes in flight together.
const BURST_EVERY: usize = 23;
const BURST: usize = 4;
/// Counted writes into the registration bound to a FI_REMOTE_WRITE counter.
const COUNTED: u64 = 5;
/// Sizes of the reads, in turn: above rshm's `LONE_READ_MIN` (512 B), to its one-trip reads
/// (16 KiB), on both sides of `lone::SMALL_READ_TOP` (2 KiB), where its choosers change.
const READ_SIZES: [usize; 9] = [513, 1024, 2048, 2049, 3000, 4096, 8192, 12_345, 16_384];
const READS: usize = 126;

/// Write `i`: its offset and length (offsets overlap, so that the order counts).
fn write_at(i: usize) -> (usize, usize) {
    let len = SIZES[i % SIZES.len()];
    let off = (i * 7919 + i * i * 13) % (LEN - len);
    (off, len)
}

fn write_bytes(i: usize, len: usize) -> Vec<u8> {
    pattern(0x10e + i as u64, len)
}

/// The written registration's memory after every write, applied in order.
fn after_writes() -> Vec<u8> {
    let mut m = pattern(0x10d, LEN);
    for i in 0..WRITES {
        let (off, len) = write_at(i);
        m[off..off + len].copy_from_slice(&write_bytes(i, len));
    }
    m
}

fn run<const M: u8>(r: &mut Rank) -> TResult {
    let mut p = Peer::open(r, &Spec::new(MSG | RMA, M))?;
    p.exchange(r)?;
    if r.rank == TARGET {
        return target(&mut p, r);
    }
    let ([a, read_only, counted], wrong) = initiator_targets(&mut p, r, TARGET)?;
    r.pmi.step("a fi_writemsg with FI_INJECT larger than the inject size, alone");
    // Refused before any way is chosen: a write the initiator could copy itself must not
    // complete instead. The target's memory is compared with `after_writes` at the end.
    let len = 8192;
    let rma = [ffi::fi_rma_iov { addr: a.addr, len, key: a.key }];
    let inject = (ffi::FI_INJECT | ffi::FI_DELIVERY_COMPLETE) as u64;
    let posted = p.writemsg("fi_writemsg(FI_INJECT) of 8 KiB", vec![pattern(0x31, len)], a.dest, &rma, inject, 0)?;
    ensure!(
        posted == Err(-(ffi::FI_EMSGSIZE as i32)),
        "fi_writemsg(FI_INJECT) of {len} B: {posted:?}, expected -FI_EMSGSIZE (the inject size is 4 KiB)"
    );
    r.pmi.step("writes, each alone but for the bursts, while the target polls");
    let mut i = 0;
    while i < WRITES {
        let n = if i % BURST_EVERY == BURST_EVERY - 1 { BURST.min(WRITES - i) } else { 1 };
        let mut ids = Vec::new();
        for k in i..i + n {
            let (off, len) = write_at(k);
            let what = format!("fi_write {k} of {len} B at {off}");
            ids.push(must(&what, p.write(&what, write_bytes(k, len), a.at(off), None)?)?);
        }
        for id in ids {
            p.wait_ok(id)?;
        }
        // Now and then one that must fail, or one into the counted registration, alone too.
        let len = SIZES[i % SIZES.len()];
        match i % 11 {
            3 => write_fails(&mut p, a.at(LEN - len / 2), len, "a fi_write crossing the MR end")?,
            6 => write_fails(&mut p, read_only, len, "a fi_write into a FI_REMOTE_READ-only MR")?,
            9 => write_fails(&mut p, Target { key: wrong, ..a }, len, "a fi_write with a wrong key")?,
            _ => {}
        }
        i += n;
    }
    for k in 0..COUNTED {
        let len = SIZES[k as usize % SIZES.len()];
        let what = format!("counted fi_write {k} of {len} B");
        let id = must(&what, p.write(&what, pattern(0x20 + k, len), counted, None)?)?;
        p.wait_ok(id)?;
    }
    r.pmi.step("reads, each alone, of the written MR");
    let image = after_writes();
    for i in 0..READS {
        let len = READ_SIZES[i % READ_SIZES.len()];
        let off = (i * 6151 + 17) % (LEN - len);
        let what = format!("fi_read {i} of {len} B at {off}");
        let id = must(&what, p.read(&what, len, a.at(off))?)?;
        let d = p.wait_ok(id)?;
        let got = payload(&what, &d.bufs[0], len)?;
        same(got, &image[off..off + len], &what)?;
        match i % 13 {
            4 => read_fails(&mut p, a.at(LEN - len / 2), len, "a fi_read crossing the MR end")?,
            10 => read_fails(&mut p, Target { key: wrong, ..a }, len, "a fi_read with a wrong key")?,
            _ => {}
        }
    }
    p.barrier(r)?;
    // The target compares its memory.
    p.barrier(r)
}

fn target(p: &mut Peer, r: &mut Rank) -> TResult {
    let regs: Vec<usize> = (0..3).map(|_| p.alloc(LEN)).collect();
    p.region(regs[0]).write(0, &pattern(0x10d, LEN));
    p.region(regs[1]).write(0, &pattern(0x10c, LEN));
    let (_ma, c) = target_mrs(p, r, &regs, LEN, (REMOTE_READ, REMOTE_WRITE), 0x7B0)?;
    // Polls (the barrier progresses) while the initiator writes.
    p.barrier(r)?;
    p.wait_cntr(c, COUNTED, "the FI_REMOTE_WRITE counter of the bound MR")?;
    p.progress_for(Duration::from_millis(20))?;
    ensure!(p.cntr(c).read() == COUNTED, "the FI_REMOTE_WRITE counter reads {}, expected {COUNTED}", p.cntr(c).read());
    let last = SIZES[(COUNTED as usize - 1) % SIZES.len()];
    same(&p.region(regs[2]).read(0, last), &pattern(0x20 + COUNTED - 1, last), "the counted MR")?;
    same(&p.region(regs[1]).read(0, LEN), &pattern(0x10c, LEN), "the read-only MR")?;
    same(&p.region(regs[0]).read(0, LEN), &after_writes(), "the written MR")?;
    p.barrier(r)
}

fn write_fails(p: &mut Peer, t: Target, len: usize, what: &str) -> TResult {
    let posted = p.write(what, pattern(0x30, len), t, None)?;
    must_fail(p, posted, what)
}

fn read_fails(p: &mut Peer, t: Target, len: usize, what: &str) -> TResult {
    let posted = p.read(what, len, t)?;
    must_fail(p, posted, what)
}
