//! The measured loops. Each test has an initiator (which the bench times) and a responder (which
//! echoes, acknowledges a window, or, for one-sided tests, only progresses until the run-end
//! message arrives). Both sides post their first receives before the initiator starts its clock.
//!
//! Data is checked when `verify` is set (the first run of every size): the message bytes the
//! responder received and the echo the initiator received, the bytes a write left in the target
//! and the bytes a read brought back, and every fetched atomic value.

use super::endpoint::{check_pattern, fill_pattern, Endpoint, Family, RemoteMr, Result};
use super::fabric::ffi;
use std::ptr::null_mut;
use std::time::{Duration, Instant};

/// Messages in flight per window in the bandwidth and rate tests (as fabtests' `*_bw`).
pub const WINDOW: u64 = 64;

/// Seeds of the two directions' patterns (mixed with the size).
const INIT_SEED: u64 = 0x3a;
const RESP_SEED: u64 = 0xc5;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Test {
    /// Ping-pong; reports one-way latency (round trip / 2).
    Lat,
    /// Windowed stream of `WINDOW` messages, then an acknowledgement; bandwidth and message rate.
    Bw,
    /// One `fi_write` (`fi_read`) at a time, post to completion.
    WriteLat,
    ReadLat,
    /// As `WriteLat`, with `fi_writemsg(FI_TRANSMIT_COMPLETE)`: completion once the write is
    /// queued, not once its data is placed (fi_cq(3)). The completion the C shm 2.5.1 gives a
    /// small `fi_write` by default; rshm's default is delivery complete, which OpenSHMEM's quiet
    /// relies on (docs/perf/bench-reading.md).
    WriteLatTc,
    /// Windows of `WINDOW` writes (reads), then wait for all.
    WriteBw,
    ReadBw,
    /// `fi_fetch_atomic` FI_SUM uint64, one at a time.
    FetchLat,
    /// `fi_compare_atomic` FI_CSWAP uint64, one at a time (OpenSHMEM's compare-and-swap).
    CswapLat,
    /// `fi_fetch_atomicmsg(FI_INJECT)` FI_ATOMIC_READ uint64 with no source buffer, one at a time
    /// (OpenSHMEM's atomic fetch).
    AtomicReadLat,
    /// `fi_atomic` FI_SUM uint64, one at a time.
    AtomicLat,
    /// Windows of `WINDOW` `fi_atomic` FI_SUM uint64.
    AtomicRate,
    /// As `Bw`, each message posted with `fi_sendmsg`/`fi_tsendmsg` and FI_MORE on all but the
    /// last of its window (the provider may batch them).
    BwMore,
    /// As `BwMore` without FI_MORE: the same call and completions, so that the two differ only
    /// by the flag.
    BwMsg,
    /// As `AtomicRate`, with `fi_atomicmsg` and FI_MORE on all but the last of each window.
    AtomicRateMore,
    /// As `AtomicLat` and `AtomicRate`, with `fi_atomicmsg(FI_TRANSMIT_COMPLETE)`: the caller
    /// asks for completion once the operation is queued, not once it is applied (fi_cq(3)).
    AtomicLatTc,
    AtomicRateTc,
    /// As `Bw`, each message with remote CQ data (`fi_tinjectdata`/`fi_tsenddata`), as MPI
    /// sends name their source rank.
    BwData,
}

