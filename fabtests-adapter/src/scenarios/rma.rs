//! RMA (fi_rma(3)): every write and read call, sizes across rshm's inline (<= 1032 B), inject
//! (<= 4096 B), CMA and SAR paths, local iovs and remote segments, remote CQ data,
//! FI_DELIVERY_COMPLETE, FI_FENCE and the access errors, in both MR modes:
//! - scalable: mr_mode 0 hint, the application picks the key, the remote address is an offset
//!   from the MR start;
//! - basic: FI_MR_VIRT_ADDR|FI_MR_ALLOCATED|FI_MR_PROV_KEY hint, the key from fi_mr_key, the
//!   remote address a virtual address.
//!
//! The scenarios address the target as the mr_mode getinfo returned says (a bit the provider
//! cleared is a behaviour it does not need, fi_mr(3)). Rank 0 initiates, rank 1 is the target;
//! the target checks its memory byte for byte, including the bytes just outside every written
//! range. They report "not supported" where getinfo offers no FI_RMA.

use super::rma_util::{
    self as u, must, payload, split, MrInfo, Peer, Spec, Target, BASIC, COMPLETION, DELIVERY_COMPLETE, FENCE,
    INJECT_COMPLETE, MSG, READ, REMOTE_CQ_DATA, REMOTE_READ, REMOTE_WRITE, RMA, SCALABLE, TRANSMIT_COMPLETE, WRITE,
};
use super::{scn, seed, setup, Scenario, INLINE_MAX};
use crate::fabric::{self, ffi, FiAddr, Mr};
use crate::harness::{check_pattern, pattern, FiCtx, Node, NodeCfg, Rank, TResult, TestErr};
use crate::{bail, ensure};
use std::time::{Duration, Instant};

pub fn scenarios() -> Vec<Scenario> {
    vec![
        scn(
            "rma/write_read",
            2,
            40,
            write_read,
            "harness Node: fi_write, fi_read back, fi_writedata with remote CQ data",
        ),
        scn(
            "atomic/u64_ops",
            2,
            40,
            atomics,
            "harness Node: fi_atomic SUM, fi_fetch_atomic, fi_compare_atomic on a u64",
        ),
        scn("rma/mr_keys", 1, 20, mr_keys, "MR keys for remote access: requested keys, duplicates (-FI_ENOKEY)"),
        scn(
            "rma/scalable/write",
            2,
            60,
            write::<SCALABLE>,
            "fi_write 0 B..16 MiB; target memory and gaps byte for byte",
        ),
        scn("rma/basic/write", 2, 60, write::<BASIC>, "fi_write 0 B..16 MiB; target memory and gaps byte for byte"),
        scn("rma/scalable/read", 2, 60, read::<SCALABLE, 0>, "fi_read 0 B..16 MiB into canaried buffers"),
        scn("rma/basic/read", 2, 60, read::<BASIC, 0>, "fi_read 0 B..16 MiB into canaried buffers"),
        scn(
            "rma/scalable/two_way_read",
            2,
            60,
            two_way_read,
            "both ranks fi_read each other at once, 16 KiB-1 MiB, many in flight: bytes checked, targets unchanged",
        ),
        scn(
            "rma/scalable/read_transmit_complete",
            2,
            60,
            read::<SCALABLE, { COMPLETION | TRANSMIT_COMPLETE }>,
            "fi_readmsg(FI_TRANSMIT_COMPLETE) 0 B..16 MiB: complete only with the bytes in the buffer",
        ),
        scn(
            "rma/basic/read_inject_complete",
            2,
            60,
            read::<BASIC, { COMPLETION | INJECT_COMPLETE }>,
            "fi_readmsg(FI_INJECT_COMPLETE) 0 B..16 MiB: complete only with the bytes in the buffer",
        ),
        scn(
            "rma/scalable/iov",
            2,
            60,
            iov::<SCALABLE>,
            "fi_writev/fi_writemsg/fi_readv/fi_readmsg: local splits, 2 remote segments",
        ),
        scn(
            "rma/basic/iov",
            2,
            60,
            iov::<BASIC>,
            "fi_writev/fi_writemsg/fi_readv/fi_readmsg: local splits, 2 remote segments",
        ),
        scn(
            "rma/scalable/inject",
            2,
            40,
            inject::<SCALABLE>,
            "fi_inject_write, fi_inject_writedata: no initiator completion, data and CQ data at the target",
        ),
        scn(
            "rma/basic/inject",
            2,
            40,
            inject::<BASIC>,
            "fi_inject_write, fi_inject_writedata: no initiator completion, data and CQ data at the target",
        ),
        scn(
            "rma/scalable/writedata",
            2,
            40,
            writedata::<SCALABLE>,
            "fi_writedata, fi_writemsg(FI_REMOTE_CQ_DATA): target CQ entry flags and data, data visible at the entry",
        ),
        scn(
            "rma/basic/writedata",
            2,
            40,
            writedata::<BASIC>,
            "fi_writedata, fi_writemsg(FI_REMOTE_CQ_DATA): target CQ entry flags and data, data visible at the entry",
        ),
        scn(
            "rma/scalable/delivery_complete",
            2,
            60,
            delivery_complete::<SCALABLE>,
            "fi_writemsg(FI_DELIVERY_COMPLETE): data at the target once the initiator's completion is read",
        ),
        scn(
            "rma/basic/delivery_complete",
            2,
            60,
            delivery_complete::<BASIC>,
            "fi_writemsg(FI_DELIVERY_COMPLETE): data at the target once the initiator's completion is read",
        ),
        scn(
            "rma/scalable/err_range",
            2,
            40,
            errors::<SCALABLE, RANGE, true>,
            "accesses outside the MR (writes with FI_DELIVERY_COMPLETE): error completion (FI_EACCES/FI_EINVAL), target memory unchanged",
        ),
        scn(
            "rma/basic/err_range",
            2,
            40,
            errors::<BASIC, RANGE, true>,
            "accesses outside the MR (writes with FI_DELIVERY_COMPLETE): error completion (FI_EACCES/FI_EINVAL), target memory unchanged",
        ),
        scn(
            "rma/scalable/err_key",
            2,
            40,
            errors::<SCALABLE, KEY_ERR, true>,
            "wrong key (writes with FI_DELIVERY_COMPLETE): error completion (FI_EACCES/FI_EINVAL), target memory unchanged, no remote CQ data",
        ),
        scn(
            "rma/basic/err_key",
            2,
            40,
            errors::<BASIC, KEY_ERR, true>,
            "wrong key (writes with FI_DELIVERY_COMPLETE): error completion (FI_EACCES/FI_EINVAL), target memory unchanged, no remote CQ data",
        ),
        scn(
            "rma/scalable/err_access",
            2,
            40,
            errors::<SCALABLE, ACCESS, true>,
            "write to a read-only MR (FI_DELIVERY_COMPLETE), read from a write-only MR: error completion, memory unchanged",
        ),
        scn(
            "rma/basic/err_access",
            2,
            40,
            errors::<BASIC, ACCESS, true>,
            "write to a read-only MR (FI_DELIVERY_COMPLETE), read from a write-only MR: error completion, memory unchanged",
        ),
        scn(
            "rma/scalable/err_transmit_complete",
            2,
            40,
            errors::<SCALABLE, ALL_ERRS, false>,
            "every invalid access, writes with fi_writemsg(FI_TRANSMIT_COMPLETE): success or error completion, target memory unchanged, no remote CQ data, the endpoint still works and a read sees its next write",
        ),
        scn(
            "rma/basic/err_transmit_complete",
            2,
            40,
            errors::<BASIC, ALL_ERRS, false>,
            "every invalid access, writes with fi_writemsg(FI_TRANSMIT_COMPLETE): success or error completion, target memory unchanged, no remote CQ data, the endpoint still works and a read sees its next write",
        ),
        scn(
            "rma/fence",
            2,
            40,
            fence,
            "FI_FENCE (n/s if getinfo refuses it): fenced reads see earlier writes; fenced delivery-complete write",
        ),
    ]
}

