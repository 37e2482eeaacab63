//! A registration of all of memory from address 0 (`fi_mr_reg(NULL, SIZE_MAX)`, key 0), as
//! OpenSHMEM's remote-virtual-addressing build makes it once in `shmem_init`: writes and reads
//! addressed by the target's own virtual addresses land where they name, every byte, and nothing
//! around them changes. Rank 0 initiates, rank 1 is the target.
//!
//! Such a registration checks no address against memory the target owns, so a peer's bad
//! address (`bad_addresses`: unmapped, read-only, inaccessible) must be refused with an error
//! completion, never fault the target.

use super::rma_util::{
    must, payload, try_refused, AKind, AccessOp, MrInfo, Peer, Refusal, Region, Spec, Target, ATOMIC, BASIC,
    COMPLETION, DELIVERY_COMPLETE, REMOTE_READ, REMOTE_WRITE, RMA, SCALABLE,
};
use super::{scn, Scenario};
use crate::fabric::{self, ffi, Mr};
use crate::harness::{pattern, FiCtx, Rank, TResult};
use crate::{bail, ensure};
use std::time::Duration;

pub fn scenarios() -> Vec<Scenario> {
    vec![
        scn(
            "rma/scalable/all_of_memory",
            2,
            40,
            run::<SCALABLE>,
            "fi_mr_reg(NULL, SIZE_MAX) at the target; fi_writemsg (FI_DELIVERY_COMPLETE) and fi_read of 8 B, 4 KiB and 256 KiB at its virtual addresses: every byte where it was aimed, the bytes around untouched",
        ),
        scn(
            "rma/basic/all_of_memory",
            2,
            40,
            run::<BASIC>,
            "fi_mr_reg(NULL, SIZE_MAX) at the target; fi_writemsg (FI_DELIVERY_COMPLETE) and fi_read of 8 B, 4 KiB and 256 KiB at its virtual addresses: every byte where it was aimed, the bytes around untouched",
        ),
        scn(
            "rma/scalable/all_of_memory_bad_addresses",
            2,
            60,
            bad_addresses::<SCALABLE>,
            "fi_mr_reg(NULL, SIZE_MAX) at the target; writes, reads and atomics of 8 B to 256 KiB at unmapped, read-only and PROT_NONE addresses: each an error completion, the target alive, its read-only bytes unchanged, then a write and a read that succeed",
        ),
        scn(
            "rma/basic/all_of_memory_bad_addresses",
            2,
            60,
            bad_addresses::<BASIC>,
            "fi_mr_reg(NULL, SIZE_MAX) at the target; writes, reads and atomics of 8 B to 256 KiB at unmapped, read-only and PROT_NONE addresses: each an error completion, the target alive, its read-only bytes unchanged, then a write and a read that succeed",
        ),
    ]
}

const TARGET: usize = 1;
/// Untouched bytes before and after the ones written.
const PAD: usize = 4096;
const SIZES: [usize; 3] = [8, 4096, 256 << 10];

fn run<const M: u8>(r: &mut Rank) -> TResult {
    let mut p = Peer::open(r, &Spec::new(RMA, M))?;
    p.exchange(r)?;
    let total: usize = SIZES.iter().sum();
    let back = pattern(0xA11, PAD + total + PAD);
    let data = pattern(0xDA7A, total);
    if r.rank == TARGET {
        let reg = p.alloc(back.len());
        p.region(reg).write(0, &back);
        // SAFETY: a registration names memory for peers to reach; NULL and SIZE_MAX name all of
        // ours, which outlives the MR (closed below).
        let mr = unsafe { Mr::reg(p.domain(), std::ptr::null(), usize::MAX, REMOTE_READ | REMOTE_WRITE, 0, 0, 0) }
            .ctx("fi_mr_reg(NULL, SIZE_MAX)")?;
        // Offsets from the registration's start and virtual addresses are the same here.
        let at = p.region(reg).ptr() as u64 + PAD as u64;
        p.share_mrs(r, &[MrInfo { key: mr.key(), addr: at }])?;
        p.barrier(r)?;
        let mut want = back.clone();
        want[PAD..PAD + total].copy_from_slice(&data);
        let now = p.region(reg).read(0, back.len());
        if let Some(off) = now.iter().zip(&want).position(|(a, b)| a != b) {
            bail!("byte {} from the first one aimed at differs", off as i64 - PAD as i64);
        }
        mr.close().ctx("fi_close of the registration of all memory")?;
        return p.barrier(r);
    }
    let all = p.share_mrs(r, &[])?;
    let m = all[TARGET][0];
    let mut off = 0;
    for len in SIZES {
        let what = format!("fi_writemsg of {len} B through the registration of all memory");
        let rma = [ffi::fi_rma_iov { addr: m.addr + off as u64, len, key: m.key }];
        let part = data[off..off + len].to_vec();
        let dest = p.addrs[TARGET];
        let id = match p.writemsg(&what, vec![part], dest, &rma, COMPLETION | DELIVERY_COMPLETE, 0)? {
            Ok(id) => id,
            Err(code) => bail!("{what}: refused with {}", fabric::errname(code)),
        };
        p.wait_ok(id)?;
        let what = format!("fi_read of {len} B through the registration of all memory");
        let target = super::rma_util::Target { dest, addr: m.addr + off as u64, key: m.key };
        let id = match p.read(&what, len, target)? {
            Ok(id) => id,
            Err(code) => bail!("{what}: refused with {}", fabric::errname(code)),
        };
        let done = p.wait_ok(id)?;
        ensure!(payload(&what, &done.bufs[0], len)? == &data[off..off + len], "{what}: other bytes than written");
        off += len;
    }
    p.barrier(r)?;
    p.barrier(r)
}