impl Test {
    pub const ALL: [Test; 18] = [
        Test::Lat,
        Test::Bw,
        Test::WriteLat,
        Test::WriteLatTc,
        Test::WriteBw,
        Test::ReadLat,
        Test::ReadBw,
        Test::FetchLat,
        Test::CswapLat,
        Test::AtomicReadLat,
        Test::AtomicLat,
        Test::AtomicRate,
        Test::BwMore,
        Test::BwMsg,
        Test::AtomicRateMore,
        Test::AtomicLatTc,
        Test::AtomicRateTc,
        Test::BwData,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Test::Lat => "lat",
            Test::Bw => "bw",
            Test::WriteLat => "write_lat",
            Test::WriteLatTc => "write_lat_tc",
            Test::ReadLat => "read_lat",
            Test::WriteBw => "write_bw",
            Test::ReadBw => "read_bw",
            Test::FetchLat => "fetch_lat",
            Test::CswapLat => "cswap_lat",
            Test::AtomicReadLat => "atomic_read_lat",
            Test::AtomicLat => "atomic_lat",
            Test::AtomicRate => "atomic_rate",
            Test::BwMore => "bw_more",
            Test::BwMsg => "bw_msg",
            Test::AtomicRateMore => "atomic_rate_more",
            Test::AtomicLatTc => "atomic_lat_tc",
            Test::AtomicRateTc => "atomic_rate_tc",
            Test::BwData => "bw_data",
        }
    }

    pub fn parse(s: &str) -> Option<Test> {
        Test::ALL.into_iter().find(|t| t.name() == s)
    }

    /// The tests of one family, in the order they run.
    pub fn of(family: Family) -> &'static [Test] {
        match family {
            Family::Tagged => &[Test::Lat, Test::Bw, Test::BwMsg, Test::BwMore, Test::BwData],
            Family::Msg => &[Test::Lat, Test::Bw],
            Family::Rma => &[Test::WriteLat, Test::WriteLatTc, Test::WriteBw, Test::ReadLat, Test::ReadBw],
            Family::Atomic => &[
                Test::FetchLat,
                Test::CswapLat,
                Test::AtomicReadLat,
                Test::AtomicLat,
                Test::AtomicRate,
                Test::AtomicRateMore,
                Test::AtomicLatTc,
                Test::AtomicRateTc,
            ],
        }
    }

    /// Whether the test is a stream (reports bandwidth/rate) rather than one op at a time.
    pub fn windowed(self) -> bool {
        matches!(
            self,
            Test::Bw
                | Test::BwMore
                | Test::BwMsg
                | Test::BwData
                | Test::WriteBw
                | Test::ReadBw
                | Test::AtomicRate
                | Test::AtomicRateMore
                | Test::AtomicRateTc
        )
    }

    /// Whether the test writes the initiator's bytes into the target (checked there).
    pub fn writes(self) -> bool {
        matches!(self, Test::WriteLat | Test::WriteLatTc | Test::WriteBw)
    }

    /// Whether the test fetches a value at each iteration (and checks it against the last one).
    pub fn fetches(self) -> bool {
        matches!(self, Test::FetchLat | Test::CswapLat | Test::AtomicReadLat)
    }

    /// Atomic tests move one uint64 whatever the size asked.
    pub fn fixed_size(self) -> Option<usize> {
        matches!(
            self,
            Test::FetchLat
                | Test::CswapLat
                | Test::AtomicReadLat
                | Test::AtomicLat
                | Test::AtomicRate
                | Test::AtomicRateMore
                | Test::AtomicLatTc
                | Test::AtomicRateTc
        )
        .then_some(8)
    }

    /// Largest size the test runs at: FI_MORE batching is about small messages.
    pub fn max_size(self) -> usize {
        if matches!(self, Test::BwMore | Test::BwMsg) {
            4096
        } else {
            usize::MAX
        }
    }

    /// Operations (messages) one iteration performs, for rates and bandwidth.
    pub fn ops_per_iter(self) -> u64 {
        if self.windowed() {
            WINDOW
        } else {
            1
        }
    }
}

/// What one side needs to run one test.
pub struct Run {
    pub test: Test,
    pub size: usize,
    pub iters: u64,
    pub verify: bool,
    /// The peer's target buffer (one-sided tests, initiator side).
    pub remote: RemoteMr,
}

fn seed(base: u64, size: usize) -> u64 {
    base ^ (size as u64).wrapping_mul(0x9e37_79b9)
}