const TARGET: usize = 1;

/// Requested key of the target MR (scalable mode; basic mode uses fi_mr_key).
const KEY: u64 = 0x5EED;

/// Sizes across rshm's inline, inject, CMA/SAR thresholds and C shm's.
const SIZES: &[usize] = &[0, 1, 8, 200, INLINE_MAX, INLINE_MAX + 1, 4096, 4097, 65536, 1 << 20, 16 << 20];

/// Read sizes: `SIZES` and rshm's one-round-trip read thresholds: the bytes in the answer
/// entry (<= 96 B, the first 32 in its first cache line), in an inject buffer of the initiator's (<= 4096 B) or a SAR buffer (up to
/// FI_RSHM_READ_ONE_TRIP_MAX, 16384 B by default, and up to one SAR buffer, 32768 B, from a
/// target that calls progress, as these targets do), in up to four SAR buffers (131072 B) from
/// such a target, a reply or the initiator's CMA read above.
const READ_SIZES: &[usize] = &[
    0,
    1,
    8,
    32,
    33,
    64,
    96,
    97,
    200,
    INLINE_MAX,
    INLINE_MAX + 1,
    4095,
    4096,
    4097,
    8192,
    16383,
    16384,
    16385,
    32768,
    32769,
    65536,
    98303,
    131072,
    131073,
    1 << 20,
    16 << 20,
];

/// Untouched bytes between written ranges (each range also starts a little unaligned).
const GAP: usize = 64;

/// Byte ranges in one target region, with gaps in between.
struct Layout {
    ranges: Vec<(usize, usize)>,
    len: usize,
}

fn layout(lens: &[usize]) -> Layout {
    let mut ranges = Vec::new();
    let mut off = GAP;
    for (k, &l) in lens.iter().enumerate() {
        let o = off + k % 7;
        ranges.push((o, l));
        off = o + l + GAP;
    }
    Layout { ranges, len: off }
}

impl Layout {
    /// Where `off` lies, for a failure message.
    fn describe(&self, off: usize) -> String {
        for (k, &(o, l)) in self.ranges.iter().enumerate() {
            if off >= o && off < o + l {
                return format!("offset {} inside range #{k} ({l} B at {o})", off - o);
            }
        }
        match self.ranges.iter().enumerate().rev().find(|(_, &(o, _))| o <= off) {
            Some((k, &(o, l))) => {
                format!(
                    "{} B past the end of range #{k} ({l} B at {o}): outside every written range",
                    off - (o + l) + 1
                )
            }
            None => format!("offset {off}, before the first range: outside every written range"),
        }
    }
}

fn open(r: &mut Rank, caps: u64, mode: u8) -> TResult<Peer> {
    let mut p = Peer::open(r, &Spec::new(caps, mode))?;
    r.pmi.step(&format!("note: {} mode, getinfo mr_mode {:#x}", u::mode_name(mode), p.mr_mode));
    p.exchange(r)?;
    Ok(p)
}

fn target_of(p: &Peer, m: &MrInfo) -> Target {
    Target { dest: p.addrs[TARGET], addr: m.addr, key: m.key }
}

/// The first differing offset of two equal-length slices.
fn first_diff(a: &[u8], b: &[u8]) -> Option<usize> {
    if a == b {
        return None;
    }
    // Compare in chunks first (fast), then bytes.
    let mut base = 0;
    for (x, y) in a.chunks(4096).zip(b.chunks(4096)) {
        if x != y {
            return x.iter().zip(y).position(|(p, q)| p != q).map(|i| base + i);
        }
        base += x.len();
    }
    None
}