/// The target's memory for `bad_addresses`, one region of `AREAS` areas of `AREA` bytes:
/// read-write, read-only, then PROT_NONE. An address below `mmap_min_addr` (64 KiB on Linux)
/// stands for unmapped memory: nothing can be mapped there.
const AREA: usize = 256 << 10;
const AREAS: usize = 3;
const UNMAPPED: u64 = 0x1000;
const RW: usize = 0;
const RO: usize = 1;
const NONE: usize = 2;

/// What the initiator aims at: an area of the target's mapping (`Some`, with an offset into
/// it) or the unmapped address.
struct BadCase {
    what: &'static str,
    op: AccessOp,
    area: Option<usize>,
    off: usize,
}

fn bad_cases() -> Vec<BadCase> {
    let c = |what, op, area, off| BadCase { what, op, area, off };
    let (base, fetch, cswap) = (AKind::Base, AKind::Fetch, AKind::Compare);
    vec![
        c("write of 8 B at an unmapped address", AccessOp::Write(8), None, 0),
        c("write of 4 KiB at an unmapped address", AccessOp::Write(4096), None, 0),
        c("write of 256 KiB at an unmapped address", AccessOp::Write(AREA), None, 0),
        c("write of 8 B into read-only memory", AccessOp::Write(8), Some(RO), 64),
        c("write of 4 KiB into read-only memory", AccessOp::Write(4096), Some(RO), 0),
        c("write of 256 KiB into read-only memory", AccessOp::Write(AREA), Some(RO), 0),
        c("write of 8 KiB from writable into read-only memory", AccessOp::Write(8192), Some(RW), AREA - 4096),
        c("write of 64 KiB into PROT_NONE memory", AccessOp::Write(64 << 10), Some(NONE), 0),
        c("read of 8 B at an unmapped address", AccessOp::Read(8), None, 0),
        c("read of 8 B from PROT_NONE memory", AccessOp::Read(8), Some(NONE), 8),
        c("read of 4 KiB from PROT_NONE memory", AccessOp::Read(4096), Some(NONE), 0),
        c("read of 256 KiB from PROT_NONE memory", AccessOp::Read(AREA), Some(NONE), 0),
        c("read of 8 KiB from readable into PROT_NONE memory", AccessOp::Read(8192), Some(RO), AREA - 4096),
        c("atomic SUM at an unmapped address", AccessOp::Atomic(base, ffi::FI_SUM), None, 0),
        c("atomic SUM on read-only memory", AccessOp::Atomic(base, ffi::FI_SUM), Some(RO), 8),
        c("fetching atomic SUM on read-only memory", AccessOp::Atomic(fetch, ffi::FI_SUM), Some(RO), 16),
        c("fetching atomic READ of PROT_NONE memory", AccessOp::Atomic(fetch, ffi::FI_ATOMIC_READ), Some(NONE), 0),
        c("compare atomic CSWAP at an unmapped address", AccessOp::Atomic(cswap, ffi::FI_CSWAP), None, 8),
        c("compare atomic CSWAP on read-only memory", AccessOp::Atomic(cswap, ffi::FI_CSWAP), Some(RO), 24),
    ]
}

fn area_background(area: usize) -> Vec<u8> {
    pattern(0xBAD0 + area as u64, AREA)
}

