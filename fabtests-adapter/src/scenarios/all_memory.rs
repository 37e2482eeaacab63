//! A registration of all of memory from address 0 (`fi_mr_reg(NULL, SIZE_MAX)`, key 0), as
//! OpenSHMEM's remote-virtual-addressing build makes it once in `shmem_init`: writes and reads
//! addressed by the target's own virtual addresses land where they name, every byte, and nothing
//! around them changes. Rank 0 initiates, rank 1 is the target.

use super::rma_util::{
    payload, MrInfo, Peer, Spec, BASIC, COMPLETION, DELIVERY_COMPLETE, REMOTE_READ, REMOTE_WRITE, RMA, SCALABLE,
};
use super::{scn, Scenario};
use crate::fabric::{self, ffi, Mr};
use crate::harness::{pattern, FiCtx, Rank, TResult};
use crate::{bail, ensure};

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