/// Progress (when `progress`) until region `reg` holds `want` or the deadline; a mismatch is
/// named by offset and by the range of `lay` it falls in.
fn await_content(p: &mut Peer, reg: usize, want: &[u8], lay: &Layout, what: &str, progress: bool) -> TResult {
    let deadline = Instant::now() + p.timeout;
    let mut got = vec![0u8; want.len()];
    loop {
        if progress {
            p.progress()?;
        }
        p.region(reg).read_into(0, &mut got);
        let Some(off) = first_diff(&got, want) else { return Ok(()) };
        if Instant::now() > deadline {
            bail!(
                "{what}: byte at {} is {:#04x}, want {:#04x} ({}; still after {:?})",
                off,
                got[off],
                want[off],
                lay.describe(off),
                p.timeout
            );
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Progress for a moment (so that stray writes would land), then check region `reg` holds
/// `want` (nothing may change it).
fn check_unchanged(p: &mut Peer, reg: usize, want: &[u8], lay: &Layout, what: &str) -> TResult {
    p.progress_for(Duration::from_millis(50))?;
    let got = p.region(reg).read(0, want.len());
    if let Some(off) = first_diff(&got, want) {
        bail!("{what}: byte at {off} is {:#04x}, want {:#04x} ({})", got[off], want[off], lay.describe(off));
    }
    Ok(())
}

/// Check range `k` of `lay` in `reg` (and `GAP/2` bytes either side) right now, no progress.
fn check_now(p: &Peer, reg: usize, want: &[u8], lay: &Layout, k: usize, what: &str) -> TResult {
    let (o, l) = lay.ranges[k];
    let (a, b) = (o - GAP / 2, o + l + GAP / 2);
    let got = p.region(reg).read(a, b - a);
    if let Some(i) = first_diff(&got, &want[a..b]) {
        bail!("{what}: byte at {} is {:#04x}, want {:#04x} ({})", a + i, got[i], want[a + i], lay.describe(a + i));
    }
    Ok(())
}

/// Background of a target region.
fn bg(len: usize) -> Vec<u8> {
    pattern(0xB6B6, len)
}

/// Target side of most scenarios: a region of `lay.len` with the background, registered for
/// remote read and write, shared with the initiator.
fn target_region(p: &mut Peer, r: &mut Rank, lay: &Layout) -> TResult<usize> {
    let reg = p.alloc(lay.len);
    p.region(reg).write(0, &bg(lay.len));
    let (_, mi) = p.reg(reg, 0, lay.len, REMOTE_READ | REMOTE_WRITE, KEY, 0)?;
    p.share_mrs(r, &[mi])?;
    Ok(reg)
}

/// Initiator side: the target's MR.
fn remote_mr(p: &mut Peer, r: &mut Rank) -> TResult<Target> {
    let all = p.share_mrs(r, &[])?;
    let m = *all[TARGET].first().ok_or_else(|| TestErr::Fail("the target shared no MR".into()))?;
    Ok(target_of(p, &m))
}

fn data_of(k: usize, len: usize) -> Vec<u8> {
    pattern(seed(0x3A, k as u64, len as u64), len)
}

// ---------------------------------------------------------------------------------------------

fn write<const M: u8>(r: &mut Rank) -> TResult {
    let mut p = open(r, MSG | RMA, M)?;
    let lay = layout(SIZES);
    if r.rank == TARGET {
        let reg = target_region(&mut p, r, &lay)?;
        p.barrier(r)?;
        let mut want = bg(lay.len);
        for (k, &(o, l)) in lay.ranges.iter().enumerate() {
            want[o..o + l].copy_from_slice(&data_of(k, l));
        }
        await_content(&mut p, reg, &want, &lay, "target memory after every fi_write completed", true)?;
    } else {
        let t = remote_mr(&mut p, r)?;
        for (k, &(o, l)) in lay.ranges.iter().enumerate() {
            let what = format!("fi_write of {l} B");
            r.pmi.step(&what);
            let id = must(&what, p.write(&what, data_of(k, l), t.at(o), None)?)?;
            let d = p.wait_ok(id)?;
            d.flags_have(RMA | WRITE, "FI_RMA|FI_WRITE")?;
        }
        p.barrier(r)?;
    }
    p.barrier(r)
}

/// `fi_read` of every size (`FLAGS` 0), or `fi_readmsg` of one buffer and one segment with
/// `FLAGS`: a completion level asked of a read (FI_TRANSMIT_COMPLETE, FI_INJECT_COMPLETE) does
/// not let it complete before its bytes are in the buffer (fi_cq(3): reads complete when the
/// data is available).
fn read<const M: u8, const FLAGS: u64>(r: &mut Rank) -> TResult {
    let mut p = open(r, MSG | RMA, M)?;
    let lay = layout(READ_SIZES);
    if r.rank == TARGET {
        let reg = target_region(&mut p, r, &lay)?;
        p.barrier(r)?;
        check_unchanged(&mut p, reg, &bg(lay.len), &lay, "target memory after fi_reads (must be unchanged)")?;
    } else {
        let t = remote_mr(&mut p, r)?;
        let want = bg(lay.len);
        for &(o, l) in &lay.ranges {
            let id = if FLAGS == 0 {
                let what = format!("fi_read of {l} B");
                r.pmi.step(&what);
                must(&what, p.read(&what, l, t.at(o))?)?
            } else {
                let what = format!("fi_readmsg({FLAGS:#x}) of {l} B");
                r.pmi.step(&what);
                let at = t.at(o);
                let rma = [ffi::fi_rma_iov { addr: at.addr, len: l, key: at.key }];
                must(&what, p.readmsg(&what, &[l], at.dest, &rma, FLAGS)?)?
            };
            let what = format!("read of {l} B with flags {FLAGS:#x}");
            let d = p.wait_ok(id)?;
            d.flags_have(RMA | READ, "FI_RMA|FI_READ")?;
            let got = payload(&what, &d.bufs[0], l)?;
            if let Some(i) = first_diff(got, &want[o..o + l]) {
                bail!("{what}: byte {i} is {:#04x}, the target holds {:#04x}", got[i], want[o + i]);
            }
        }
        p.barrier(r)?;
    }
    p.barrier(r)
}

/// Sizes for reads made while the target reads us too: around one SAR buffer (32 KiB by
/// default) and four, up to which rshm has a target that progresses, though busy, answer into
/// buffers of the initiator's (or reads the target's published registration itself, where
/// that measures faster); above, the target pushes them through the initiator's SAR buffers.
const TWO_WAY_SIZES: &[usize] =
    &[16384, 16385, 24576, 32767, 32768, 32769, 49152, 98303, 131072, 131073, 196608, 262147, (1 << 20) + 1];

/// Both ranks are initiator and target at once, as in fi_rma_bw -o read: each posts rounds of
/// reads of every `TWO_WAY_SIZES` from the other's registration, all in flight together, and
/// progresses only while it waits for them.
fn two_way_read(r: &mut Rank) -> TResult {
    const ROUNDS: usize = 4;
    let mut p = open(r, MSG | RMA, SCALABLE)?;
    let lay = layout(TWO_WAY_SIZES);
    let mine = |rank: usize| pattern(seed(0x2A, rank as u64, lay.len as u64), lay.len);
    let reg = p.alloc(lay.len);
    p.region(reg).write(0, &mine(r.rank));
    let (_, mi) = p.reg(reg, 0, lay.len, REMOTE_READ | REMOTE_WRITE, KEY, 0)?;
    let all = p.share_mrs(r, &[mi])?;
    let other = 1 - r.rank;
    let m = *all[other].first().ok_or_else(|| TestErr::Fail("the other rank shared no MR".into()))?;
    let t = Target { dest: p.addrs[other], addr: m.addr, key: m.key };
    let want = mine(other);
    p.barrier(r)?;
    for round in 0..ROUNDS {
        let mut ids = Vec::new();
        for &(o, l) in &lay.ranges {
            let what = format!("round {round}: fi_read of {l} B while the target reads us");
            ids.push((must(&what, p.read(&what, l, t.at(o))?)?, o, l, what));
        }
        for (id, o, l, what) in ids {
            let d = p.wait_ok(id)?;
            let got = payload(&what, &d.bufs[0], l)?;
            if let Some(i) = first_diff(got, &want[o..o + l]) {
                bail!("{what}: byte {i} is {:#04x}, the target holds {:#04x}", got[i], want[o + i]);
            }
        }
    }
    p.barrier(r)?;
    check_unchanged(&mut p, reg, &mine(r.rank), &lay, "own memory after the other's fi_reads (must be unchanged)")?;
    p.barrier(r)
}

// ---- iovs ----

/// One vectored write: `lparts` local iovs, `segs` remote segments (consecutive ranges of the
/// layout), by fi_writev (segs 1) or fi_writemsg.
struct IovCase {
    len: usize,
    msg: bool,
    lparts: usize,
    segs: usize,
}

fn iov_cases() -> Vec<IovCase> {
    let mut v = Vec::new();
    for &len in &[1usize, 8, 33, 200, INLINE_MAX, INLINE_MAX + 1, 4096, 4097, 16384, 16385, 65536, 131072, 1 << 20] {
        v.push(IovCase { len, msg: false, lparts: 2, segs: 1 });
        v.push(IovCase { len, msg: false, lparts: 4, segs: 1 });
        v.push(IovCase { len, msg: true, lparts: 3, segs: 1 });
        v.push(IovCase { len, msg: true, lparts: 2, segs: if len >= 2 { 2 } else { 1 } });
    }
    v
}

/// Segment lengths of a case (two halves for two segments).
fn seg_lens(c: &IovCase) -> Vec<usize> {
    if c.segs == 2 {
        vec![c.len / 2, c.len - c.len / 2]
    } else {
        vec![c.len]
    }
}

fn iov_layout(cases: &[IovCase]) -> (Layout, Vec<usize>) {
    let mut lens = Vec::new();
    let mut first = Vec::new();
    for c in cases {
        first.push(lens.len());
        lens.extend(seg_lens(c));
    }
    (layout(&lens), first)
}

pub(super) fn chunks(data: &[u8], lens: &[usize]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut off = 0;
    for &l in lens {
        out.push(data[off..off + l].to_vec());
        off += l;
    }
    out
}

fn iov<const M: u8>(r: &mut Rank) -> TResult {
    let mut p = open(r, MSG | RMA, M)?;
    let cases = iov_cases();
    let (lay, first) = iov_layout(&cases);
    if r.rank == TARGET {
        let reg = target_region(&mut p, r, &lay)?;
        p.barrier(r)?;
        let mut want = bg(lay.len);
        for (ci, c) in cases.iter().enumerate() {
            let data = data_of(ci, c.len);
            let mut off = 0;
            for (s, l) in seg_lens(c).into_iter().enumerate() {
                let (o, _) = lay.ranges[first[ci] + s];
                want[o..o + l].copy_from_slice(&data[off..off + l]);
                off += l;
            }
        }
        await_content(&mut p, reg, &want, &lay, "target memory after fi_writev/fi_writemsg", true)?;
        p.barrier(r)?;
    } else {
        let t = remote_mr(&mut p, r)?;
        let tx = p.tx_attr();
        let (iov_limit, rma_limit) = (tx.iov_limit.clamp(1, 4), tx.rma_iov_limit.max(1));
        r.pmi.step(&format!("note: iov_limit {}, rma_iov_limit {}", tx.iov_limit, tx.rma_iov_limit));
        for (ci, c) in cases.iter().enumerate() {
            let data = data_of(ci, c.len);
            let parts = chunks(&data, &split(c.len, c.lparts.min(iov_limit)));
            let segs = seg_lens(c);
            let rma: Vec<ffi::fi_rma_iov> = segs
                .iter()
                .enumerate()
                .map(|(s, &l)| {
                    let at = t.at(lay.ranges[first[ci] + s].0);
                    ffi::fi_rma_iov { addr: at.addr, len: l, key: at.key }
                })
                .collect();
            if !c.msg {
                let what = format!("fi_writev of {} B in {} iovs", c.len, parts.len());
                let id = must(&what, p.writev(&what, parts, t.at(lay.ranges[first[ci]].0))?)?;
                p.wait_ok(id)?.flags_have(RMA | WRITE, "FI_RMA|FI_WRITE")?;
            } else if rma.len() <= rma_limit {
                let what = format!("fi_writemsg of {} B in {} iovs to {} segments", c.len, parts.len(), rma.len());
                let id = must(&what, p.writemsg(&what, parts, t.dest, &rma, COMPLETION, 0)?)?;
                p.wait_ok(id)?.flags_have(RMA | WRITE, "FI_RMA|FI_WRITE")?;
            } else {
                // rma_iov_limit 1: one fi_writemsg per segment.
                let mut off = 0;
                for (s, seg) in rma.iter().enumerate() {
                    let what = format!("fi_writemsg of segment {s} ({} B)", seg.len);
                    let part = data[off..off + seg.len].to_vec();
                    off += seg.len;
                    let id = must(&what, p.writemsg(&what, vec![part], t.dest, std::slice::from_ref(seg), 0, 0)?)?;
                    p.wait_ok(id)?;
                }
            }
        }
        p.barrier(r)?;
        // The target has seen every write: read them back.
        p.barrier(r)?;
        for (ci, c) in cases.iter().enumerate() {
            let data = data_of(ci, c.len);
            let segs = seg_lens(c);
            let (what, id) = if c.segs == 2 && rma_limit >= 2 {
                let rma: Vec<ffi::fi_rma_iov> = segs
                    .iter()
                    .enumerate()
                    .map(|(s, &l)| {
                        let at = t.at(lay.ranges[first[ci] + s].0);
                        ffi::fi_rma_iov { addr: at.addr, len: l, key: at.key }
                    })
                    .collect();
                let lens = split(c.len, 3.min(iov_limit));
                let what = format!("fi_readmsg of {} B from 2 segments into {} iovs", c.len, lens.len());
                let id = must(&what, p.readmsg(&what, &lens, t.dest, &rma, 0)?)?;
                (what, id)
            } else {
                // The first segment (the whole case when it has one).
                let lens = split(segs[0], c.lparts.min(iov_limit));
                let what = format!("fi_readv of {} B into {} iovs", segs[0], lens.len());
                let id = must(&what, p.readv(&what, &lens, t.at(lay.ranges[first[ci]].0))?)?;
                (what, id)
            };
            let d = p.wait_ok(id)?;
            d.flags_have(RMA | READ, "FI_RMA|FI_READ")?;
            let lens: Vec<usize> = d.bufs.iter().map(|b| b.len() - 2 * u::CANARY).collect();
            let mut got = Vec::new();
            for (b, &l) in d.bufs.iter().zip(&lens) {
                got.extend_from_slice(payload(&what, b, l)?);
            }
            let want = &data[..got.len()];
            if let Some(i) = first_diff(&got, want) {
                bail!("{what}: byte {i} is {:#04x}, want {:#04x}", got[i], want[i]);
            }
        }
    }
    p.barrier(r)
}

// ---- inject ----

fn inject<const M: u8>(r: &mut Rank) -> TResult {
    let mut p = open(r, MSG | RMA, M)?;
    let isz = p.tx_attr().inject_size;
    let sizes: Vec<usize> =
        [0usize, 1, 8, 200, INLINE_MAX, INLINE_MAX + 1, 4096].into_iter().filter(|&s| s <= isz).collect();
    // Ranges: fi_inject_write of every size, then fi_inject_writedata of every size.
    let lens: Vec<usize> = sizes.iter().chain(sizes.iter()).copied().collect();
    let lay = layout(&lens);
    let n = sizes.len();
    let cq_data = |k: usize| 0xD000_0000_0000 + k as u64;
    if r.rank == TARGET {
        let reg = target_region(&mut p, r, &lay)?;
        p.barrier(r)?;
        // One target CQ entry per fi_inject_writedata.
        let mut seen = vec![false; n];
        for _ in 0..n {
            let e = p.wait_event("fi_inject_writedata: target CQ entry")?;
            check_remote_entry(&e, "fi_inject_writedata")?;
            let k = (n..2 * n)
                .find(|&k| cq_data(k) == e.data)
                .ok_or_else(|| TestErr::Fail(format!("target CQ entry with unknown data {:#x}", e.data)))?;
            ensure!(!seen[k - n], "two target CQ entries with data {:#x}", e.data);
            seen[k - n] = true;
        }
        let mut want = bg(lay.len);
        for (k, &(o, l)) in lay.ranges.iter().enumerate() {
            want[o..o + l].copy_from_slice(&data_of(k, l));
        }
        await_content(&mut p, reg, &want, &lay, "target memory after fi_inject_write/fi_inject_writedata", true)?;
        p.barrier(r)?;
        p.progress_for(Duration::from_millis(50))?;
        ensure!(p.events.is_empty(), "{} extra target CQ entries", p.events.len());
    } else {
        r.pmi.step(&format!("note: inject_size {isz}"));
        let t = remote_mr(&mut p, r)?;
        for (k, &(o, l)) in lay.ranges.iter().enumerate() {
            let mut buf = data_of(k, l);
            let (what, ret) = if k < n {
                let what = format!("fi_inject_write of {l} B");
                let ret = p.inject(&what, |ep| ep.inject_write(&buf, t.dest, t.at(o).addr, t.key))?;
                (what, ret)
            } else {
                let what = format!("fi_inject_writedata of {l} B");
                let ret = p.inject(&what, |ep| {
                    use u::EpExt;
                    ep.inject_writedata(&buf, cq_data(k), t.dest, t.at(o).addr, t.key)
                })?;
                (what, ret)
            };
            ensure!(ret == 0, "{what} returned {}", fabric::errname(ret as i32));
            // The buffer is ours again as soon as the call returns.
            buf.fill(0xEE);
        }
        p.progress_for(Duration::from_millis(100))?;
        if let Some(e) = p.events.front() {
            bail!(
                "an fi_inject_write* produced an initiator CQ entry (flags {:#x}); fi_rma(3): inject has no completion",
                e.flags
            );
        }
        p.barrier(r)?;
        p.barrier(r)?;
    }
    p.barrier(r)
}

/// A target CQ entry for remote CQ data (fi_cq(3): FI_REMOTE_CQ_DATA with FI_RMA|FI_REMOTE_WRITE).
fn check_remote_entry(e: &u::Event, what: &str) -> TResult {
    ensure!(e.err == 0, "{what}: error entry at the target: {}", fabric::errname(-e.err));
    let want = REMOTE_CQ_DATA | RMA | REMOTE_WRITE;
    ensure!(
        e.flags & want == want,
        "{what}: target CQ entry flags {:#x} lack FI_REMOTE_CQ_DATA|FI_RMA|FI_REMOTE_WRITE ({:#x} missing)",
        e.flags,
        want & !e.flags
    );
    Ok(())
}

// ---- writedata ----

fn writedata<const M: u8>(r: &mut Rank) -> TResult {
    let mut p = open(r, MSG | RMA, M)?;
    // fi_writedata of each size, then fi_writemsg(FI_REMOTE_CQ_DATA) of a few.
    let wd: &[usize] = &[0, 1, 200, INLINE_MAX, INLINE_MAX + 1, 4096, 4097, 65536, 1 << 20];
    let wm: &[usize] = &[8, 4097, 65536];
    let lens: Vec<usize> = wd.iter().chain(wm).copied().collect();
    let lay = layout(&lens);
    let cq_data = |k: usize| 0xDA7A_0000 + k as u64;
    if r.rank == TARGET {
        let reg = target_region(&mut p, r, &lay)?;
        let mut want = bg(lay.len);
        for (k, &(o, l)) in lay.ranges.iter().enumerate() {
            want[o..o + l].copy_from_slice(&data_of(k, l));
        }
        let mut seen = vec![false; lens.len()];
        for _ in 0..lens.len() {
            let e = p.wait_event("remote CQ data entry at the target")?;
            let k = (0..lens.len())
                .find(|&k| cq_data(k) == e.data)
                .ok_or_else(|| TestErr::Fail(format!("target CQ entry with unknown data {:#x}", e.data)))?;
            let what = if k < wd.len() {
                format!("fi_writedata of {} B", lens[k])
            } else {
                format!("fi_writemsg(FI_REMOTE_CQ_DATA) of {} B", lens[k])
            };
            check_remote_entry(&e, &what)?;
            ensure!(!seen[k], "{what}: two target CQ entries with data {:#x}", e.data);
            seen[k] = true;
            // fi_cq(3): data is visible at the target once its completion is generated.
            check_now(&p, reg, &want, &lay, k, &format!("{what}: target memory when its CQ entry was read"))?;
        }
        p.barrier(r)?;
        p.progress_for(Duration::from_millis(50))?;
        ensure!(p.events.is_empty(), "{} extra target CQ entries", p.events.len());
        await_content(&mut p, reg, &want, &lay, "target memory after every write", false)?;
    } else {
        let t = remote_mr(&mut p, r)?;
        for (k, &(o, l)) in lay.ranges.iter().enumerate() {
            let (what, res) = if k < wd.len() {
                let what = format!("fi_writedata of {l} B");
                let res = p.write(&what, data_of(k, l), t.at(o), Some(cq_data(k)))?;
                (what, res)
            } else {
                let what = format!("fi_writemsg(FI_REMOTE_CQ_DATA) of {l} B");
                let at = t.at(o);
                let rma = [ffi::fi_rma_iov { addr: at.addr, len: l, key: at.key }];
                let res = p.writemsg(&what, vec![data_of(k, l)], t.dest, &rma, REMOTE_CQ_DATA, cq_data(k))?;
                (what, res)
            };
            let id = must(&what, res)?;
            p.wait_ok(id)?.flags_have(RMA | WRITE, "FI_RMA|FI_WRITE")?;
        }
        p.barrier(r)?;
    }
    p.barrier(r)
}

// ---- delivery complete ----

fn delivery_complete<const M: u8>(r: &mut Rank) -> TResult {
    let mut p = open(r, MSG | RMA, M)?;
    let sizes: &[usize] = &[8, 1, 200, 4096, 4097, 65536, 1 << 20, 16 << 20];
    let lay = layout(sizes);
    if r.rank == TARGET {
        let reg = target_region(&mut p, r, &lay)?;
        let mut want = bg(lay.len);
        for (k, &(o, l)) in lay.ranges.iter().enumerate() {
            want[o..o + l].copy_from_slice(&data_of(k, l));
        }
        // Range 0: a warm-up write (connection set up while we progress).
        p.barrier(r)?;
        let (mut strict, mut relaxed) = (Vec::new(), Vec::new());
        for (k, &l) in sizes.iter().enumerate().skip(1) {
            let what = format!("fi_writemsg(FI_DELIVERY_COMPLETE) of {l} B");
            // No libfabric call here until the initiator has its completion, unless it says
            // the completion needs our progress (allowed under FI_PROGRESS_MANUAL).
            let v = r.pmi.wait_key_with(&format!("dc{k}"), &mut || Ok(()))?;
            if v == "progress" {
                r.pmi.wait_key_with(&format!("dc{k}b"), &mut || p.progress().map(|_| ()))?;
                relaxed.push(l);
            } else {
                strict.push(l);
            }
            check_now(
                &p,
                reg,
                &want,
                &lay,
                k,
                &format!("{what}: target memory right after the initiator's completion"),
            )?;
            p.barrier(r)?;
        }
        r.pmi.step(&format!(
            "note: completed without target progress: {strict:?} B; needed target progress: {relaxed:?} B"
        ));
    } else {
        let t = remote_mr(&mut p, r)?;
        let (o, l) = lay.ranges[0];
        let id = must("warm-up fi_write", p.write("warm-up fi_write", data_of(0, l), t.at(o), None)?)?;
        p.wait_ok(id)?;
        p.barrier(r)?;
        for k in 1..sizes.len() {
            let (o, l) = lay.ranges[k];
            let what = format!("fi_writemsg(FI_DELIVERY_COMPLETE) of {l} B");
            r.pmi.step(&what);
            let at = t.at(o);
            let rma = [ffi::fi_rma_iov { addr: at.addr, len: l, key: at.key }];
            let id = must(&what, p.writemsg(&what, vec![data_of(k, l)], t.dest, &rma, DELIVERY_COMPLETE, 0)?)?;
            match p.wait_for(id, Duration::from_millis(500))? {
                Some(d) => {
                    d.ok()?.flags_have(RMA | WRITE, "FI_RMA|FI_WRITE")?;
                    r.pmi.set(&format!("dc{k}"), "done");
                }
                None => {
                    r.pmi.set(&format!("dc{k}"), "progress");
                    p.wait_ok(id)?.flags_have(RMA | WRITE, "FI_RMA|FI_WRITE")?;
                    r.pmi.set(&format!("dc{k}b"), "done");
                }
            }
            p.barrier(r)?;
        }
    }
    p.barrier(r)
}

// ---- errors ----

/// Length of MR A (read and write); B is read-only, C write-only, 4096 B each. Every MR sits
/// `PAD` bytes into a region `PAD` bytes longer on each side, so that an access a provider
/// fails to refuse lands in memory we check (not in the heap).
const LA: usize = 16384;
const PAD: usize = 65536;

/// Classes of invalid access (one scenario each, so that a provider that wedges on one class
/// still gets the others tried).
const RANGE: u8 = 0;
const KEY_ERR: u8 = 1;
const ACCESS: u8 = 2;
/// Every class at once (the transmit-complete run).
const ALL_ERRS: u8 = 3;

#[derive(Clone, Copy, Debug)]
enum Mrs {
    A,
    B,
    C,
}

struct ErrCase {
    what: &'static str,
    write: bool,
    mr: Mrs,
    /// Offset from the MR's first byte (may be negative).
    off: i64,
    len: usize,
    wrong_key: bool,
    cq_data: bool,
}

impl ErrCase {
    fn class(&self) -> u8 {
        if self.wrong_key {
            KEY_ERR
        } else if matches!(self.mr, Mrs::A) {
            RANGE
        } else {
            ACCESS
        }
    }
}

fn err_cases(class: u8) -> Vec<ErrCase> {
    let mut v = all_err_cases();
    v.retain(|c| class == ALL_ERRS || c.class() == class);
    v
}

fn all_err_cases() -> Vec<ErrCase> {
    let la = LA as i64;
    let c = |what, write, mr, off, len, wrong_key| ErrCase { what, write, mr, off, len, wrong_key, cq_data: false };
    // Small accesses (inline/inject paths) first, then the large ones (CMA/SAR): a provider
    // that wedges on one case still gets the others tried.
    vec![
        c("fi_write of 16 B crossing the MR end", true, Mrs::A, la - 8, 16, false),
        c("fi_write of 1 B just past the MR end", true, Mrs::A, la, 1, false),
        c("fi_write of 16 B starting 8 B before the MR", true, Mrs::A, -8, 16, false),
        c("fi_read of 16 B crossing the MR end", false, Mrs::A, la - 8, 16, false),
        c("fi_write of 8 B with a wrong key", true, Mrs::A, 0, 8, true),
        c("fi_read of 8 B with a wrong key", false, Mrs::A, 0, 8, true),
        ErrCase { cq_data: true, ..c("fi_writedata of 8 B with a wrong key", true, Mrs::A, 0, 8, true) },
        c("fi_write of 8 B to a FI_REMOTE_READ-only MR", true, Mrs::B, 0, 8, false),
        c("fi_read of 8 B from a FI_REMOTE_WRITE-only MR", false, Mrs::C, 0, 8, false),
        c("fi_write of 4097 B with a wrong key", true, Mrs::A, 0, 4097, true),
        c("fi_read of 4097 B with a wrong key", false, Mrs::A, 0, 4097, true),
        c("fi_write of 4096 B to a FI_REMOTE_READ-only MR", true, Mrs::B, 0, 4096, false),
        c("fi_read of 4096 B from a FI_REMOTE_WRITE-only MR", false, Mrs::C, 0, 4096, false),
        c("fi_read of 33 B crossing the MR end", false, Mrs::A, la - 8, 33, false),
        c("fi_read of 33 B with a wrong key", false, Mrs::A, 0, 33, true),
        c("fi_read of 33 B from a FI_REMOTE_WRITE-only MR", false, Mrs::C, 0, 33, false),
        c("fi_read of 16384 B with a wrong key", false, Mrs::A, 0, 16384, true),
        c("fi_read of 16384 B crossing the MR end", false, Mrs::A, 8, 16384, false),
        c("fi_write of 8192 B crossing the MR end", true, Mrs::A, la - 4096, 8192, false),
        c("fi_read of 8192 B crossing the MR end", false, Mrs::A, la - 4096, 8192, false),
        c("fi_write of 65536 B with a wrong key", true, Mrs::A, 0, 65536, true),
        c("fi_write of 65536 B to a 16384 B MR", true, Mrs::A, 0, 65536, false),
    ]
}

/// The invalid accesses of `CLASS`. With `DC` every write asks for FI_DELIVERY_COMPLETE
/// (fi_writemsg), so its refusal must come back as an error completion. Without it the writes
/// ask for FI_TRANSMIT_COMPLETE, which a provider may report once the write is queued, before
/// the target has seen it (fi_cq(3)): then a success is as right as an error, but the target's
/// memory must still be unchanged, no remote CQ data may appear, and the endpoint must go on
/// working (its next write lands, a read after it sees it). Reads always wait for their data,
/// so they must fail either way.
fn errors<const M: u8, const CLASS: u8, const DC: bool>(r: &mut Rank) -> TResult {
    let mut p = open(r, MSG | RMA, M)?;
    let lens = [LA, 4096, 4096];
    let access = [REMOTE_READ | REMOTE_WRITE, REMOTE_READ, REMOTE_WRITE];
    // The valid write at the end: 16 B at offset 8 of A.
    let (vo, vl) = (8usize, 16usize);
    if r.rank == TARGET {
        let mut regs = Vec::new();
        let mut infos = Vec::new();
        for i in 0..3 {
            let reg = p.alloc(lens[i] + 2 * PAD);
            p.region(reg).write(0, &bg(lens[i] + 2 * PAD));
            let (_, mi) = p.reg(reg, PAD, lens[i], access[i], KEY + i as u64, 0)?;
            regs.push(reg);
            infos.push(mi);
        }
        p.share_mrs(r, &infos)?;
        // Did the initiator's final valid write complete? (If not, its bytes are unknown.)
        let verdict = r.pmi.allgather_with("-", Some(&mut || p.progress().map(|_| ())))?;
        let valid_done = verdict[0] == "ok";
        for i in 0..3 {
            let mut want = bg(lens[i] + 2 * PAD);
            if i == 0 {
                let v = PAD + vo..PAD + vo + vl;
                if valid_done {
                    want[v].copy_from_slice(&data_of(99, vl));
                } else {
                    want[v.clone()].copy_from_slice(&p.region(regs[0]).read(v.start, vl));
                }
            }
            let lay = Layout { ranges: vec![(PAD, lens[i])], len: want.len() };
            let name = ["A (read/write)", "B (read-only)", "C (write-only)"][i];
            check_unchanged(&mut p, regs[i], &want, &lay, &format!("target region of MR {name} after the failed ops"))?;
        }
        if let Some(e) = p.events.iter().find(|e| e.err == 0) {
            bail!(
                "the target got a successful CQ entry (flags {:#x}, data {:#x}) from a failed write",
                e.flags,
                e.data
            );
        }
    } else {
        let all = p.share_mrs(r, &[])?;
        let mrs = all[TARGET].clone();
        ensure!(mrs.len() == 3, "the target shared {} MRs", mrs.len());
        let mut wrong = 0xBAD0_0000_u64 ^ mrs[0].key;
        while mrs.iter().any(|m| m.key == wrong) {
            wrong = wrong.wrapping_add(0x1_0001);
        }
        let mut bad = Vec::new();
        let mut codes = Vec::new();
        // A provider that keeps answering -FI_EAGAIN fails the case, not the whole run.
        p.timeout = Duration::from_secs(3);
        let mut stuck = 0;
        for c in err_cases(CLASS) {
            if stuck >= 2 {
                bad.push(format!("{}: not tried (the endpoint is stuck)", c.what));
                continue;
            }
            r.pmi.step(c.what);
            let m = mrs[c.mr as usize];
            let t = Target {
                dest: p.addrs[TARGET],
                addr: m.addr.wrapping_add(c.off as u64),
                key: if c.wrong_key { wrong } else { m.key },
            };
            let res = if c.write {
                let rma = [ffi::fi_rma_iov { addr: t.addr, len: c.len, key: t.key }];
                let level = if DC { DELIVERY_COMPLETE } else { TRANSMIT_COMPLETE };
                let flags = COMPLETION | level | if c.cq_data { REMOTE_CQ_DATA } else { 0 };
                p.writemsg(c.what, vec![data_of(7, c.len)], t.dest, &rma, flags, 0xBAD)
            } else {
                p.read(c.what, c.len, t)
            };
            let id = match res {
                Ok(Ok(id)) => id,
                Err(TestErr::Fail(m)) => {
                    bad.push(m);
                    stuck += 1;
                    continue;
                }
                Err(e) => return Err(e),
                Ok(Err(code)) => {
                    bad.push(format!(
                        "{}: the call returned {} (expected an error completion)",
                        c.what,
                        fabric::errname(code)
                    ));
                    continue;
                }
            };
            let Some(d) = p.wait_for(id, Duration::from_secs(3))? else {
                bad.push(format!("{}: no completion within 3 s", c.what));
                stuck += 1;
                continue;
            };
            let (eacces, einval) = (ffi::FI_EACCES as i32, ffi::FI_EINVAL as i32);
            let untouched = c.write || d.bufs.iter().flatten().all(|&b| b == u::CANARY_BYTE);
            if d.err == 0 && c.write && !DC {
                codes.push(format!("{}=completed (transmit complete)", c.what));
            } else if d.err == 0 {
                bad.push(format!("{}: completed successfully", c.what));
            } else if !untouched {
                bad.push(format!("{}: the failed read wrote into the initiator's buffer", c.what));
            } else if d.err != eacces && d.err != einval {
                bad.push(format!(
                    "{}: error completion {} (expected FI_EACCES or FI_EINVAL)",
                    c.what,
                    fabric::errname(d.err)
                ));
            } else {
                codes.push(format!("{}={}", c.what, fabric::errname(d.err)));
            }
        }
        r.pmi.step(&format!("note: error codes: {}", codes.join("; ")));
        if stuck == 0 {
            p.timeout = r.timeout;
        }
        // The endpoint still works.
        let t = Target { dest: p.addrs[TARGET], addr: mrs[0].addr, key: mrs[0].key };
        let mut after = || -> TResult {
            let what = "fi_write after the errors";
            let level = if DC { 0 } else { COMPLETION | TRANSMIT_COMPLETE };
            let id = if DC {
                must(what, p.write(what, data_of(99, vl), t.at(vo), None)?)?
            } else {
                let ta = t.at(vo);
                let rma = [ffi::fi_rma_iov { addr: ta.addr, len: vl, key: ta.key }];
                must(what, p.writemsg(what, vec![data_of(99, vl)], ta.dest, &rma, level, 0)?)?
            };
            p.wait_ok(id)?;
            let what = "fi_read after the errors";
            let id = must(what, p.read(what, vl, t.at(vo))?)?;
            let d = p.wait_ok(id)?;
            check_pattern(what, seed(0x3A, 99, vl as u64), payload(what, &d.bufs[0], vl)?, vl)
        };
        let after = after();
        let verdict = if after.is_ok() { "ok" } else { "bad" };
        if let Err(TestErr::Fail(m)) = after {
            bad.push(m);
        }
        let fin = r.pmi.allgather_with(verdict, Some(&mut || p.progress().map(|_| ()))).and_then(|_| p.barrier(r));
        if !bad.is_empty() {
            bail!("{} of {} checks failed: {}", bad.len(), err_cases(CLASS).len() + 1, bad.join("; "));
        }
        return fin;
    }
    p.barrier(r)
}

// ---- fence ----

fn fence(r: &mut Rank) -> TResult {
    let mut p = open(r, MSG | RMA | FENCE, BASIC)?;
    let sizes: &[usize] = &[8, 4097, 1 << 20];
    // Ranges: one per size for the fenced reads, then one per size for the fenced DC write's
    // predecessors, then the fenced write's own 8 bytes.
    let lens: Vec<usize> = sizes.iter().chain(sizes).copied().chain([8]).collect();
    let lay = layout(&lens);
    let n = sizes.len();
    if r.rank == TARGET {
        let reg = target_region(&mut p, r, &lay)?;
        let mut want = bg(lay.len);
        for (k, &(o, l)) in lay.ranges.iter().enumerate() {
            want[o..o + l].copy_from_slice(&data_of(k, l));
        }
        r.pmi.wait_key_with("fenced", &mut || p.progress().map(|_| ()))?;
        for k in n..lens.len() {
            check_now(&p, reg, &want, &lay, k, "after a fenced FI_DELIVERY_COMPLETE write completed: earlier write")?;
        }
        p.barrier(r)?;
        await_content(&mut p, reg, &want, &lay, "target memory", true)?;
    } else {
        let t = remote_mr(&mut p, r)?;
        for k in 0..n {
            let (o, l) = lay.ranges[k];
            let w = must("fi_write", p.write("fi_write", data_of(k, l), t.at(o), None)?)?;
            let what = format!("fi_readmsg(FI_FENCE) of {l} B after an fi_write of it");
            let at = t.at(o);
            let rma = [ffi::fi_rma_iov { addr: at.addr, len: l, key: at.key }];
            let rd = must(&what, p.readmsg(&what, &[l], t.dest, &rma, FENCE)?)?;
            let d = p.wait_ok(rd)?;
            let got = payload(&what, &d.bufs[0], l)?;
            check_pattern(&what, seed(0x3A, k as u64, l as u64), got, l)?;
            p.wait_ok(w)?;
        }
        let mut ids = Vec::new();
        for k in n..2 * n {
            let (o, l) = lay.ranges[k];
            ids.push(must("fi_write", p.write("fi_write", data_of(k, l), t.at(o), None)?)?);
        }
        let k = 2 * n;
        let (o, l) = lay.ranges[k];
        let at = t.at(o);
        let rma = [ffi::fi_rma_iov { addr: at.addr, len: l, key: at.key }];
        let what = "fi_writemsg(FI_FENCE|FI_DELIVERY_COMPLETE)";
        let f = must(what, p.writemsg(what, vec![data_of(k, l)], t.dest, &rma, FENCE | DELIVERY_COMPLETE, 0)?)?;
        p.wait_ok(f)?;
        r.pmi.set("fenced", "1");
        for id in ids {
            p.wait_ok(id)?;
        }
        p.barrier(r)?;
    }
    p.barrier(r)
}

// ---------------------------------------------------------------------------------------------
// The harness Node's own RMA/atomic helpers (kept as a smoke test of that API).

fn rma_cfg(cap: u64) -> NodeCfg {
    NodeCfg {
        caps: (ffi::FI_MSG | ffi::FI_TAGGED) as u64 | cap,
        mr_mode: (ffi::FI_MR_VIRT_ADDR | ffi::FI_MR_ALLOCATED | ffi::FI_MR_PROV_KEY | ffi::FI_MR_ENDPOINT) as i32,
        ..Default::default()
    }
}

fn publish(r: &mut Rank, node: &mut Node, key: u64, addr: u64) -> TResult<(u64, u64)> {
    let all = r.pmi.allgather_with(&format!("{key:x}:{addr:x}"), Some(&mut node.progressor()))?;
    let other = &all[1 - r.rank];
    let (k, a) = other.split_once(':').ok_or_else(|| TestErr::Fail("bad key exchange".into()))?;
    let parse = |s: &str| u64::from_str_radix(s, 16).map_err(|_| TestErr::Fail("bad key".into()));
    Ok((parse(k)?, parse(a)?))
}

fn write_read(r: &mut Rank) -> TResult {
    let (mut node, addrs) = setup(r, &rma_cfg(RMA))?;
    let peer: FiAddr = addrs[1 - r.rank];
    let len = 1 << 20;
    let (idx, key, addr) =
        if r.rank == 1 { node.reg_target(&vec![0u8; len], REMOTE_READ | REMOTE_WRITE, 0xBEEF)? } else { (0, 0, 0) };
    let (rkey, raddr) = publish(r, &mut node, key, addr)?;
    if r.rank == 0 {
        for (k, &size) in [8usize, 4096, 65536, 1 << 20].iter().enumerate() {
            let what = format!("RMA size {size}");
            let id = node.rma_write(&pattern(k as u64, size), peer, raddr, rkey, None)?;
            node.wait_ok(id, &format!("{what}: fi_write"))?;
            let id = node.rma_read(size, peer, raddr, rkey)?;
            let c = node.wait_ok(id, &format!("{what}: fi_read"))?;
            check_pattern(&format!("{what}: read back"), k as u64, &c.payload, size)?;
        }
        let id = node.rma_write(&pattern(77, 4096), peer, raddr, rkey, Some(0x77))?;
        node.wait_ok(id, "fi_writedata")?;
    } else {
        // The target sees fi_writedata as a completion with FI_REMOTE_CQ_DATA.
        let deadline = Instant::now() + node.timeout;
        loop {
            node.progress()?;
            let got = node.take_completions();
            if let Some(c) = got.iter().find(|c| c.flags & REMOTE_CQ_DATA != 0) {
                ensure!(c.data == 0x77, "fi_writedata: remote CQ data {:#x} != 0x77", c.data);
                break;
            }
            if !got.is_empty() {
                bail!("unexpected completion at the RMA target: flags {:#x}", got[0].flags);
            }
            ensure!(Instant::now() < deadline, "timeout waiting for the fi_writedata completion");
        }
        check_pattern("target buffer after fi_writedata", 77, &node.target(idx)[..4096], 4096)?;
    }
    super::finish(r, &mut node)
}

fn atomics(r: &mut Rank) -> TResult {
    let (mut node, addrs) = setup(r, &rma_cfg(u::ATOMIC))?;
    let peer = addrs[1 - r.rank];
    let (_, key, addr) =
        if r.rank == 1 { node.reg_target(&0u64.to_ne_bytes(), REMOTE_READ | REMOTE_WRITE, 0xA7)? } else { (0, 0, 0) };
    let (rkey, raddr) = publish(r, &mut node, key, addr)?;
    if r.rank == 0 {
        let (ret, count) = node.ep().atomicvalid(ffi::FI_UINT64, ffi::FI_SUM);
        crate::harness::fi_ok("fi_atomicvalid(UINT64, SUM)", ret)?;
        ensure!(count >= 1, "fi_atomicvalid count {count}");
        for _ in 0..10 {
            let id = node.atomic_u64(ffi::FI_SUM, 5, false, peer, raddr, rkey)?;
            node.wait_ok(id, "fi_atomic(SUM)")?;
        }
        let id = node.atomic_u64(ffi::FI_SUM, 0, true, peer, raddr, rkey)?;
        let c = node.wait_ok(id, "fi_fetch_atomic(SUM 0)")?;
        let v = u64::from_ne_bytes(c.payload[8..16].try_into().expect("8 bytes"));
        ensure!(v == 50, "after 10 x SUM 5 the target reads {v}");
        let id = node.cswap_u64(50, 7, peer, raddr, rkey)?;
        let c = node.wait_ok(id, "fi_compare_atomic")?;
        let old = u64::from_ne_bytes(c.payload[16..24].try_into().expect("8 bytes"));
        ensure!(old == 50, "fi_compare_atomic returned old value {old}");
        let id = node.atomic_u64(ffi::FI_ATOMIC_READ, 0, true, peer, raddr, rkey)?;
        let c = node.wait_ok(id, "fi_fetch_atomic(ATOMIC_READ)")?;
        let v = u64::from_ne_bytes(c.payload[8..16].try_into().expect("8 bytes"));
        ensure!(v == 7, "after CSWAP(50 -> 7) the target reads {v}");
    }
    super::finish(r, &mut node)
}

fn mr_keys(r: &mut Rank) -> TResult {
    let node = Node::open(&r.prov, &rma_cfg(RMA), r.timeout)?;
    let mr_mode = node.info.get().domain_attr().map_or(0, |d| d.mr_mode);
    let prov_key = mr_mode & ffi::FI_MR_PROV_KEY as i32 != 0;
    let buf = vec![0u8; 3 * 4096];
    let access = REMOTE_READ | REMOTE_WRITE;
    // SAFETY: buf outlives the MRs (closed before returning; declared after buf, dropped first).
    let m1 = unsafe { Mr::reg(node.domain(), buf.as_ptr(), 4096, access, 0, 0x1234, 0) }.ctx("fi_mr_reg")?;
    if prov_key {
        // SAFETY: as above.
        let m2 = unsafe { Mr::reg(node.domain(), buf[4096..].as_ptr(), 4096, access, 0, 0x1234, 0) }
            .ctx("fi_mr_reg (2nd, FI_MR_PROV_KEY)")?;
        ensure!(m1.key() != m2.key(), "two MRs got the same provider key {:#x}", m1.key());
    } else {
        ensure!(m1.key() == 0x1234, "fi_mr_key {:#x} != requested 0x1234", m1.key());
        // SAFETY: as above.
        match unsafe { Mr::reg(node.domain(), buf[4096..].as_ptr(), 4096, access, 0, 0x1234, 0) } {
            Err(e) if e.code() == -(ffi::FI_ENOKEY as i32) => {}
            Err(e) => bail!("registering a key already in use returned {e} (expected -FI_ENOKEY)"),
            Ok(_) => bail!("registering a key already in use succeeded (expected -FI_ENOKEY)"),
        }
        // SAFETY: as above.
        let m3 = unsafe { Mr::reg(node.domain(), buf[8192..].as_ptr(), 4096, access, 0, 0x1235, 0) }
            .ctx("fi_mr_reg (distinct key)")?;
        ensure!(m3.key() == 0x1235, "fi_mr_key {:#x} != requested 0x1235", m3.key());
        m1.close().ctx("fi_close(mr)")?;
        // The key is free again after close.
        // SAFETY: as above.
        let m4 = unsafe { Mr::reg(node.domain(), buf.as_ptr(), 4096, access, 0, 0x1234, 0) }
            .ctx("fi_mr_reg of a key freed by fi_close")?;
        ensure!(m4.key() == 0x1234, "re-registered key {:#x} != 0x1234", m4.key());
    }
    Ok(())
}