fn bad_addresses<const M: u8>(r: &mut Rank) -> TResult {
    let mut p = Peer::open(r, &Spec::new(RMA | ATOMIC, M))?;
    p.exchange(r)?;
    if r.rank == TARGET {
        return bad_addresses_target(&mut p, r);
    }
    let all = p.share_mrs(r, &[])?;
    ensure!(all[TARGET].len() == 2, "the target shared {} MR entries", all[TARGET].len());
    let (key, mapping) = (all[TARGET][0].key, all[TARGET][1].addr);
    let dest = p.addrs[TARGET];
    let at = |area: Option<usize>, off: usize| Target {
        dest,
        addr: area.map_or(UNMAPPED, |a| mapping + (a * AREA) as u64) + off as u64,
        key,
    };
    p.barrier(r)?;
    let mut bad = Vec::new();
    let mut codes = Vec::new();
    for c in bad_cases() {
        r.pmi.step(c.what);
        match try_refused(&mut p, c.what, c.op, at(c.area, c.off), Duration::from_secs(5))? {
            Refusal::Refused(note) => codes.push(note),
            Refusal::Succeeded(m) => bad.push(m),
            Refusal::Stuck(m) => {
                bad.push(format!("{m} (is the target alive?)"));
                break;
            }
        }
    }
    r.pmi.step(&format!("note: {}", codes.join("; ")));
    if !bad.is_empty() {
        bail!("{} of {} cases failed: {}", bad.len(), bad_cases().len(), bad.join("; "));
    }
    // The target still serves good addresses: a write, then a read of the same bytes.
    let good = pattern(0x600D, 4096);
    let t = at(Some(RW), 4096);
    let rma = [ffi::fi_rma_iov { addr: t.addr, len: good.len(), key }];
    let id = must(
        "the write after the bad ones",
        p.writemsg("the write after the bad ones", vec![good.clone()], dest, &rma, COMPLETION | DELIVERY_COMPLETE, 0)?,
    )?;
    p.wait_ok(id)?;
    let id = must("the read after the bad ones", p.read("the read after the bad ones", good.len(), t)?)?;
    let done = p.wait_ok(id)?;
    ensure!(
        payload("the read after the bad ones", &done.bufs[0], good.len())? == &good[..],
        "the read after the bad ones: other bytes than written"
    );
    r.pmi.allgather_with("done", Some(&mut || p.progress().map(|_| ())))?;
    p.barrier(r)
}

fn bad_addresses_target(p: &mut Peer, r: &mut Rank) -> TResult {
    // Page-aligned, as `protect` needs.
    let reg = p.alloc(AREA * AREAS);
    for area in [RW, RO] {
        p.region(reg).write(area * AREA, &area_background(area));
    }
    protect(p.region(reg), RO * AREA, AREA, libc::PROT_READ)?;
    protect(p.region(reg), NONE * AREA, AREA, libc::PROT_NONE)?;
    // SAFETY: a registration names memory for peers to reach; NULL and SIZE_MAX name all of ours,
    // which outlives the MR (closed below).
    let mr = unsafe { Mr::reg(p.domain(), std::ptr::null(), usize::MAX, REMOTE_READ | REMOTE_WRITE, 0, 0, 0) }
        .ctx("fi_mr_reg(NULL, SIZE_MAX)")?;
    let base = p.region(reg).ptr() as u64;
    p.share_mrs(r, &[MrInfo { key: mr.key(), addr: 0 }, MrInfo { key: mr.key(), addr: base }])?;
    p.barrier(r)?;
    r.pmi.allgather_with("-", Some(&mut || p.progress().map(|_| ())))?;
    let ro = p.region(reg).read(RO * AREA, AREA);
    let changed = ro.iter().zip(area_background(RO)).position(|(a, b)| *a != b);
    p.barrier(r)?;
    mr.close().ctx("fi_close of the registration of all memory")?;
    protect(p.region(reg), RO * AREA, 2 * AREA, libc::PROT_READ | libc::PROT_WRITE)?;
    if let Some(off) = changed {
        bail!("byte {off} of the read-only area changed");
    }
    Ok(())
}

/// Give `len` bytes at `off` of `region`, whole pages, the protection `prot`.
fn protect(region: &Region, off: usize, len: usize, prot: libc::c_int) -> TResult {
    ensure!(
        off.is_multiple_of(4096) && len.is_multiple_of(4096) && off + len <= region.len(),
        "protect: not whole pages of the region"
    );
    // SAFETY: whole pages within a page-aligned region this rank allocated (checked above); only
    // their protection changes, and the scenario gives them back read-write before it ends.
    let rc = unsafe { libc::mprotect(region.ptr().add(off).cast(), len, prot) };
    ensure!(rc == 0, "mprotect of {len} B failed");
    Ok(())
}
