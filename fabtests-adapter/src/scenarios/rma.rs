//! RMA and atomics. They report "not supported" where getinfo offers no FI_RMA / FI_ATOMIC.

use super::{scn, setup, Scenario};
use crate::fabric::ffi;
use crate::fabric::Mr;
use crate::harness::{check_pattern, pattern, FiCtx, Node, NodeCfg, Rank, TResult};
use crate::{bail, ensure};

pub fn scenarios() -> Vec<Scenario> {
    vec![
        scn("rma/write_read", 2, 40, write_read, "fi_write, fi_read back, fi_writedata with remote CQ data"),
        scn("atomic/u64_ops", 2, 40, atomics, "fi_atomic SUM, fi_fetch_atomic, fi_compare_atomic on a u64"),
        scn("rma/mr_keys", 1, 20, mr_keys, "MR keys for remote access: requested keys, duplicates (-FI_ENOKEY)"),
    ]
}

fn rma_cfg(cap: u64) -> NodeCfg {
    NodeCfg {
        caps: (ffi::FI_MSG | ffi::FI_TAGGED) as u64 | cap,
        mr_mode: (ffi::FI_MR_VIRT_ADDR | ffi::FI_MR_ALLOCATED | ffi::FI_MR_PROV_KEY | ffi::FI_MR_ENDPOINT) as i32,
        ..Default::default()
    }
}

fn publish(r: &mut Rank, node: &mut crate::harness::Node, key: u64, addr: u64) -> TResult<(u64, u64)> {
    let all = r.pmi.allgather_with(&format!("{key:x}:{addr:x}"), Some(&mut node.progressor()))?;
    let other = &all[1 - r.rank];
    let (k, a) = other.split_once(':').ok_or_else(|| crate::harness::TestErr::Fail("bad key exchange".into()))?;
    let parse = |s: &str| u64::from_str_radix(s, 16).map_err(|_| crate::harness::TestErr::Fail("bad key".into()));
    Ok((parse(k)?, parse(a)?))
}

fn write_read(r: &mut Rank) -> TResult {
    let (mut node, addrs) = setup(r, &rma_cfg(ffi::FI_RMA as u64))?;
    let peer = addrs[1 - r.rank];
    let len = 1 << 20;
    let access = (ffi::FI_REMOTE_READ | ffi::FI_REMOTE_WRITE) as u64;
    let (idx, key, addr) = if r.rank == 1 { node.reg_target(&vec![0u8; len], access, 0xBEEF)? } else { (0, 0, 0) };
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
        let deadline = std::time::Instant::now() + node.timeout;
        loop {
            node.progress()?;
            let got = node.take_completions();
            if let Some(c) = got.iter().find(|c| c.flags & ffi::FI_REMOTE_CQ_DATA as u64 != 0) {
                ensure!(c.data == 0x77, "fi_writedata: remote CQ data {:#x} != 0x77", c.data);
                break;
            }
            if !got.is_empty() {
                bail!("unexpected completion at the RMA target: flags {:#x}", got[0].flags);
            }
            ensure!(std::time::Instant::now() < deadline, "timeout waiting for the fi_writedata completion");
        }
        check_pattern("target buffer after fi_writedata", 77, &node.target(idx)[..4096], 4096)?;
    }
    super::finish(r, &mut node)
}

fn atomics(r: &mut Rank) -> TResult {
    let (mut node, addrs) = setup(r, &rma_cfg(ffi::FI_ATOMIC as u64))?;
    let peer = addrs[1 - r.rank];
    let access = (ffi::FI_REMOTE_READ | ffi::FI_REMOTE_WRITE) as u64;
    let (_, key, addr) = if r.rank == 1 { node.reg_target(&0u64.to_ne_bytes(), access, 0xA7)? } else { (0, 0, 0) };
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
    let node = Node::open(&r.prov, &rma_cfg(ffi::FI_RMA as u64), r.timeout)?;
    let mr_mode = node.info.get().domain_attr().map_or(0, |d| d.mr_mode);
    let prov_key = mr_mode & ffi::FI_MR_PROV_KEY as i32 != 0;
    let buf = vec![0u8; 3 * 4096];
    let access = (ffi::FI_REMOTE_READ | ffi::FI_REMOTE_WRITE) as u64;
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