/// Post one message of `len` bytes from `tx` (inject at or below the provider's inject size).
fn send(e: &mut Endpoint, len: usize, from_ack: bool) -> Result<bool> {
    send_with(e, len, from_ack, None)
}

/// `send`, with remote CQ data `data` if given (tagged only: `fi_tinjectdata`/`fi_tsenddata`).
fn send_with(e: &mut Endpoint, len: usize, from_ack: bool, data: Option<u64>) -> Result<bool> {
    let buf = if from_ack { e.ack.ptr() } else { e.tx.ptr() };
    let dest = e.peer;
    let inject = len <= e.inject_size;
    let tagged = e.family == Family::Tagged;
    e.retry("send", |e| {
        let ctx = e.ctx();
        // SAFETY: `buf..buf+len` is inside the endpoint's own buffers, which outlive every
        // operation (the endpoint is dropped only after its runs ended); inject copies at once.
        unsafe {
            match (tagged, inject, data) {
                (true, true, Some(d)) => e.ep().tinjectdata(std::slice::from_raw_parts(buf, len), d, dest, 0),
                (true, false, Some(d)) => e.ep().tsenddata(buf, len, null_mut(), d, dest, 0, ctx),
                (true, true, None) => e.ep().tinject(std::slice::from_raw_parts(buf, len), dest, 0),
                (true, false, None) => e.ep().tsend(buf, len, null_mut(), dest, 0, ctx),
                (false, true, _) => e.ep().inject(std::slice::from_raw_parts(buf, len), dest),
                (false, false, _) => e.ep().send(buf, len, null_mut(), dest, ctx),
            }
        }
    })?;
    Ok(!inject)
}

/// Post one message of `len` bytes from `tx` with `fi_sendmsg`/`fi_tsendmsg`, FI_MORE unless
/// `last`; FI_INJECT up to the inject size. Every such send completes (FI_COMPLETION).
fn send_more(e: &mut Endpoint, len: usize, last: bool) -> Result<()> {
    let buf = e.tx.ptr();
    let dest = e.peer;
    let mut flags = ffi::FI_COMPLETION as u64;
    if !last {
        flags |= ffi::FI_MORE as u64;
    }
    if len <= e.inject_size {
        flags |= ffi::FI_INJECT as u64;
    }
    let tagged = e.family == Family::Tagged;
    e.retry("sendmsg", |e| {
        let ctx = e.ctx();
        let mut iov = ffi::iovec { iov_base: buf.cast(), iov_len: len };
        // SAFETY: the iovec and the message live across the call; `buf..buf+len` is the
        // endpoint's own buffer, which outlives the operation.
        unsafe {
            if tagged {
                let msg = ffi::fi_msg_tagged {
                    msg_iov: &mut iov,
                    desc: null_mut(),
                    iov_count: 1,
                    addr: dest,
                    tag: 0,
                    ignore: 0,
                    context: ctx,
                    data: 0,
                };
                e.ep().tsendmsg(&msg, flags)
            } else {
                let msg = ffi::fi_msg {
                    msg_iov: &mut iov,
                    desc: null_mut(),
                    iov_count: 1,
                    addr: dest,
                    context: ctx,
                    data: 0,
                };
                e.ep().sendmsg(&msg, flags)
            }
        }
    })
}

/// Post one receive of up to `len` bytes into `rx` (or the ack buffer).
fn recv(e: &mut Endpoint, len: usize, into_ack: bool) -> Result<()> {
    let buf = if into_ack { e.ack.ptr() } else { e.rx.ptr() };
    let src = e.peer;
    let tagged = e.family == Family::Tagged;
    e.retry("recv", |e| {
        let ctx = e.ctx();
        // SAFETY: as in `send`: the endpoint's own buffers outlive the receive.
        unsafe {
            if tagged {
                e.ep().trecv(buf, len, null_mut(), src, 0, 0, ctx)
            } else {
                e.ep().recv(buf, len, null_mut(), src, ctx)
            }
        }
    })
}

/// The responder's setup before it says "ready": first receives, target contents.
pub fn prepare_responder(e: &mut Endpoint, r: &Run) -> Result<()> {
    match r.test {
        Test::Lat => {
            if r.verify {
                e.rx.bytes_mut()[..r.size].fill(0);
                fill_pattern(&mut e.tx.bytes_mut()[..r.size], seed(RESP_SEED, r.size));
            }
            recv(e, r.size, false)
        }
        Test::Bw | Test::BwMore | Test::BwMsg | Test::BwData => {
            if r.verify {
                e.rx.bytes_mut()[..r.size].fill(0);
            }
            (0..WINDOW).try_for_each(|_| recv(e, r.size, false))
        }
        _ => {
            if r.verify {
                match r.test {
                    Test::ReadLat | Test::ReadBw => {
                        fill_pattern(&mut e.target.bytes_mut()[..r.size], seed(RESP_SEED, r.size))
                    }
                    t if t.writes() => e.target.bytes_mut()[..r.size].fill(0),
                    _ => {}
                }
            }
            recv(e, 8, true)
        }
    }
}

/// The initiator's setup before its clock starts.
pub fn prepare_initiator(e: &mut Endpoint, r: &Run) -> Result<()> {
    if r.verify {
        // The bytes the initiator sends or writes, checked where they land.
        let sends = matches!(r.test, Test::Lat | Test::Bw | Test::BwMore | Test::BwMsg | Test::BwData);
        if sends || r.test.writes() {
            fill_pattern(&mut e.tx.bytes_mut()[..r.size], seed(INIT_SEED, r.size));
        }
        e.rx.bytes_mut()[..r.size.max(8)].fill(0);
    }
    Ok(())
}

/// The responder's part of a run (after "ready").
pub fn respond(e: &mut Endpoint, r: &Run) -> Result<()> {
    let (tx0, rx0) = (e.tx_done, e.rx_done);
    match r.test {
        Test::Lat => {
            let mut sends = 0;
            for i in 0..r.iters {
                e.wait(tx0, rx0 + i + 1)?;
                if r.verify && i == 0 {
                    verify(&e.rx.bytes()[..r.size], seed(INIT_SEED, r.size), "message received by the responder")?;
                }
                if i + 1 < r.iters {
                    recv(e, r.size, false)?;
                }
                sends += send(e, r.size, false)? as u64;
            }
            e.wait(tx0 + sends, 0)
        }
        Test::Bw | Test::BwMore | Test::BwMsg | Test::BwData => {
            let mut sends = 0;
            for it in 0..r.iters {
                e.wait(0, rx0 + (it + 1) * WINDOW)?;
                if r.verify && it == 0 {
                    verify(&e.rx.bytes()[..r.size], seed(INIT_SEED, r.size), "window received by the responder")?;
                }
                if it + 1 < r.iters {
                    (0..WINDOW).try_for_each(|_| recv(e, r.size, false))?;
                }
                sends += send(e, 8, true)? as u64;
            }
            e.wait(tx0 + sends, 0)
        }
        _ => {
            // One-sided: progress until the initiator's run-end message.
            e.wait(0, rx0 + 1)?;
            if r.verify && r.test.writes() {
                verify(&e.target.bytes()[..r.size], seed(INIT_SEED, r.size), "bytes written into the target")?;
            }
            Ok(())
        }
    }
}

/// The initiator's part of a run; returns the time it took (without the run-end message).
pub fn initiate(e: &mut Endpoint, r: &Run) -> Result<Duration> {
    let (tx0, rx0) = (e.tx_done, e.rx_done);
    let start = Instant::now();
    let mut sends = 0u64;
    match r.test {
        Test::Lat => {
            for i in 0..r.iters {
                recv(e, r.size, false)?;
                sends += send(e, r.size, false)? as u64;
                e.wait(tx0 + sends, rx0 + i + 1)?;
                if r.verify && i == 0 {
                    verify(&e.rx.bytes()[..r.size], seed(RESP_SEED, r.size), "echo received by the initiator")?;
                }
            }
        }
        Test::Bw => {
            for it in 0..r.iters {
                recv(e, 8, true)?;
                for _ in 0..WINDOW {
                    sends += send(e, r.size, false)? as u64;
                }
                e.wait(tx0 + sends, rx0 + it + 1)?;
            }
        }
        Test::BwData => {
            for it in 0..r.iters {
                recv(e, 8, true)?;
                for k in 0..WINDOW {
                    sends += send_with(e, r.size, false, Some(it * WINDOW + k + 1))? as u64;
                }
                e.wait(tx0 + sends, rx0 + it + 1)?;
            }
        }
        Test::BwMore | Test::BwMsg => {
            let more = r.test == Test::BwMore;
            for it in 0..r.iters {
                recv(e, 8, true)?;
                for k in 0..WINDOW {
                    send_more(e, r.size, !more || k + 1 == WINDOW)?;
                }
                sends += WINDOW;
                e.wait(tx0 + sends, rx0 + it + 1)?;
            }
        }
        Test::WriteLat | Test::WriteLatTc | Test::WriteBw | Test::ReadLat | Test::ReadBw => {
            let per = r.test.ops_per_iter();
            let read = matches!(r.test, Test::ReadLat | Test::ReadBw);
            for it in 0..r.iters {
                for _ in 0..per {
                    one_sided(e, r)?;
                }
                e.wait(tx0 + (it + 1) * per, 0)?;
            }
            if r.verify && read {
                verify(&e.rx.bytes()[..r.size], seed(RESP_SEED, r.size), "bytes read from the target")?;
            }
        }
        Test::FetchLat
        | Test::CswapLat
        | Test::AtomicReadLat
        | Test::AtomicLat
        | Test::AtomicRate
        | Test::AtomicRateMore
        | Test::AtomicLatTc
        | Test::AtomicRateTc => {
            let per = r.test.ops_per_iter();
            // The value the previous fetch found (for a compare-and-swap: the value it left).
            let mut last: Option<u64> = None;
            for it in 0..r.iters {
                for k in 0..per {
                    match r.test {
                        Test::AtomicRateMore => {
                            let more = if k + 1 == per { 0 } else { ffi::FI_MORE as u64 };
                            atomic_msg(e, r, ffi::FI_COMPLETION as u64 | more)?
                        }
                        Test::AtomicLatTc | Test::AtomicRateTc => {
                            atomic_msg(e, r, (ffi::FI_COMPLETION | ffi::FI_TRANSMIT_COMPLETE) as u64)?
                        }
                        Test::CswapLat => cswap(e, r, last.unwrap_or(0))?,
                        Test::AtomicReadLat => atomic_read(e, r)?,
                        t => atomic(e, r, t == Test::FetchLat)?,
                    }
                }
                e.wait(tx0 + (it + 1) * per, 0)?;
                let got = || u64::from_ne_bytes(e.rx.bytes()[..8].try_into().expect("8 bytes"));
                last = match (r.test, last) {
                    // Each fetch returns the value before its own add of 1: consecutive fetches
                    // differ by exactly one (nobody else updates the target).
                    (Test::FetchLat, Some(prev)) if got() != prev + 1 => {
                        return Err(format!("fetched atomic value {} after {prev}: expected {}", got(), prev + 1));
                    }
                    (Test::FetchLat, _) => Some(got()),
                    // Each compare-and-swap but the first compares with the value the one before
                    // left, so it finds that value and swaps in one more.
                    (Test::CswapLat, Some(prev)) if got() != prev => {
                        return Err(format!("compare-and-swap found {} where {prev} was left", got()));
                    }
                    (Test::CswapLat, Some(prev)) => Some(prev + 1),
                    // The first compares with 0: it swapped only if it found 0.
                    (Test::CswapLat, None) => Some(got().max(1)),
                    // Reads change nothing: every one finds the same value.
                    (Test::AtomicReadLat, Some(prev)) if got() != prev => {
                        return Err(format!("atomic read found {} after {prev} with no writer", got()));
                    }
                    (Test::AtomicReadLat, _) => Some(got()),
                    _ => None,
                };
            }
        }
    }
    let elapsed = start.elapsed();
    let mut tx_expected = tx0 + sends;
    if !matches!(r.test, Test::Lat | Test::Bw | Test::BwMore | Test::BwMsg | Test::BwData) {
        // One-sided: every operation completed above; then the run-end message, which the
        // target has been progressing for.
        tx_expected = e.tx_done;
        tx_expected += send(e, 8, true)? as u64;
    }
    e.wait(tx_expected, 0)?;
    Ok(elapsed)
}

/// One operation of the RMA test `r.test`: `fi_read` into `rx`, `fi_write` from `tx`, or for
/// `WriteLatTc` `fi_writemsg(FI_TRANSMIT_COMPLETE)` from `tx`.
fn one_sided(e: &mut Endpoint, r: &Run) -> Result<()> {
    let (dest, addr, key, size) = (e.peer, r.remote.addr, r.remote.key, r.size);
    let (wbuf, rbuf) = (e.tx.ptr(), e.rx.ptr());
    let call = match r.test {
        Test::ReadLat | Test::ReadBw => "fi_read",
        Test::WriteLatTc => "fi_writemsg",
        _ => "fi_write",
    };
    e.retry(call, |e| {
        let ctx = e.ctx();
        // SAFETY: local buffers belong to the endpoint and outlive the operation; the remote
        // range lies inside the peer's registered target buffer (size <= its length); the
        // iovec and the message of `fi_writemsg` live across the call.
        unsafe {
            match r.test {
                Test::ReadLat | Test::ReadBw => e.ep().read(rbuf, size, null_mut(), dest, addr, key, ctx),
                Test::WriteLatTc => {
                    let iov = ffi::iovec { iov_base: wbuf.cast(), iov_len: size };
                    let rma = ffi::fi_rma_iov { addr, len: size, key };
                    let msg = ffi::fi_msg_rma {
                        msg_iov: &iov,
                        desc: null_mut(),
                        iov_count: 1,
                        addr: dest,
                        rma_iov: &rma,
                        rma_iov_count: 1,
                        context: ctx,
                        data: 0,
                    };
                    e.ep().writemsg(&msg, (ffi::FI_COMPLETION | ffi::FI_TRANSMIT_COMPLETE) as u64)
                }
                _ => e.ep().write(wbuf, size, null_mut(), dest, addr, key, ctx),
            }
        }
    })
}

fn atomic(e: &mut Endpoint, r: &Run, fetch: bool) -> Result<()> {
    let (dest, addr, key) = (e.peer, r.remote.addr, r.remote.key);
    e.ack.bytes_mut()[..8].copy_from_slice(&1u64.to_ne_bytes());
    let (op, res) = (e.ack.ptr(), e.rx.ptr());
    e.retry(if fetch { "fi_fetch_atomic" } else { "fi_atomic" }, |e| {
        let ctx = e.ctx();
        // SAFETY: operand and result are 8-byte-aligned endpoint buffers that outlive the
        // operation; the remote uint64 is the start of the peer's registered target buffer.
        unsafe {
            if fetch {
                e.ep().fetch_atomic(
                    op,
                    1,
                    null_mut(),
                    res,
                    null_mut(),
                    dest,
                    addr,
                    key,
                    ffi::FI_UINT64,
                    ffi::FI_SUM,
                    ctx,
                )
            } else {
                e.ep().atomic(op, 1, null_mut(), dest, addr, key, ffi::FI_UINT64, ffi::FI_SUM, ctx)
            }
        }
    })
}

/// `fi_compare_atomic` FI_CSWAP uint64: where the target holds `expect`, `expect + 1`.
fn cswap(e: &mut Endpoint, r: &Run, expect: u64) -> Result<()> {
    let (dest, addr, key) = (e.peer, r.remote.addr, r.remote.key);
    e.ack.bytes_mut()[..8].copy_from_slice(&(expect + 1).to_ne_bytes());
    e.ack.bytes_mut()[8..16].copy_from_slice(&expect.to_ne_bytes());
    let (swap, res) = (e.ack.ptr(), e.rx.ptr());
    e.retry("fi_compare_atomic", |e| {
        let ctx = e.ctx();
        // SAFETY: operand, compare value and result are 8-byte-aligned endpoint buffers that
        // outlive the operation; the remote uint64 is the start of the peer's target buffer.
        unsafe { e.ep().compare_atomic(swap, 1, swap.add(8), res, dest, addr, key, ffi::FI_UINT64, ffi::FI_CSWAP, ctx) }
    })
}

/// `fi_fetch_atomicmsg(FI_INJECT)` FI_ATOMIC_READ uint64 with no source buffer, as OpenSHMEM's
/// `shmem_atomic_fetch` calls it.
fn atomic_read(e: &mut Endpoint, r: &Run) -> Result<()> {
    let (dest, addr, key) = (e.peer, r.remote.addr, r.remote.key);
    let res = e.rx.ptr();
    e.retry("fi_fetch_atomicmsg", |e| {
        let ctx = e.ctx();
        let ioc = ffi::fi_ioc { addr: null_mut(), count: 1 };
        let mut result = ffi::fi_ioc { addr: res.cast(), count: 1 };
        let rma = ffi::fi_rma_ioc { addr, count: 1, key };
        let msg = word_msg(&ioc, &rma, dest, ffi::FI_ATOMIC_READ, ctx);
        // SAFETY: the result is an 8-byte-aligned endpoint buffer that outlives the operation;
        // the remote uint64 is the start of the peer's registered target buffer.
        unsafe { e.ep().fetch_atomicmsg(&msg, &mut result, 1, ffi::FI_INJECT as u64) }
    })
}

/// `fi_atomicmsg` FI_SUM uint64 of 1 with `flags`.
fn atomic_msg(e: &mut Endpoint, r: &Run, flags: u64) -> Result<()> {
    let (dest, addr, key) = (e.peer, r.remote.addr, r.remote.key);
    e.ack.bytes_mut()[..8].copy_from_slice(&1u64.to_ne_bytes());
    let op = e.ack.ptr();
    e.retry("fi_atomicmsg", |e| {
        let ctx = e.ctx();
        let ioc = ffi::fi_ioc { addr: op.cast(), count: 1 };
        let rma = ffi::fi_rma_ioc { addr, count: 1, key };
        let msg = word_msg(&ioc, &rma, dest, ffi::FI_SUM, ctx);
        // SAFETY: the operand is an 8-byte-aligned endpoint buffer that outlives the operation;
        // the remote uint64 is the start of the peer's registered target buffer.
        unsafe { e.ep().atomicmsg(&msg, flags) }
    })
}

/// The message of an atomic `op` on one uint64: the operand `ioc` (of no buffer for
/// FI_ATOMIC_READ), the remote word `rma` at `dest`.
fn word_msg(
    ioc: &ffi::fi_ioc,
    rma: &ffi::fi_rma_ioc,
    dest: u64,
    op: ffi::fi_op,
    ctx: *mut std::ffi::c_void,
) -> ffi::fi_msg_atomic {
    ffi::fi_msg_atomic {
        msg_iov: ioc,
        desc: null_mut(),
        iov_count: 1,
        addr: dest,
        rma_iov: rma,
        rma_iov_count: 1,
        datatype: ffi::FI_UINT64,
        op,
        context: ctx,
        data: 0,
    }
}

fn verify(got: &[u8], seed: u64, what: &str) -> Result<()> {
    match check_pattern(got, seed) {
        None => Ok(()),
        Some(at) => Err(format!("data check failed: {what} differs at byte {at} of {}", got.len())),
    }
}
