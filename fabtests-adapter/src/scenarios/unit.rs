//! Single-process scenarios: getinfo, fabric/domain, EQ, AV, CQ, counters, MR, endpoint basics,
//! and a loopback between two endpoints of one process.

use super::{check_recv, check_send, scn, send2, wait2, Scenario, SIZES};
use crate::fabric::{self, ffi, Av, Cntr, Cq, Domain, Ep, Eq, Hints, InfoList, Mr, EAGAIN, ENODATA};
use crate::harness::{
    check_pattern, fi_ok, pattern, watchdog, FiCtx, Node, NodeCfg, Rank, Rx, TResult, TestErr, Tx, LEN_UNKNOWN,
};
use crate::{bail, ensure};
use std::time::{Duration, Instant};

pub fn scenarios() -> Vec<Scenario> {
    vec![
        scn(
            "unit/getinfo_nohints",
            1,
            20,
            getinfo_nohints,
            "fi_getinfo(NULL hints) lists the provider with sane attributes",
        ),
        scn("unit/getinfo_caps", 1, 20, getinfo_caps, "caps hints: offered caps are returned, others give -FI_ENODATA"),
        scn("unit/getinfo_ep_types", 1, 20, getinfo_ep_types, "ep_type hints RDM/DGRAM/MSG/UNSPEC"),
        scn(
            "unit/getinfo_threading",
            1,
            20,
            getinfo_threading,
            "threading hints are honoured (FI_THREAD_DOMAIN echoed)",
        ),
        scn("unit/getinfo_av_types", 1, 20, getinfo_av_types, "av_type hints MAP/TABLE/UNSPEC"),
        scn("unit/getinfo_mr_modes", 1, 20, getinfo_mr_modes, "mr_mode hints; returned mode within the hinted bits"),
        scn("unit/getinfo_node_service", 1, 20, getinfo_node_service, "node/service resolution as fabtests use it"),
        scn("unit/fabric_domain", 1, 20, fabric_domain, "fi_fabric, two domains, endpoints, close order"),
        scn("unit/eq", 1, 20, eq, "EQ open, write/read, empty read, sread timeout"),
        scn("unit/av_table", 1, 20, av_table, "FI_AV_TABLE insert (0..n), lookup, straddr, bad lookup"),
        scn("unit/av_map", 1, 20, av_map, "FI_AV_MAP insert, lookup, traffic through the fi_addr"),
        scn("unit/av_remove_reinsert", 1, 20, av_remove_reinsert, "remove, lookup after remove, re-insert, traffic"),
        scn(
            "unit/av_insert_twice",
            1,
            20,
            av_insert_twice,
            "a known address inserted again: same fi_addr, directed receives on it match, one remove keeps it",
        ),
        scn(
            "unit/av_insert_after_arrival",
            1,
            20,
            av_insert_after_arrival,
            "messages from a sender not yet in the AV, then its insert: receives directed at it take them",
        ),
        scn("unit/cq_formats", 1, 20, cq_formats, "CQ formats CONTEXT/MSG/DATA/TAGGED/UNSPEC and their fields"),
        scn("unit/cq_sizes", 1, 20, cq_sizes, "small CQ (size 4) with 16 completions loses none"),
        scn("unit/cq_readerr", 1, 20, cq_readerr, "truncation: -FI_EAVAIL, fi_cq_readerr FI_ETRUNC, olen"),
        scn(
            "unit/cq_read_order",
            1,
            20,
            cq_read_order,
            "arrivals read two at a time keep their order around an error entry, with their source",
        ),
        scn("unit/cq_sread", 1, 20, cq_sread, "fi_cq_sread timeout on empty CQ and wake-up on completion"),
        scn("unit/cq_signal", 1, 20, cq_signal, "fi_cq_signal wakes a thread blocked in fi_cq_sread"),
        scn(
            "unit/cq_sread_other_thread",
            1,
            20,
            cq_sread_other_thread,
            "fi_cq_sread in one thread wakes for send completions made by another (FI_THREAD_SAFE)",
        ),
        scn("unit/cntr_ops", 1, 20, cntr_ops, "counter read/add/set"),
        scn("unit/cntr_err", 1, 20, cntr_err, "counter adderr/seterr/readerr"),
        scn(
            "unit/cntr_wait",
            1,
            20,
            cntr_wait,
            "fi_cntr_wait threshold met, timeout, driven by traffic, and woken by fi_cntr_add from another thread",
        ),
        scn(
            "unit/poll_set",
            1,
            20,
            poll_set,
            "fi_poll over counters and a CQ: reports what moved since it last looked, nothing else",
        ),
        scn("unit/cntr_completion", 1, 20, cntr_completion, "send/recv counters count completions and errors"),
        scn("unit/mr_reg", 1, 20, mr_reg, "fi_mr_reg/regv/regattr, keys and descriptors"),
        scn("unit/ep_basics", 1, 20, ep_basics, "getname ETOOSMALL, setopt/getopt, two endpoints per domain"),
        scn("unit/loopback_sizes", 1, 40, loopback_sizes, "two endpoints in one process, every size 0..16 MiB"),
    ]
}

const CTX_MODES: u64 = ffi::FI_CONTEXT | ffi::FI_CONTEXT2;

fn hints(r: &Rank) -> Hints {
    let mut h = Hints::for_provider(&r.prov);
    h.mode(CTX_MODES);
    h
}

fn getinfo(h: &Hints, what: &str) -> TResult<InfoList> {
    fabric::getinfo(Some(h)).ctx(&format!("fi_getinfo({what})"))
}

/// Union of the caps the provider lists with no hints.
fn offered_caps(prov: &str) -> TResult<u64> {
    let list = fabric::getinfo(None).ctx("fi_getinfo(NULL)")?;
    Ok(list.iter().filter(|i| i.prov_name().as_deref() == Some(prov)).fold(0, |a, i| a | i.caps()))
}

fn offered_ep_types(prov: &str) -> TResult<Vec<ffi::fi_ep_type>> {
    let list = fabric::getinfo(None).ctx("fi_getinfo(NULL)")?;
    Ok(list.iter().filter(|i| i.prov_name().as_deref() == Some(prov)).filter_map(|i| i.ep_type()).collect())
}

fn getinfo_nohints(r: &mut Rank) -> TResult {
    let list = fabric::getinfo(None).ctx("fi_getinfo(NULL hints)")?;
    let mine: Vec<_> = list.iter().filter(|i| i.prov_name().as_deref() == Some(r.prov.as_str())).collect();
    ensure!(!mine.is_empty(), "provider {} absent from fi_getinfo(NULL) ({} entries)", r.prov, list.len());
    for (k, i) in mine.iter().enumerate() {
        let w = format!("entry {k}");
        let (Some(tx), Some(rx), Some(ep), Some(dom), Some(fab)) =
            (i.tx_attr(), i.rx_attr(), i.ep_attr(), i.domain_attr(), i.fabric_attr())
        else {
            bail!("{w}: an attribute struct is NULL");
        };
        ensure!(i.fabric_name().is_some(), "{w}: fabric_attr->name is NULL");
        ensure!(i.domain_name().is_some(), "{w}: domain_attr->name is NULL");
        ensure!(fab.prov_version != 0, "{w}: prov_version is 0");
        ensure!(i.caps() & (ffi::FI_MSG | ffi::FI_TAGGED) as u64 != 0, "{w}: neither FI_MSG nor FI_TAGGED in caps");
        ensure!(tx.size > 0 && rx.size > 0, "{w}: tx/rx size {} / {}", tx.size, rx.size);
        ensure!(tx.iov_limit > 0 && rx.iov_limit > 0, "{w}: iov_limit 0");
        ensure!(ep.max_msg_size > 0, "{w}: max_msg_size 0");
        ensure!(dom.threading != ffi::FI_THREAD_UNSPEC, "{w}: threading UNSPEC");
        ensure!(dom.data_progress != ffi::FI_PROGRESS_UNSPEC, "{w}: data_progress UNSPEC");
        ensure!(ep.type_ != ffi::FI_EP_UNSPEC, "{w}: ep_type UNSPEC");
        ensure!(tx.caps & !i.caps() == 0, "{w}: tx_attr caps {:#x} not within info caps {:#x}", tx.caps, i.caps());
        ensure!(rx.caps & !i.caps() == 0, "{w}: rx_attr caps {:#x} not within info caps {:#x}", rx.caps, i.caps());
    }
    ensure!(mine.iter().any(|i| i.ep_type() == Some(ffi::FI_EP_RDM)), "no FI_EP_RDM entry");
    Ok(())
}

/// The hint that asks for `cap`: a primary cap alone, a one-sided secondary with FI_RMA, any
/// other secondary with FI_MSG.
fn hint_for_cap(cap: u64) -> u64 {
    let primary = (ffi::FI_MSG | ffi::FI_TAGGED | ffi::FI_RMA | ffi::FI_ATOMIC) as u64;
    let one_sided =
        (ffi::FI_READ | ffi::FI_WRITE | ffi::FI_REMOTE_READ | ffi::FI_REMOTE_WRITE) as u64 | ffi::FI_RMA_EVENT;
    if cap & primary == cap {
        cap
    } else if cap & one_sided == cap {
        ffi::FI_RMA as u64 | cap
    } else {
        ffi::FI_MSG as u64 | cap
    }
}

/// rshm: every capability it promises (expected.rs, not its own answer) is offered with NULL
/// hints and granted when hinted; returns their union.
fn check_promised_caps(r: &Rank, offered: u64) -> TResult<u64> {
    let Some(promised) = crate::expected::promised_caps(&r.prov, offered) else { return Ok(0) };
    let missing: Vec<&str> = promised.iter().filter(|&&(c, _)| offered & c != c).map(|&(_, n)| n).collect();
    ensure!(
        missing.is_empty(),
        "{} does not offer capabilities it promises: {} (fi_getinfo(NULL) caps {offered:#x})",
        r.prov,
        missing.join(", ")
    );
    let mut all = 0;
    for &(cap, name) in &promised {
        let want = hint_for_cap(cap);
        let mut h = hints(r);
        h.caps(want);
        let list = match fabric::getinfo(Some(&h)) {
            Ok(l) => l,
            Err(e) => bail!("promised cap {name}: fi_getinfo(caps {want:#x}) returned {e}"),
        };
        ensure!(!list.is_empty(), "promised cap {name}: fi_getinfo(caps {want:#x}) returned no entry");
        for i in list.iter() {
            ensure!(i.caps() & want == want, "promised cap {name}: entry caps {:#x} lack {want:#x}", i.caps());
        }
        all |= cap;
    }
    Ok(all)
}

fn getinfo_caps(r: &mut Rank) -> TResult {
    let offered = offered_caps(&r.prov)?;
    // For rshm the promised caps count as offered whatever it answers (and are checked first).
    let offered = offered | check_promised_caps(r, offered)?;
    let candidates: &[(u64, &str)] = &[
        (ffi::FI_MSG as u64, "FI_MSG"),
        (ffi::FI_TAGGED as u64, "FI_TAGGED"),
        ((ffi::FI_MSG | ffi::FI_TAGGED) as u64, "FI_MSG|FI_TAGGED"),
        ((ffi::FI_MSG | ffi::FI_SEND | ffi::FI_RECV) as u64, "FI_MSG|FI_SEND|FI_RECV"),
        ((ffi::FI_MSG | ffi::FI_MULTI_RECV) as u64, "FI_MULTI_RECV"),
        (ffi::FI_TAGGED as u64 | ffi::FI_DIRECTED_RECV, "FI_DIRECTED_RECV"),
        (ffi::FI_MSG as u64 | ffi::FI_SOURCE, "FI_SOURCE"),
        (ffi::FI_MSG as u64 | ffi::FI_LOCAL_COMM, "FI_LOCAL_COMM"),
        (ffi::FI_MSG as u64 | ffi::FI_REMOTE_COMM, "FI_REMOTE_COMM"),
        (ffi::FI_RMA as u64, "FI_RMA"),
        (ffi::FI_ATOMIC as u64, "FI_ATOMIC"),
        (ffi::FI_MSG as u64 | ffi::FI_RMA_EVENT, "FI_RMA_EVENT"),
        (ffi::FI_MULTICAST as u64, "FI_MULTICAST"),
        (ffi::FI_COLLECTIVE as u64, "FI_COLLECTIVE"),
        (ffi::FI_MSG as u64 | ffi::FI_SHARED_AV, "FI_SHARED_AV"),
        (ffi::FI_MSG as u64 | ffi::FI_NAMED_RX_CTX, "FI_NAMED_RX_CTX"),
        (ffi::FI_MSG as u64 | ffi::FI_HMEM, "FI_HMEM"),
        (ffi::FI_MSG as u64 | ffi::FI_TRIGGER as u64, "FI_TRIGGER"),
    ];
    let mut offered_checked = 0;
    for &(caps, name) in candidates {
        let mut h = hints(r);
        h.caps(caps);
        let res = fabric::getinfo(Some(&h));
        if caps & !offered == 0 {
            let list = res.ctx(&format!("fi_getinfo(caps {name}) for an offered cap"))?;
            for i in list.iter() {
                ensure!(i.caps() & caps == caps, "caps {name}: entry caps {:#x} lack the hinted ones", i.caps());
                ensure!(
                    i.prov_name().as_deref() == Some(r.prov.as_str()),
                    "caps {name}: entry from provider {:?}",
                    i.prov_name()
                );
            }
            offered_checked += 1;
        } else {
            match res {
                Err(e) if e.code() == ENODATA => {}
                Err(e) => bail!("caps {name} (not offered): fi_getinfo returned {e}, expected -FI_ENODATA"),
                Ok(l) => bail!("caps {name} (not offered with NULL hints) returned {} entries", l.len()),
            }
        }
    }
    ensure!(offered_checked >= 3, "only {offered_checked} of the basic caps are offered");
    // Bits unused in 1.17 that 2.x gives new meanings: must be refused.
    for bit in [45u32, 46, 48] {
        let mut h = hints(r);
        h.caps(ffi::FI_MSG as u64 | (1u64 << bit));
        match fabric::getinfo(Some(&h)) {
            Err(e) if e.code() == ENODATA => {}
            Err(e) => bail!("caps bit {bit}: fi_getinfo returned {e}, expected -FI_ENODATA"),
            Ok(l) => bail!("caps bit {bit} (undefined in 1.17) accepted: {} entries", l.len()),
        }
    }
    // Domain capabilities in domain_attr->caps (fabtests getinfo_caps3): every combination is
    // either refused or returned in each entry's domain caps.
    let bits = [ffi::FI_LOCAL_COMM, ffi::FI_REMOTE_COMM, ffi::FI_SHARED_AV];
    for combo in 1u32..(1 << bits.len()) {
        let dcaps = bits.iter().enumerate().filter(|(i, _)| combo & (1 << i) != 0).fold(0, |a, (_, b)| a | b);
        let mut h = hints(r);
        h.domain_attr().caps = dcaps;
        match fabric::getinfo(Some(&h)) {
            Err(e) if e.code() == ENODATA => {}
            Err(e) => bail!("domain caps {dcaps:#x}: fi_getinfo returned {e}"),
            Ok(l) => {
                for i in l.iter() {
                    let got = i.domain_attr().map_or(0, |d| d.caps);
                    ensure!(got & dcaps == dcaps, "domain caps hint {dcaps:#x} answered with domain caps {got:#x}");
                }
            }
        }
    }
    Ok(())
}

fn getinfo_ep_types(r: &mut Rank) -> TResult {
    let offered = offered_ep_types(&r.prov)?;
    for (t, name) in [
        (ffi::FI_EP_RDM, "RDM"),
        (ffi::FI_EP_DGRAM, "DGRAM"),
        (ffi::FI_EP_MSG, "MSG"),
        (ffi::FI_EP_SOCK_STREAM, "SOCK_STREAM"),
    ] {
        let mut h = hints(r);
        h.caps(ffi::FI_MSG as u64);
        h.ep_attr().type_ = t;
        let res = fabric::getinfo(Some(&h));
        if offered.contains(&t) {
            let list = res.ctx(&format!("fi_getinfo(ep_type {name})"))?;
            for i in list.iter() {
                ensure!(i.ep_type() == Some(t), "ep_type {name}: entry with ep_type {:?}", i.ep_type());
            }
        } else {
            ensure!(t != ffi::FI_EP_RDM, "FI_EP_RDM not offered");
            match res {
                Err(e) if e.code() == ENODATA => {}
                Err(e) => bail!("ep_type {name} (not offered): fi_getinfo returned {e}, expected -FI_ENODATA"),
                Ok(l) => bail!("ep_type {name} (not offered) returned {} entries", l.len()),
            }
        }
    }
    let mut h = hints(r);
    h.caps(ffi::FI_MSG as u64);
    let list = getinfo(&h, "ep_type UNSPEC")?;
    ensure!(list.iter().any(|i| i.ep_type() == Some(ffi::FI_EP_RDM)), "ep_type UNSPEC: no RDM entry");
    Ok(())
}

fn getinfo_threading(r: &mut Rank) -> TResult {
    for (t, name) in [
        (ffi::FI_THREAD_SAFE, "SAFE"),
        (ffi::FI_THREAD_FID, "FID"),
        (ffi::FI_THREAD_DOMAIN, "DOMAIN"),
        (ffi::FI_THREAD_COMPLETION, "COMPLETION"),
        (ffi::FI_THREAD_ENDPOINT, "ENDPOINT"),
    ] {
        let mut h = hints(r);
        h.caps((ffi::FI_MSG | ffi::FI_TAGGED) as u64);
        h.domain_attr().threading = t;
        let list = getinfo(&h, &format!("threading {name}"))?;
        for i in list.iter() {
            let got = i.domain_attr().map_or(0, |d| d.threading);
            if t == ffi::FI_THREAD_DOMAIN {
                ensure!(got == t, "threading DOMAIN hinted, {got} returned (MPICH needs it echoed)");
            } else {
                ensure!(got == t || got == ffi::FI_THREAD_SAFE, "threading {name} hinted, {got} returned");
            }
        }
    }
    Ok(())
}

fn getinfo_av_types(r: &mut Rank) -> TResult {
    for (t, name) in [(ffi::FI_AV_MAP, "MAP"), (ffi::FI_AV_TABLE, "TABLE"), (ffi::FI_AV_UNSPEC, "UNSPEC")] {
        let mut h = hints(r);
        h.caps((ffi::FI_MSG | ffi::FI_TAGGED) as u64);
        h.domain_attr().av_type = t;
        let list = getinfo(&h, &format!("av_type {name}"))?;
        if t != ffi::FI_AV_UNSPEC {
            for i in list.iter() {
                let got = i.domain_attr().map_or(0, |d| d.av_type);
                ensure!(got == t || got == ffi::FI_AV_UNSPEC, "av_type {name} hinted, {got} returned");
            }
        }
    }
    Ok(())
}

fn getinfo_mr_modes(r: &mut Rank) -> TResult {
    let m = |x: u32| x as i32;
    let all = m(ffi::FI_MR_LOCAL
        | ffi::FI_MR_RAW
        | ffi::FI_MR_VIRT_ADDR
        | ffi::FI_MR_ALLOCATED
        | ffi::FI_MR_PROV_KEY
        | ffi::FI_MR_MMU_NOTIFY
        | ffi::FI_MR_RMA_EVENT
        | ffi::FI_MR_ENDPOINT
        | ffi::FI_MR_HMEM);
    let ompi = m(ffi::FI_MR_VIRT_ADDR | ffi::FI_MR_ALLOCATED | ffi::FI_MR_PROV_KEY | ffi::FI_MR_ENDPOINT);
    for (mode, name) in [
        (0, "none"),
        (m(ffi::FI_MR_LOCAL), "LOCAL"),
        (m(ffi::FI_MR_VIRT_ADDR | ffi::FI_MR_ALLOCATED | ffi::FI_MR_PROV_KEY), "VIRT_ADDR|ALLOCATED|PROV_KEY"),
        (ompi, "Open MPI's set"),
        (all, "all bits"),
    ] {
        let mut h = hints(r);
        h.caps((ffi::FI_MSG | ffi::FI_TAGGED) as u64);
        h.domain_attr().mr_mode = mode;
        let list = getinfo(&h, &format!("mr_mode {name}"))?;
        for i in list.iter() {
            let got = i.domain_attr().map_or(0, |d| d.mr_mode);
            ensure!(got & !mode == 0, "mr_mode {name} ({mode:#x}) hinted, {got:#x} returned (bits beyond the hint)");
        }
    }
    Ok(())
}

fn getinfo_node_service(r: &mut Rank) -> TResult {
    let mut h = hints(r);
    h.caps((ffi::FI_MSG | ffi::FI_TAGGED) as u64);
    h.ep_attr().type_ = ffi::FI_EP_RDM;
    // Server side of fabtests: local service with FI_SOURCE.
    let list = fabric::getinfo_full(fabric::API_VERSION, None, Some("9228"), ffi::FI_SOURCE, Some(&h))
        .ctx("fi_getinfo(NULL, \"9228\", FI_SOURCE)")?;
    let first = list.first().expect("non-empty");
    ensure!(!first.raw().src_addr.is_null() && first.raw().src_addrlen > 0, "server getinfo: no src_addr");
    // Client side: node + service of the server.
    let list = fabric::getinfo_full(fabric::API_VERSION, Some("127.0.0.1"), Some("9228"), 0, Some(&h))
        .ctx("fi_getinfo(\"127.0.0.1\", \"9228\", 0)")?;
    let first = list.first().expect("non-empty");
    ensure!(!first.raw().dest_addr.is_null() && first.raw().dest_addrlen > 0, "client getinfo: no dest_addr");
    // Regression (found only by upstream fabtests): hints that carry a source address of length
    // zero, as fabtests copies one from a first getinfo, mean "no address", not an error.
    let mut h = hints(r);
    h.caps((ffi::FI_MSG | ffi::FI_TAGGED) as u64);
    h.ep_attr().type_ = ffi::FI_EP_RDM;
    let mut empty = [0u8; 8];
    h.raw_mut().src_addr = empty.as_mut_ptr().cast();
    h.raw_mut().src_addrlen = 0;
    let list = fabric::getinfo_full(fabric::API_VERSION, Some("127.0.0.1"), Some("9228"), 0, Some(&h));
    // The hints do not own the buffer: detach it before they are freed.
    h.raw_mut().src_addr = std::ptr::null_mut();
    let list = list.ctx("fi_getinfo with a zero-length src_addr in the hints")?;
    ensure!(!list.is_empty(), "fi_getinfo with a zero-length src_addr in the hints: no entries");
    Ok(())
}

fn fabric_domain(r: &mut Rank) -> TResult {
    let mut h = hints(r);
    h.caps((ffi::FI_MSG | ffi::FI_TAGGED) as u64);
    h.ep_attr().type_ = ffi::FI_EP_RDM;
    let list = getinfo(&h, "RDM")?;
    let info = list.first().expect("non-empty").dup();
    let fab = fabric::open_fabric(&info).ctx("fi_fabric")?;
    ensure!(
        fab.api_version() == fabric::API_VERSION,
        "fabric->api_version {:#x} != requested {:#x}",
        fab.api_version(),
        fabric::API_VERSION
    );
    let d1 = Domain::open(&fab, &info).ctx("fi_domain (1st)")?;
    let d2 = Domain::open(&fab, &info).ctx("fi_domain (2nd on the same fabric)")?;
    let fab2 = fabric::open_fabric(&info).ctx("fi_fabric (2nd)")?;
    let d3 = Domain::open(&fab2, &info).ctx("fi_domain on the 2nd fabric")?;
    let mut names = Vec::new();
    let mut eps = Vec::new();
    for d in [&d1, &d2, &d3] {
        let mut aa = ffi::fi_av_attr { type_: ffi::FI_AV_TABLE, count: 4, ..Default::default() };
        let av = Av::open(d, &mut aa).ctx("fi_av_open")?;
        let mut ca = ffi::fi_cq_attr { format: ffi::FI_CQ_FORMAT_TAGGED, ..Default::default() };
        let cq = Cq::open(d, &mut ca).ctx("fi_cq_open")?;
        let ep = Ep::open(d, &info).ctx("fi_endpoint")?;
        fi_ok("fi_ep_bind(av)", ep.bind(av.fid(), 0))?;
        fi_ok("fi_ep_bind(cq)", ep.bind(cq.fid(), (ffi::FI_TRANSMIT | ffi::FI_RECV) as u64))?;
        fi_ok("fi_enable", ep.enable())?;
        names.push(ep.getname().ctx("fi_getname")?);
        eps.push((ep, av, cq));
    }
    ensure!(names[0] != names[1] && names[1] != names[2] && names[0] != names[2], "endpoints share an address");
    for (ep, av, cq) in eps {
        ep.close().ctx("fi_close(ep)")?;
        av.close().ctx("fi_close(av)")?;
        cq.close().ctx("fi_close(cq)")?;
    }
    d1.close().ctx("fi_close(domain 1)")?;
    d2.close().ctx("fi_close(domain 2)")?;
    d3.close().ctx("fi_close(domain 3)")?;
    fab2.close().ctx("fi_close(fabric 2)")?;
    fab.close().ctx("fi_close(fabric)")?;
    Ok(())
}

fn eq(r: &mut Rank) -> TResult {
    let mut h = hints(r);
    h.caps((ffi::FI_MSG | ffi::FI_TAGGED) as u64);
    let list = getinfo(&h, "")?;
    let info = list.first().expect("non-empty").dup();
    let fab = fabric::open_fabric(&info).ctx("fi_fabric")?;
    let mut attr = ffi::fi_eq_attr { size: 16, wait_obj: ffi::FI_WAIT_NONE, ..Default::default() };
    let q = Eq::open(&fab, &mut attr).nos("fi_eq_open(FI_WAIT_NONE)")?;
    let mut ev = 0u32;
    let mut buf = [0u8; 64];
    let ret = q.read(&mut ev, &mut buf, 0);
    ensure!(ret == EAGAIN as isize, "fi_eq_read on an empty EQ returned {}", fabric::errname(ret as i32));
    let ent = ffi::fi_eq_entry { fid: fab.fid(), context: 0x1234 as *mut _, data: 42 };
    let sz = size_of::<ffi::fi_eq_entry>();
    // SAFETY: fi_eq_entry is plain data; viewing it as bytes for the copy-in is sound.
    let bytes = unsafe { std::slice::from_raw_parts((&ent as *const ffi::fi_eq_entry).cast::<u8>(), sz) };
    let ret = q.write(ffi::FI_NOTIFY, bytes, 0);
    if ret == fabric::ENOSYS as isize {
        return Err(TestErr::Nos(fabric::ENOSYS, "fi_eq_write returned -FI_ENOSYS".into()));
    }
    ensure!(ret == sz as isize, "fi_eq_write returned {ret}, expected {sz}");
    let ret = q.read(&mut ev, &mut buf, 0);
    ensure!(ret == sz as isize, "fi_eq_read returned {}, expected {sz}", fabric::errname(ret as i32));
    ensure!(ev == ffi::FI_NOTIFY, "event {ev} != FI_NOTIFY");
    ensure!(buf[..sz] == *bytes, "EQ entry read back differs from the one written");
    q.close().ctx("fi_close(eq)")?;
    // A waitable EQ: sread times out on an empty queue.
    let mut attr = ffi::fi_eq_attr { size: 16, wait_obj: ffi::FI_WAIT_UNSPEC, ..Default::default() };
    let q = Eq::open(&fab, &mut attr).nos("fi_eq_open(FI_WAIT_UNSPEC)")?;
    let t = Instant::now();
    let wd = watchdog(Duration::from_secs(3), "fi_eq_sread(200 ms) on an empty EQ");
    let ret = q.sread(&mut ev, &mut buf, 200, 0);
    drop(wd);
    let el = t.elapsed();
    ensure!(
        ret == EAGAIN as isize || ret == -(ffi::FI_ETIMEDOUT as isize),
        "fi_eq_sread(200 ms) on an empty EQ returned {}",
        fabric::errname(ret as i32)
    );
    ensure!(el >= Duration::from_millis(150) && el < Duration::from_secs(3), "fi_eq_sread(200 ms) took {el:?}");
    q.close().ctx("fi_close(eq)")?;
    fab.close().ctx("fi_close(fabric)")?;
    Ok(())
}

fn nodes(r: &Rank, n: usize, cfg: &NodeCfg) -> TResult<Vec<Node>> {
    (0..n).map(|_| Node::open(&r.prov, cfg, r.timeout)).collect()
}

/// One message a -> b through fi_addr `dest` (in a's AV), checked at b.
fn one_message(a: &mut Node, b: &mut Node, dest: u64, len: usize, s: u64) -> TResult {
    let rid = b.recv(len, fabric::FI_ADDR_UNSPEC, &Rx::default())?;
    let sid = send2(a, b, &pattern(s, len), dest, &Tx::default())?;
    let c = wait2(b, a, rid)?;
    check_recv(&c, "recv", len, false)?;
    check_pattern("recv", s, &c.payload, len)?;
    let c = wait2(a, b, sid)?;
    check_send(&c, "send")
}

fn av_common(r: &mut Rank, av_type: ffi::fi_av_type) -> TResult {
    let cfg = NodeCfg { av_type, ..Default::default() };
    let mut ns = nodes(r, 4, &cfg)?;
    let names: Vec<Vec<u8>> = ns.iter().map(|n| n.name.clone()).collect();
    let mut fas = Vec::new();
    for (k, name) in names.iter().enumerate() {
        let (ret, fa) = ns[0].av().insert(name, 0);
        ensure!(ret == 1, "fi_av_insert of address {k} returned {}", fabric::errname(ret));
        ensure!(fa != fabric::FI_ADDR_NOTAVAIL, "fi_av_insert of address {k}: FI_ADDR_NOTAVAIL");
        if av_type == ffi::FI_AV_TABLE {
            ensure!(fa == k as u64, "FI_AV_TABLE: address {k} got fi_addr {fa}");
        }
        fas.push(fa);
    }
    let mut sorted = fas.clone();
    sorted.sort_unstable();
    sorted.dedup();
    ensure!(sorted.len() == fas.len(), "fi_addrs not distinct: {fas:?}");
    for (k, &fa) in fas.iter().enumerate() {
        let mut buf = vec![0u8; 512];
        let (ret, len) = ns[0].av().lookup(fa, &mut buf);
        fi_ok(&format!("fi_av_lookup({fa})"), ret)?;
        ensure!(len == names[k].len(), "fi_av_lookup({fa}) reported length {len}, address has {}", names[k].len());
        ensure!(buf[..len] == names[k][..], "fi_av_lookup({fa}) returned a different address");
        let (s, _) = ns[0].av().straddr(&names[k]);
        ensure!(s.is_some_and(|s| !s.is_empty()), "fi_av_straddr returned NULL or an empty string");
    }
    // Lookup with a buffer too small: the needed length comes back.
    let mut small = [0u8; 1];
    let (ret, len) = ns[0].av().lookup(fas[1], &mut small);
    ensure!(
        ret == 0 || ret == -(ffi::FI_ETOOSMALL as i32),
        "fi_av_lookup(1-byte buffer) returned {}",
        fabric::errname(ret)
    );
    ensure!(len == names[1].len(), "fi_av_lookup(1-byte buffer) reported length {len}, want {}", names[1].len());
    // Traffic through the inserted fi_addrs (node 0 -> nodes 1..3).
    let (a, rest) = ns.split_at_mut(1);
    for (k, b) in rest.iter_mut().enumerate() {
        one_message(&mut a[0], b, fas[k + 1], 100 + k, k as u64)?;
    }
    if av_type == ffi::FI_AV_TABLE {
        // Last: the C shm provider crashes here.
        crate::pmi::step("fi_av_lookup of never-inserted fi_addr 1000");
        let mut buf = vec![0u8; 512];
        let (ret, _) = ns[0].av().lookup(1000, &mut buf);
        ensure!(ret < 0, "fi_av_lookup of never-inserted fi_addr 1000 returned {ret}");
    }
    Ok(())
}

fn av_table(r: &mut Rank) -> TResult {
    av_common(r, ffi::FI_AV_TABLE)
}

fn av_map(r: &mut Rank) -> TResult {
    av_common(r, ffi::FI_AV_MAP)
}

fn av_remove_reinsert(r: &mut Rank) -> TResult {
    let mut ns = nodes(r, 3, &NodeCfg::default())?;
    let names: Vec<Vec<u8>> = ns.iter().map(|n| n.name.clone()).collect();
    let fas: Vec<u64> = names.iter().map(|nm| ns[0].insert(nm)).collect::<TResult<_>>()?;
    let (a, rest) = ns.split_at_mut(1);
    one_message(&mut a[0], &mut rest[0], fas[1], 64, 1)?;
    let mut rm = [fas[1]];
    fi_ok("fi_av_remove", a[0].av().remove(&mut rm, 0))?;
    let mut buf = vec![0u8; 512];
    let (ret, _) = a[0].av().lookup(fas[1], &mut buf);
    ensure!(ret < 0, "fi_av_lookup after fi_av_remove returned {ret} (expected an error)");
    let (ret, len) = a[0].av().lookup(fas[2], &mut buf);
    fi_ok("fi_av_lookup of a remaining address", ret)?;
    ensure!(buf[..len] == names[2][..], "fi_av_remove disturbed another entry");
    let fa1 = a[0].insert(&names[1])?;
    let (ret, len) = a[0].av().lookup(fa1, &mut buf);
    fi_ok("fi_av_lookup after re-insert", ret)?;
    ensure!(buf[..len] == names[1][..], "re-inserted address reads back differently");
    one_message(&mut a[0], &mut rest[0], fa1, 5000, 2)?;
    one_message(&mut a[0], &mut rest[1], fas[2], 64, 3)?;
    // Remove and re-insert several times in a row.
    let mut cur = fa1;
    for k in 0..5 {
        let mut rm = [cur];
        fi_ok("fi_av_remove", a[0].av().remove(&mut rm, 0))?;
        cur = a[0].insert(&names[1])?;
        one_message(&mut a[0], &mut rest[0], cur, 64 + k, 10 + k as u64)?;
    }
    Ok(())
}

/// A peer's address inserted a second time, as MPICH's MPI_Comm_accept/connect does for a peer
/// already in MPI_COMM_WORLD: it posts receives directed at the fi_addr it got back and removes
/// that fi_addr when done. libfabric's own AV (every provider built on it, the C shm among
/// them) returns the fi_addr the address already holds and counts the insert; the entry goes
/// with its last removal.
fn av_insert_twice(r: &mut Rank) -> TResult {
    let cfg = NodeCfg::caps((ffi::FI_MSG | ffi::FI_TAGGED) as u64 | ffi::FI_DIRECTED_RECV | ffi::FI_SOURCE);
    let mut ns = nodes(r, 2, &cfg)?;
    let (a_name, b_name) = (ns[0].name.clone(), ns[1].name.clone());
    let (a, b) = ns.split_at_mut(1);
    let (a, b) = (&mut a[0], &mut b[0]);
    let a_at_b = b.insert(&a_name)?;
    let first = a.insert(&b_name)?;
    one_message(b, a, a_at_b, 64, 1)?;
    let again = a.insert(&b_name)?;
    ensure!(again == first, "the address inserted again got fi_addr {again}, it holds {first}");
    // A receive directed at the second insert's fi_addr takes the peer's message.
    let directed = |a: &mut Node, b: &mut Node, src: u64, len: usize, s: u64| -> TResult {
        let rid = a.recv(len, src, &Rx::default())?;
        let sid = send2(b, a, &pattern(s, len), a_at_b, &Tx::default())?;
        let c = wait2(a, b, rid)?;
        check_recv(&c, "directed recv", len, false)?;
        check_pattern("directed recv", s, &c.payload, len)?;
        ensure!(c.src == src, "directed recv from fi_addr {src}: FI_SOURCE {}", c.src);
        check_send(&wait2(b, a, sid)?, "send")
    };
    directed(a, b, again, 100, 2)?;
    // One removal: the first insert's entry stays, and traffic through it both ways.
    fi_ok("fi_av_remove of the second insert", a.av().remove(&mut [again], 0))?;
    let mut buf = vec![0u8; 512];
    let (ret, len) = a.av().lookup(first, &mut buf);
    fi_ok("fi_av_lookup after removing the second insert", ret)?;
    ensure!(buf[..len] == b_name[..], "fi_av_lookup after one removal returned a different address");
    directed(a, b, first, 5000, 3)?;
    one_message(a, b, first, 64, 4)?;
    // The last removal frees it.
    fi_ok("fi_av_remove of the first insert", a.av().remove(&mut [first], 0))?;
    let (ret, _) = a.av().lookup(first, &mut buf);
    ensure!(ret < 0, "fi_av_lookup after both removals returned {ret} (expected an error)");
    Ok(())
}

/// Messages that arrive from a peer before the receiver inserts its address, as Open MPI's
/// MPI_Comm_spawn children hear from their parent: held with no fi_addr, they must match the
/// receives directed at the fi_addr the later insert gives the sender (and report it as their
/// source). Sizes: an inline message, one through an inject buffer, one of 64 KiB.
fn av_insert_after_arrival(r: &mut Rank) -> TResult {
    let cfg = NodeCfg::caps((ffi::FI_MSG | ffi::FI_TAGGED) as u64 | ffi::FI_DIRECTED_RECV | ffi::FI_SOURCE);
    let mut ns = nodes(r, 2, &cfg)?;
    let a_name = ns[0].name.clone();
    let b_name = ns[1].name.clone();
    let (a, b) = ns.split_at_mut(1);
    let (a, b) = (&mut a[0], &mut b[0]);
    let a_at_b = b.insert(&a_name)?;
    let sizes = [8, 3000, 64 << 10];
    let mut sends = Vec::new();
    for (k, &len) in sizes.iter().enumerate() {
        sends.push(send2(b, a, &pattern(20 + k as u64, len), a_at_b, &Tx::default())?);
    }
    // Let them arrive (and be held) while `a` knows no fi_addr for `b`.
    a.progress_for(Duration::from_millis(50))?;
    b.progress()?;
    let b_at_a = a.insert(&b_name)?;
    for (k, &len) in sizes.iter().enumerate() {
        let rid = a.recv(len, b_at_a, &Rx::default())?;
        let c = wait2(a, b, rid)?;
        let what = format!("directed recv of {len} B sent before the insert");
        check_recv(&c, &what, len, false)?;
        check_pattern(&what, 20 + k as u64, &c.payload, len)?;
        ensure!(c.src == b_at_a, "{what}: FI_SOURCE {} (the sender's fi_addr is {b_at_a})", c.src);
    }
    for id in sends {
        check_send(&wait2(b, a, id)?, "send before the insert")?;
    }
    Ok(())
}

fn cq_formats(r: &mut Rank) -> TResult {
    for (fmt, name) in [
        (ffi::FI_CQ_FORMAT_CONTEXT, "CONTEXT"),
        (ffi::FI_CQ_FORMAT_MSG, "MSG"),
        (ffi::FI_CQ_FORMAT_DATA, "DATA"),
        (ffi::FI_CQ_FORMAT_TAGGED, "TAGGED"),
        (ffi::FI_CQ_FORMAT_UNSPEC, "UNSPEC"),
    ] {
        let mut a = Node::open(&r.prov, &NodeCfg::default(), r.timeout)?;
        let cfg = NodeCfg { cq_format: fmt, ..Default::default() };
        let mut b = Node::open(&r.prov, &cfg, r.timeout).map_err(|e| match e {
            TestErr::Fail(m) => TestErr::Fail(format!("CQ format {name}: {m}")),
            e => e,
        })?;
        let dest = a.insert(&b.name.clone())?;
        let len = 300;
        let rid = b.recv(len, fabric::FI_ADDR_UNSPEC, &Rx::tagged(0x77, 0))?;
        let tx = Tx { tag: Some(0x77), data: Some(0xDA7A), ..Default::default() };
        let sid = send2(&mut a, &mut b, &pattern(5, len), dest, &tx)?;
        let c = wait2(&mut b, &mut a, rid).map_err(|e| match e {
            TestErr::Fail(m) => TestErr::Fail(format!("CQ format {name}: {m}")),
            e => e,
        })?;
        c.ok(&format!("CQ format {name}"))?;
        check_pattern(&format!("CQ format {name}"), 5, &c.payload, len)?;
        if fmt != ffi::FI_CQ_FORMAT_CONTEXT && fmt != ffi::FI_CQ_FORMAT_UNSPEC {
            ensure!(c.len == len, "CQ format {name}: len {} != {len}", c.len);
            ensure!(
                c.flags & (ffi::FI_RECV | ffi::FI_TAGGED) as u64 == (ffi::FI_RECV | ffi::FI_TAGGED) as u64,
                "CQ format {name}: flags {:#x} lack FI_RECV|FI_TAGGED",
                c.flags
            );
        } else {
            ensure!(c.len == LEN_UNKNOWN, "internal: context format with a length");
        }
        if fmt == ffi::FI_CQ_FORMAT_DATA || fmt == ffi::FI_CQ_FORMAT_TAGGED {
            ensure!(c.flags & ffi::FI_REMOTE_CQ_DATA as u64 != 0, "CQ format {name}: FI_REMOTE_CQ_DATA flag missing");
            ensure!(c.data == 0xDA7A, "CQ format {name}: data {:#x} != 0xda7a", c.data);
        }
        if fmt == ffi::FI_CQ_FORMAT_TAGGED {
            ensure!(c.tag == 0x77, "CQ format {name}: tag {:#x} != 0x77", c.tag);
        }
        wait2(&mut a, &mut b, sid)?.ok("send")?;
    }
    Ok(())
}

fn cq_sizes(r: &mut Rank) -> TResult {
    for size in [1usize, 16384] {
        let cfg = NodeCfg { cq_size: size, ..Default::default() };
        Node::open(&r.prov, &cfg, r.timeout).map_err(|e| match e {
            TestErr::Fail(m) => TestErr::Fail(format!("CQ size {size}: {m}")),
            e => e,
        })?;
    }
    let mut a = Node::open(&r.prov, &NodeCfg::default(), r.timeout)?;
    let cfg = NodeCfg { cq_size: 4, ..Default::default() };
    let mut b = Node::open(&r.prov, &cfg, r.timeout)?;
    let dest = a.insert(&b.name.clone())?;
    let n = 16;
    let rids: Vec<u64> = (0..n).map(|_| b.recv(64, fabric::FI_ADDR_UNSPEC, &Rx::default())).collect::<TResult<_>>()?;
    // Send everything before b reads its CQ at all.
    let sids: Vec<u64> =
        (0..n).map(|i| send2(&mut a, &mut b, &pattern(i as u64, 64), dest, &Tx::default())).collect::<TResult<_>>()?;
    for &s in &sids {
        wait2(&mut a, &mut b, s)?.ok("send")?;
    }
    for (i, &id) in rids.iter().enumerate() {
        let c = wait2(&mut b, &mut a, id)?;
        check_recv(&c, &format!("recv {i} through a CQ of size 4"), 64, false)?;
        check_pattern(&format!("recv {i}"), i as u64, &c.payload, 64)?;
    }
    Ok(())
}

fn cq_readerr(r: &mut Rank) -> TResult {
    let mut a = Node::open(&r.prov, &NodeCfg::default(), r.timeout)?;
    let mut b = Node::open(&r.prov, &NodeCfg::default(), r.timeout)?;
    let dest = a.insert(&b.name.clone())?;
    // 64 B (inline/inject sizes) and 70000 B (the large-message protocol) into 8 bytes.
    for (tagged, sent) in [(false, 64usize), (true, 64), (false, 70000), (true, 70000)] {
        let what = format!("{} {sent} B into 8", if tagged { "tagged" } else { "msg" });
        let rx = if tagged { Rx::tagged(9, 0) } else { Rx::default() };
        let tx = if tagged { Tx::tagged(9) } else { Tx::default() };
        let rid = b.recv(8, fabric::FI_ADDR_UNSPEC, &rx)?;
        let ctx = b.ctx_ptr(rid).expect("pending");
        let sid = send2(&mut a, &mut b, &pattern(7, sent), dest, &tx)?;
        // Read b's CQ directly: the first non-EAGAIN answer must be -FI_EAVAIL.
        let deadline = Instant::now() + r.timeout;
        let ret = loop {
            let mut e = [ffi::fi_cq_tagged_entry::default(); 1];
            let ret = b.tx_cq().read(&mut e);
            if ret != EAGAIN as isize {
                break ret;
            }
            a.progress()?;
            ensure!(Instant::now() < deadline, "{what}: timeout waiting for the truncated receive");
        };
        ensure!(
            ret == fabric::EAVAIL as isize,
            "{what}: fi_cq_read of a truncated receive returned {} (expected -FI_EAVAIL)",
            fabric::errname(ret as i32)
        );
        let mut e = ffi::fi_cq_err_entry::default();
        let ret = b.tx_cq().readerr(&mut e, 0);
        ensure!(ret == 1, "{what}: fi_cq_readerr returned {}", fabric::errname(ret as i32));
        ensure!(
            e.err == ffi::FI_ETRUNC as i32,
            "{what}: error entry err = {} (want FI_ETRUNC, a positive code)",
            fabric::errname(e.err)
        );
        ensure!(e.op_context == ctx, "{what}: error entry op_context does not match the receive");
        ensure!(e.olen == sent - 8, "{what}: olen {} != {}", e.olen, sent - 8);
        ensure!(e.flags & ffi::FI_RECV as u64 != 0, "{what}: error entry flags {:#x} lack FI_RECV", e.flags);
        let mut x = [ffi::fi_cq_tagged_entry::default(); 1];
        let ret = b.tx_cq().read(&mut x);
        ensure!(ret == EAGAIN as isize, "{what}: fi_cq_read after readerr returned {ret}");
        // Truncation is the receiver's error; the send itself succeeded.
        let c = wait2(&mut a, &mut b, sid)?;
        ensure!(
            c.err == 0,
            "{what}: the sender's completion is an error ({}) although truncation is reported at the receiver",
            fabric::errname(c.err)
        );
    }
    Ok(())
}

/// Seven messages arrive before the receiver reads its CQ at all, so that one progress pass can
/// find them all; the fourth lands in a receive too small for it (FI_ETRUNC). The receiver reads
/// two entries at a time with fi_cq_readfrom, and after its first read three more messages
/// arrive, behind entries still queued. The completions come in the order the receives were
/// posted, the error entry in its place (-FI_EAVAIL, then fi_cq_readerr), each with the sender's
/// address and its bytes. (rshm writes the entries a read's own pass completes straight into the
/// caller's array while nothing is queued before them, and queues the rest: this holds the two
/// together.)
fn cq_read_order(r: &mut Rank) -> TResult {
    const FIRST: usize = 7;
    const N: usize = 10;
    const SMALL: usize = 3;
    let cfg = NodeCfg::caps((ffi::FI_MSG | ffi::FI_TAGGED) as u64 | ffi::FI_SOURCE);
    let mut a = Node::open(&r.prov, &cfg, r.timeout)?;
    let mut b = Node::open(&r.prov, &cfg, r.timeout)?;
    let dest = a.insert(&b.name.clone())?;
    let a_in_b = b.insert(&a.name.clone())?;
    // A first message with both sides progressing, so that whatever a first send to a peer
    // needs from it is done.
    let rid = b.recv(64, fabric::FI_ADDR_UNSPEC, &Rx::default())?;
    let sid = send2(&mut a, &mut b, &pattern(100, 64), dest, &Tx::default())?;
    wait2(&mut a, &mut b, sid)?.ok("first send")?;
    check_recv(&wait2(&mut b, &mut a, rid)?, "first receive", 64, false)?;

    let mut rids = Vec::new();
    let mut ctxs = Vec::new();
    for i in 0..N {
        let id = b.recv(if i == SMALL { 8 } else { 64 }, fabric::FI_ADDR_UNSPEC, &Rx::default())?;
        ctxs.push(b.ctx_ptr(id).expect("pending"));
        rids.push(id);
    }
    let deadline = Instant::now() + r.timeout;
    // Messages `range` sent, with only the sender progressing until they completed.
    let send_only = |a: &mut Node, range: std::ops::Range<usize>| -> TResult {
        let sids: Vec<u64> =
            range.map(|i| a.send(&pattern(i as u64, 64), dest, &Tx::default())).collect::<TResult<_>>()?;
        for s in sids {
            while a.poll_op(s)?.is_none() {
                ensure!(Instant::now() < deadline, "timeout waiting for the sends (the receiver not progressing)");
            }
        }
        Ok(())
    };
    send_only(&mut a, 0..FIRST)?;
    // Which receive an entry's context names.
    let receive_of = |ctx: *mut std::ffi::c_void| ctxs.iter().position(|&c| c == ctx);
    let mut order = Vec::new();
    while order.len() < N {
        let mut e = [ffi::fi_cq_tagged_entry::default(); 2];
        let mut src = [fabric::FI_ADDR_NOTAVAIL; 2];
        let ret = b.tx_cq().readfrom(&mut e, &mut src);
        if ret > 0 {
            ensure!(ret <= 2, "fi_cq_readfrom of 2 entries returned {ret}");
            for k in 0..ret as usize {
                let Some(i) = receive_of(e[k].op_context) else {
                    bail!("an entry with an unknown context after receives {order:?}")
                };
                ensure!(i != SMALL, "the truncated receive came as a successful entry");
                ensure!(e[k].len == 64, "receive {i}: len {}", e[k].len);
                ensure!(e[k].flags & ffi::FI_RECV as u64 != 0, "receive {i}: flags {:#x} lack FI_RECV", e[k].flags);
                ensure!(src[k] == a_in_b, "receive {i}: source {} != the sender's fi_addr {a_in_b}", src[k]);
                let got = b.peek_buf(rids[i]).expect("pending");
                check_pattern(&format!("receive {i}"), i as u64, &got, 64)?;
                order.push(i);
            }
        } else if ret == fabric::EAVAIL as isize {
            let mut err = ffi::fi_cq_err_entry::default();
            let ret = b.tx_cq().readerr(&mut err, 0);
            ensure!(ret == 1, "fi_cq_readerr returned {}", fabric::errname(ret as i32));
            ensure!(err.err == ffi::FI_ETRUNC as i32, "error entry err = {}", fabric::errname(err.err));
            let Some(i) = receive_of(err.op_context) else {
                bail!("an error entry with an unknown context after receives {order:?}")
            };
            order.push(i);
        } else {
            ensure!(ret == EAGAIN as isize, "fi_cq_readfrom returned {}", fabric::errname(ret as i32));
            ensure!(Instant::now() < deadline, "timeout: receives {order:?} of {N} read");
        }
        if ret > 0 && order.len() <= 2 {
            send_only(&mut a, FIRST..N)?;
        }
    }
    ensure!(order == (0..N).collect::<Vec<_>>(), "completions read in the order {order:?}");
    let mut e = [ffi::fi_cq_tagged_entry::default(); 2];
    let ret = b.tx_cq().read(&mut e);
    ensure!(ret == EAGAIN as isize, "fi_cq_read after every receive returned {ret}");
    Ok(())
}

fn cq_sread(r: &mut Rank) -> TResult {
    let mut a = Node::open(&r.prov, &NodeCfg::default(), r.timeout)?;
    {
        let mut attr =
            ffi::fi_cq_attr { format: ffi::FI_CQ_FORMAT_TAGGED, wait_obj: ffi::FI_WAIT_UNSPEC, ..Default::default() };
        Cq::open(a.domain(), &mut attr).nos("fi_cq_open(FI_WAIT_UNSPEC)")?;
    }
    let cfg = NodeCfg { cq_wait: ffi::FI_WAIT_UNSPEC, ..Default::default() };
    let mut b = Node::open(&r.prov, &cfg, r.timeout)?;
    let dest = a.insert(&b.name.clone())?;
    let mut e = [ffi::fi_cq_tagged_entry::default(); 1];
    let t = Instant::now();
    let wd = watchdog(Duration::from_secs(3), "fi_cq_sread(300 ms) on an empty CQ");
    let ret = b.tx_cq().sread(&mut e, 300);
    drop(wd);
    let el = t.elapsed();
    ensure!(
        ret == EAGAIN as isize || ret == -(ffi::FI_ETIMEDOUT as isize),
        "fi_cq_sread(300 ms) on an empty CQ returned {}",
        fabric::errname(ret as i32)
    );
    ensure!(
        el >= Duration::from_millis(250) && el < Duration::from_secs(3),
        "fi_cq_sread(300 ms) returned after {el:?}"
    );
    let rid = b.recv(64, fabric::FI_ADDR_UNSPEC, &Rx::default())?;
    let ctx = b.ctx_ptr(rid).expect("pending");
    let sid = send2(&mut a, &mut b, &pattern(1, 64), dest, &Tx::default())?;
    a.progress()?;
    let t = Instant::now();
    let wd = watchdog(Duration::from_secs(6), "fi_cq_sread(5 s) with a message arriving");
    let ret = b.tx_cq().sread(&mut e, 5000);
    drop(wd);
    let el = t.elapsed();
    ensure!(ret == 1, "fi_cq_sread(5 s) with a message arriving returned {}", fabric::errname(ret as i32));
    ensure!(el < Duration::from_secs(2), "fi_cq_sread took {el:?} for a message that had been sent");
    ensure!(e[0].op_context == ctx, "fi_cq_sread returned another context");
    ensure!(e[0].len == 64, "fi_cq_sread entry len {}", e[0].len);
    wait2(&mut a, &mut b, sid)?.ok("send")?;
    Ok(())
}

struct SendPtr(*mut ffi::fid_cq);
// SAFETY: the CQ is opened FI_THREAD_SAFE-or-better by the providers tested (checked below) and
// outlives the thread (joined before the CQ is closed).
unsafe impl Send for SendPtr {}

fn cq_signal(r: &mut Rank) -> TResult {
    let cfg = NodeCfg { cq_wait: ffi::FI_WAIT_UNSPEC, threading: ffi::FI_THREAD_SAFE, ..Default::default() };
    {
        let a = Node::open(&r.prov, &NodeCfg { threading: ffi::FI_THREAD_SAFE, ..Default::default() }, r.timeout)?;
        let mut attr =
            ffi::fi_cq_attr { format: ffi::FI_CQ_FORMAT_TAGGED, wait_obj: ffi::FI_WAIT_UNSPEC, ..Default::default() };
        let cq = Cq::open(a.domain(), &mut attr).nos("fi_cq_open(FI_WAIT_UNSPEC)")?;
        let s = cq.signal();
        if s == fabric::ENOSYS {
            return Err(TestErr::Nos(s, "fi_cq_signal returned -FI_ENOSYS".into()));
        }
    }
    let b = Node::open(&r.prov, &cfg, r.timeout)?;
    let mut e = [ffi::fi_cq_tagged_entry::default(); 1];
    // rshm documents -FI_EAGAIN for both a timeout and a signal (provider/src/cq.rs).
    let rshm = r.prov == "rshm";
    // Nothing arrives and nobody signals: the call must really wait for its timeout.
    let t = Instant::now();
    let wd = watchdog(Duration::from_secs(3), "fi_cq_sread(300 ms) on an empty CQ, no signal");
    let ret = b.tx_cq().sread(&mut e, 300);
    drop(wd);
    let el = t.elapsed();
    ensure!(
        ret == EAGAIN as isize || (!rshm && ret == -(ffi::FI_ETIMEDOUT as isize)),
        "fi_cq_sread(300 ms) on an empty CQ returned {}",
        fabric::errname(ret as i32)
    );
    ensure!(
        el >= Duration::from_millis(250) && el < Duration::from_secs(2),
        "fi_cq_sread(300 ms) on an empty CQ returned after {el:?} (it must block about 300 ms)"
    );
    // fi_cq_signal from another thread after 300 ms must end a 10 s fi_cq_sread early, and not
    // before the signal.
    let p = SendPtr(b.tx_cq().raw());
    let t = Instant::now();
    let th = std::thread::spawn(move || {
        let p = p;
        std::thread::sleep(Duration::from_millis(300));
        // SAFETY: see SendPtr; fi_cq_signal = cq->ops->signal(cq).
        unsafe { (*(*p.0).ops).signal.map_or(fabric::ENOSYS, |f| f(p.0)) }
    });
    let wd = watchdog(Duration::from_secs(6), "fi_cq_sread(10 s) woken by fi_cq_signal after 300 ms");
    let ret = b.tx_cq().sread(&mut e, 10_000);
    drop(wd);
    let el = t.elapsed();
    let sig = th.join().map_err(|_| TestErr::Fail("signal thread panicked".into()))?;
    fi_ok("fi_cq_signal", sig)?;
    ensure!(ret < 0, "fi_cq_sread woken by fi_cq_signal returned {ret} entries");
    if rshm {
        ensure!(ret == EAGAIN as isize, "fi_cq_sread woken by fi_cq_signal returned {}", fabric::errname(ret as i32));
    }
    ensure!(
        el >= Duration::from_millis(250),
        "fi_cq_sread(10 s) returned {} after {el:?}, before fi_cq_signal was called (at 300 ms)",
        fabric::errname(ret as i32)
    );
    ensure!(el < Duration::from_secs(2), "fi_cq_signal did not wake fi_cq_sread(10 s) (returned after {el:?})");
    // The signal wakes the sleeper, rather than leaving it to notice the flag when its sleep
    // slice ends: how long each of five sreads outlived its signal, summed. A waiter that
    // noticed at rshm's 100 ms slice would lose about 250 ms in all.
    let mut late = Duration::ZERO;
    for round in 0..5 {
        let p = SendPtr(b.tx_cq().raw());
        let th = std::thread::spawn(move || {
            let p = p;
            std::thread::sleep(Duration::from_millis(30));
            // SAFETY: see SendPtr; fi_cq_signal = cq->ops->signal(cq).
            let ret = unsafe { (*(*p.0).ops).signal.map_or(fabric::ENOSYS, |f| f(p.0)) };
            (ret, Instant::now())
        });
        let wd = watchdog(Duration::from_secs(6), "fi_cq_sread(10 s) woken by fi_cq_signal after 30 ms");
        let ret = b.tx_cq().sread(&mut e, 10_000);
        let back = Instant::now();
        drop(wd);
        let (sig, at) = th.join().map_err(|_| TestErr::Fail("signal thread panicked".into()))?;
        fi_ok("fi_cq_signal", sig)?;
        ensure!(ret < 0, "round {round}: fi_cq_sread woken by fi_cq_signal returned {ret} entries");
        late += back.saturating_duration_since(at);
    }
    ensure!(late < Duration::from_millis(100), "five fi_cq_sread calls returned {late:?} in all after their signals");
    Ok(())
}

fn open_cntr(node: &Node, wait: ffi::fi_wait_obj) -> TResult<Cntr> {
    let mut a = ffi::fi_cntr_attr { events: ffi::FI_CNTR_EVENTS_COMP, wait_obj: wait, ..Default::default() };
    Cntr::open(node.domain(), &mut a).nos("fi_cntr_open")
}

fn cntr_ops(r: &mut Rank) -> TResult {
    let node = Node::open(&r.prov, &NodeCfg::default(), r.timeout)?;
    let c = open_cntr(&node, ffi::FI_WAIT_NONE)?;
    ensure!(c.read() == 0, "new counter reads {}", c.read());
    fi_ok("fi_cntr_add", c.add(5))?;
    ensure!(c.read() == 5, "after add(5): {}", c.read());
    fi_ok("fi_cntr_add", c.add(7))?;
    ensure!(c.read() == 12, "after add(7): {}", c.read());
    fi_ok("fi_cntr_set", c.set(42))?;
    ensure!(c.read() == 42, "after set(42): {}", c.read());
    fi_ok("fi_cntr_set", c.set(0))?;
    ensure!(c.read() == 0, "after set(0): {}", c.read());
    ensure!(c.readerr() == 0, "readerr of a fresh counter: {}", c.readerr());
    c.close().ctx("fi_close(cntr)")?;
    Ok(())
}

fn cntr_err(r: &mut Rank) -> TResult {
    let node = Node::open(&r.prov, &NodeCfg::default(), r.timeout)?;
    let c = open_cntr(&node, ffi::FI_WAIT_NONE)?;
    let ret = c.adderr(3);
    if ret == fabric::ENOSYS {
        return Err(TestErr::Nos(ret, "fi_cntr_adderr returned -FI_ENOSYS".into()));
    }
    fi_ok("fi_cntr_adderr", ret)?;
    ensure!(c.readerr() == 3, "after adderr(3): readerr {}", c.readerr());
    fi_ok("fi_cntr_seterr", c.seterr(10))?;
    ensure!(c.readerr() == 10, "after seterr(10): readerr {}", c.readerr());
    ensure!(c.read() == 0, "error updates changed the success count: {}", c.read());
    Ok(())
}

fn cntr_wait(r: &mut Rank) -> TResult {
    let node = Node::open(&r.prov, &NodeCfg::default(), r.timeout)?;
    let c = open_cntr(&node, ffi::FI_WAIT_UNSPEC)?;
    fi_ok("fi_cntr_set", c.set(42))?;
    let t = Instant::now();
    let wd = watchdog(Duration::from_secs(3), "fi_cntr_wait(42, 1 s) with the counter at 42");
    fi_ok("fi_cntr_wait(42, 1000) with the counter at 42", c.wait(42, 1000))?;
    drop(wd);
    ensure!(t.elapsed() < Duration::from_millis(500), "fi_cntr_wait for a met threshold took {:?}", t.elapsed());
    let t = Instant::now();
    let wd = watchdog(Duration::from_secs(3), "fi_cntr_wait(100, 300 ms) with the counter at 42");
    let ret = c.wait(100, 300);
    drop(wd);
    let el = t.elapsed();
    ensure!(ret == -(ffi::FI_ETIMEDOUT as i32), "fi_cntr_wait(100, 300 ms) returned {}", fabric::errname(ret));
    ensure!(
        el >= Duration::from_millis(250) && el < Duration::from_secs(3),
        "fi_cntr_wait(300 ms) returned after {el:?}"
    );
    drop(c);
    drop(node);
    // Driven by traffic: the receive counter reaches 5 while we block in fi_cntr_wait.
    let mut a = Node::open(&r.prov, &NodeCfg::default(), r.timeout)?;
    let cfg = NodeCfg { counters: true, cntr_wait: ffi::FI_WAIT_UNSPEC, ..Default::default() };
    let mut b = Node::open(&r.prov, &cfg, r.timeout)?;
    let dest = a.insert(&b.name.clone())?;
    let rids: Vec<u64> = (0..5).map(|_| b.recv(64, fabric::FI_ADDR_UNSPEC, &Rx::default())).collect::<TResult<_>>()?;
    let sids: Vec<u64> =
        (0..5).map(|i| send2(&mut a, &mut b, &pattern(i, 64), dest, &Tx::default())).collect::<TResult<_>>()?;
    for s in sids {
        wait2(&mut a, &mut b, s)?.ok("send")?;
    }
    let rc = b.rx_cntr.as_ref().expect("counters");
    let t = Instant::now();
    let wd = watchdog(Duration::from_secs(6), "fi_cntr_wait(rx counter, 5, 5 s) for arrived messages");
    fi_ok("fi_cntr_wait(rx counter, 5, 5 s)", rc.wait(5, 5000))?;
    drop(wd);
    ensure!(t.elapsed() < Duration::from_secs(3), "fi_cntr_wait for arrived messages took {:?}", t.elapsed());
    ensure!(rc.read() == 5, "rx counter {} after 5 receives", rc.read());
    for (i, id) in rids.into_iter().enumerate() {
        let c = wait2(&mut b, &mut a, id)?;
        check_recv(&c, "receive counted by fi_cntr_wait", 64, false)?;
        check_pattern("receive counted by fi_cntr_wait", i as u64, &c.payload, 64)?;
    }
    drop((a, b));
    for_each_progress(r, cntr_wait_woken_by_add)
}

/// Run `check` with manual progress, then with auto progress where the provider offers it (the
/// C shm 1.17 does not): a blocking wait sleeps differently in the two.
fn for_each_progress(r: &mut Rank, check: fn(&mut Rank, ffi::fi_progress) -> TResult) -> TResult {
    check(r, ffi::FI_PROGRESS_MANUAL)?;
    match check(r, ffi::FI_PROGRESS_AUTO) {
        Err(TestErr::Nos(..)) => Ok(()),
        other => other,
    }
}

/// A thread asleep in fi_cq_sread is woken by a completion that another thread of the process
/// makes (FI_THREAD_SAFE: one thread sends, another reaps the completions), not only by a peer.
fn cq_sread_other_thread(r: &mut Rank) -> TResult {
    for_each_progress(r, cq_sread_beside_sends)
}

fn cq_sread_beside_sends(r: &mut Rank, progress: ffi::fi_progress) -> TResult {
    const ROUNDS: usize = 5;
    let cfg = NodeCfg { cq_wait: ffi::FI_WAIT_UNSPEC, threading: ffi::FI_THREAD_SAFE, progress, ..Default::default() };
    let mut a = Node::open(&r.prov, &cfg, r.timeout)?;
    let mut b = Node::open(&r.prov, &NodeCfg::default(), r.timeout)?;
    let dest = a.insert(&b.name.clone())?;
    let rids: Vec<u64> =
        (0..ROUNDS).map(|_| b.recv(64, fabric::FI_ADDR_UNSPEC, &Rx::default())).collect::<TResult<_>>()?;
    let payload = pattern(9, 64);
    let mut ctxs = vec![ffi::fi_context2::default(); ROUNDS];
    let reaped = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let p = SendPtr(a.tx_cq().raw());
    let seen = reaped.clone();
    let reaper = std::thread::spawn(move || {
        let p = p;
        let mut out = Vec::new();
        for _ in 0..ROUNDS {
            let mut e = [ffi::fi_cq_tagged_entry::default(); 1];
            // SAFETY: see SendPtr; fi_cq_sread = cq->ops->sread(cq, buf, 1, NULL, 10 s).
            let ret = unsafe {
                (*(*p.0).ops)
                    .sread
                    .map_or(fabric::ENOSYS as isize, |f| f(p.0, e.as_mut_ptr().cast(), 1, std::ptr::null(), 10_000))
            };
            out.push((ret, Instant::now(), e[0].op_context as usize));
            seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        out
    });
    let mut posted = Vec::new();
    for (i, ctx) in ctxs.iter_mut().enumerate() {
        std::thread::sleep(Duration::from_millis(30));
        posted.push(Instant::now());
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            // SAFETY: `payload` and `ctxs` outlive the sends (the reaper is joined below).
            let ret = unsafe {
                a.ep().send(payload.as_ptr(), 64, std::ptr::null_mut(), dest, (ctx as *mut ffi::fi_context2).cast())
            };
            if ret != -(ffi::FI_EAGAIN as isize) {
                fi_ok("fi_send from the main thread", ret as i64)?;
                break;
            }
            // A provider that must first connect (the C shm) progresses through the reaper.
            b.progress()?;
            ensure!(Instant::now() < deadline, "round {i}: fi_send said -FI_EAGAIN for 5 s");
        }
        while reaped.load(std::sync::atomic::Ordering::SeqCst) <= i {
            b.progress()?;
            ensure!(Instant::now() < deadline, "round {i}: no completion reaped within 5 s");
        }
    }
    let got = reaper.join().map_err(|_| TestErr::Fail("reaper thread panicked".into()))?;
    let mut late = Duration::ZERO;
    for (i, (ret, at, ctx)) in got.into_iter().enumerate() {
        ensure!(ret == 1, "round {i}: fi_cq_sread returned {}", fabric::errname(ret as i32));
        ensure!(ctx == &ctxs[i] as *const ffi::fi_context2 as usize, "round {i}: another context");
        late += at.saturating_duration_since(posted[i]);
    }
    for id in rids {
        b.wait_ok(id, "receive of a message sent beside the reaper")?;
    }
    ensure!(
        late < Duration::from_millis(100),
        "five fi_cq_sread calls returned {late:?} in all after their sends (progress {progress})"
    );
    Ok(())
}

struct SendCntr(*mut ffi::fid_cntr);
// SAFETY: the counter's domain is opened FI_THREAD_SAFE, and the counter outlives the thread
// (joined before it is closed).
unsafe impl Send for SendCntr {}

/// fi_cntr_add from another thread wakes a thread asleep in fi_cntr_wait on a counter bound to
/// an endpoint (where it sleeps on the endpoint's wake word), rather than leaving it to notice
/// at the end of its sleep slice: how long each of five waits outlived its add, summed. A waiter
/// that noticed at rshm's 100 ms slice would lose about 250 ms in all.
fn cntr_wait_woken_by_add(r: &mut Rank, progress: ffi::fi_progress) -> TResult {
    let cfg = NodeCfg {
        counters: true,
        cntr_wait: ffi::FI_WAIT_UNSPEC,
        threading: ffi::FI_THREAD_SAFE,
        progress,
        ..Default::default()
    };
    let node = Node::open(&r.prov, &cfg, r.timeout)?;
    let rc = node.rx_cntr.as_ref().expect("counters");
    let mut late = Duration::ZERO;
    for round in 1..=5u64 {
        let p = SendCntr(rc.raw());
        let th = std::thread::spawn(move || {
            let p = p;
            std::thread::sleep(Duration::from_millis(30));
            // SAFETY: see SendCntr; fi_cntr_add = cntr->ops->add(cntr, 1).
            let ret = unsafe { (*(*p.0).ops).add.map_or(fabric::ENOSYS, |f| f(p.0, 1)) };
            (ret, Instant::now())
        });
        let wd = watchdog(Duration::from_secs(6), "fi_cntr_wait(10 s) met by fi_cntr_add from another thread");
        let ret = rc.wait(round, 10_000);
        let back = Instant::now();
        drop(wd);
        let (added, at) = th.join().map_err(|_| TestErr::Fail("fi_cntr_add thread panicked".into()))?;
        fi_ok("fi_cntr_add from another thread", added)?;
        fi_ok(&format!("fi_cntr_wait({round}) met by fi_cntr_add"), ret)?;
        late += back.saturating_duration_since(at);
    }
    ensure!(
        late < Duration::from_millis(100),
        "five fi_cntr_wait calls returned {late:?} in all after their adds (progress {progress})"
    );
    Ok(())
}

fn cntr_completion(r: &mut Rank) -> TResult {
    let cfg = NodeCfg { counters: true, ..Default::default() };
    let mut a = Node::open(&r.prov, &cfg, r.timeout)?;
    let mut b = Node::open(&r.prov, &cfg, r.timeout)?;
    let dest = a.insert(&b.name.clone())?;
    let sizes = [0usize, 64, 5000, 70000];
    let mut rids = Vec::new();
    for (i, &s) in sizes.iter().enumerate().cycle().take(10) {
        rids.push((b.recv(s, fabric::FI_ADDR_UNSPEC, &Rx::default())?, i, s));
    }
    let trunc = b.recv(4, fabric::FI_ADDR_UNSPEC, &Rx::default())?;
    let mut sids = Vec::new();
    for &(_, i, s) in &rids {
        sids.push(send2(&mut a, &mut b, &pattern(i as u64, s), dest, &Tx::default())?);
    }
    sids.push(send2(&mut a, &mut b, &pattern(99, 64), dest, &Tx::default())?);
    for &(id, i, s) in &rids {
        let c = wait2(&mut b, &mut a, id)?;
        check_recv(&c, "recv", s, false)?;
        check_pattern("recv", i as u64, &c.payload, s)?;
    }
    let c = wait2(&mut b, &mut a, trunc)?;
    ensure!(
        c.err == ffi::FI_ETRUNC as i32,
        "truncated receive: error entry err = {} (want FI_ETRUNC, a positive code)",
        fabric::errname(c.err)
    );
    ensure!(c.olen == 60, "truncated receive (64 B into 4): olen {} != 60", c.olen);
    for s in sids {
        wait2(&mut a, &mut b, s)?.ok("send")?;
    }
    let (tc, rc) = (a.tx_cntr.as_ref().expect("cntr"), b.rx_cntr.as_ref().expect("cntr"));
    ensure!(tc.read() == 11, "send counter {} after 11 sends", tc.read());
    ensure!(tc.readerr() == 0, "send error counter {}", tc.readerr());
    ensure!(rc.read() == 10, "receive counter {} after 10 good receives", rc.read());
    ensure!(rc.readerr() == 1, "receive error counter {} after 1 truncated receive", rc.readerr());
    Ok(())
}

fn mr_reg(r: &mut Rank) -> TResult {
    let node = Node::open(&r.prov, &NodeCfg::default(), r.timeout)?;
    let mr_mode = node.info.get().domain_attr().map_or(0, |d| d.mr_mode);
    let prov_key = mr_mode & ffi::FI_MR_PROV_KEY as i32 != 0;
    let buf = vec![0u8; 8192];
    let buf2 = vec![0u8; 4096];
    let access = (ffi::FI_SEND | ffi::FI_RECV) as u64;
    let dom = node.domain();
    // SAFETY: buf and buf2 outlive every MR (the MRs are closed before this function returns,
    // and they are declared after the buffers so they drop first).
    let m1 = unsafe { Mr::reg(dom, buf.as_ptr(), 4096, access, 0, 0x1234, 0) }.ctx("fi_mr_reg")?;
    if !prov_key {
        ensure!(m1.key() == 0x1234, "fi_mr_key {:#x} != requested 0x1234 without FI_MR_PROV_KEY", m1.key());
    }
    let iov = [
        ffi::iovec { iov_base: buf[4096..].as_ptr() as *mut _, iov_len: 2048 },
        ffi::iovec { iov_base: buf2.as_ptr() as *mut _, iov_len: 4096 },
    ];
    let max_iov = node.info.get().domain_attr().map_or(1, |d| d.mr_iov_limit);
    let m2 = if max_iov >= 2 {
        // SAFETY: as above.
        Some(unsafe { Mr::regv(dom, &iov, access, 0, 0x1235, 0) }.ctx("fi_mr_regv (2 iovs)")?)
    } else {
        None
    };
    let attr = ffi::fi_mr_attr {
        mr_iov: iov.as_ptr(),
        iov_count: 1,
        access,
        requested_key: 0x1236,
        iface: ffi::FI_HMEM_SYSTEM,
        ..Default::default()
    };
    // SAFETY: as above.
    let m3 = unsafe { Mr::regattr(dom, &attr, 0) }.ctx("fi_mr_regattr")?;
    if !prov_key {
        ensure!(m3.key() == 0x1236, "regattr key {:#x} != requested 0x1236", m3.key());
        if let Some(m2) = &m2 {
            ensure!(m2.key() == 0x1235, "regv key {:#x} != requested 0x1235", m2.key());
        }
    }
    let _ = m1.desc();
    m3.close().ctx("fi_close(mr regattr)")?;
    if let Some(m2) = m2 {
        m2.close().ctx("fi_close(mr regv)")?;
    }
    m1.close().ctx("fi_close(mr)")?;
    Ok(())
}

fn ep_basics(r: &mut Rank) -> TResult {
    let caps = (ffi::FI_MSG | ffi::FI_TAGGED | ffi::FI_MULTI_RECV) as u64;
    let node = Node::open(&r.prov, &NodeCfg::caps(caps), r.timeout)?;
    let mut small = [0u8; 1];
    let mut len = 1usize;
    let ret = node.ep().getname_raw(&mut small, &mut len);
    ensure!(ret == -(ffi::FI_ETOOSMALL as i32), "fi_getname with a 1-byte buffer returned {}", fabric::errname(ret));
    ensure!(len == node.name.len(), "fi_getname(ETOOSMALL) reported length {len}, address has {}", node.name.len());
    node.ep().getopt_usize(ffi::FI_OPT_ENDPOINT, ffi::FI_OPT_MIN_MULTI_RECV).ctx("fi_getopt(MIN_MULTI_RECV)")?;
    // FI_OPT_MIN_MULTI_RECV set (after binding, before fi_enable, as fabtests do) reads back.
    let cfg = NodeCfg { min_multi_recv: Some(2048), ..NodeCfg::caps(caps) };
    let node2 = Node::open(&r.prov, &cfg, r.timeout)?;
    let v = node2.ep().getopt_usize(ffi::FI_OPT_ENDPOINT, ffi::FI_OPT_MIN_MULTI_RECV).ctx("fi_getopt")?;
    ensure!(v == 2048, "FI_OPT_MIN_MULTI_RECV reads {v} after setting 2048");
    // Two endpoints on one domain get different addresses; closing one leaves the other usable.
    let info = node.info.get().dup();
    let ep = Ep::open(node.domain(), &info).ctx("fi_endpoint (2nd on the domain)")?;
    fi_ok("fi_ep_bind(av)", ep.bind(node.av().fid(), 0))?;
    let mut ca = ffi::fi_cq_attr { format: ffi::FI_CQ_FORMAT_TAGGED, ..Default::default() };
    let cq = Cq::open(node.domain(), &mut ca).ctx("fi_cq_open")?;
    fi_ok("fi_ep_bind(cq)", ep.bind(cq.fid(), (ffi::FI_TRANSMIT | ffi::FI_RECV) as u64))?;
    fi_ok("fi_enable (2nd endpoint)", ep.enable())?;
    let name2 = ep.getname().ctx("fi_getname (2nd endpoint)")?;
    ensure!(name2 != node.name, "two endpoints of one domain share the address");
    ep.close().ctx("fi_close(ep)")?;
    cq.close().ctx("fi_close(cq)")?;
    Ok(())
}

fn loopback_sizes(r: &mut Rank) -> TResult {
    let mut a = Node::open(&r.prov, &NodeCfg::default(), r.timeout)?;
    let mut b = Node::open(&r.prov, &NodeCfg::default(), r.timeout)?;
    let dest = a.insert(&b.name.clone())?;
    for (i, &size) in SIZES.iter().enumerate() {
        r.pmi.step(&format!("size {size}"));
        one_message(&mut a, &mut b, dest, size, i as u64)?;
    }
    Ok(())
}

/// Poll sets (fi_poll(3)): a counter is reported when its value or error count moved since the
/// last `fi_poll` that reported it, and then not again until it moves; an empty CQ is not
/// reported; deleting a member stops its reports. Each object's user context (the `context` of
/// its fid) is what comes back. (Adding a member twice is left alone: fi_poll(3) does not say.)
fn poll_set(r: &mut Rank) -> TResult {
    let node = Node::open(&r.prov, &NodeCfg::default(), r.timeout)?;
    let dom = node.domain().raw();
    let mut set: *mut ffi::fid_poll = std::ptr::null_mut();
    let mut attr = ffi::fi_poll_attr { flags: 0 };
    // SAFETY: an open domain; attr and the out-pointer are valid.
    let ret = unsafe { ((*(*dom).ops).poll_open.expect("poll_open"))(dom, &mut attr, &mut set) };
    if ret == fabric::ENOSYS {
        return Err(TestErr::Nos(ret, "fi_poll_open returned -FI_ENOSYS".into()));
    }
    fi_ok("fi_poll_open", ret)?;
    // SAFETY: `set` is the poll set just opened; its ops table is the provider's.
    let ops = unsafe { &*(*set).ops };
    let (a, b) = (open_cntr(&node, ffi::FI_WAIT_NONE)?, open_cntr(&node, ffi::FI_WAIT_NONE)?);
    let mut cq_attr = ffi::fi_cq_attr { format: ffi::FI_CQ_FORMAT_CONTEXT, ..Default::default() };
    let cq = Cq::open(node.domain(), &mut cq_attr).nos("fi_cq_open")?;
    let marks = [(a.fid(), 0xa0usize), (b.fid(), 0xb0), (cq.fid(), 0xc0)];
    for (fid, mark) in marks {
        // SAFETY: an open object of the provider; its context is the application's to set.
        unsafe { (*fid).context = mark as *mut std::ffi::c_void };
        // SAFETY: open set and object.
        fi_ok("fi_poll_add", unsafe { (ops.poll_add.expect("poll_add"))(set, fid, 0) })?;
    }
    let poll = || -> TResult<Vec<usize>> {
        let mut ctx = [std::ptr::null_mut::<std::ffi::c_void>(); 8];
        // SAFETY: open set; `ctx` holds 8 entries.
        let n = unsafe { (ops.poll.expect("poll"))(set, ctx.as_mut_ptr(), 8) };
        ensure!((0..=3).contains(&n), "fi_poll returned {}", fabric::errname(n));
        let mut got: Vec<usize> = ctx[..n as usize].iter().map(|&p| p as usize).collect();
        got.sort();
        Ok(got)
    };
    ensure!(poll()?.is_empty(), "fi_poll reported objects before anything happened");
    fi_ok("fi_cntr_add", a.add(1))?;
    ensure!(poll()? == vec![0xa0], "after fi_cntr_add on the first counter");
    ensure!(poll()?.is_empty(), "a counter that did not move was reported again");
    fi_ok("fi_cntr_adderr", b.adderr(2))?;
    fi_ok("fi_cntr_add", a.add(1))?;
    ensure!(poll()? == vec![0xa0, 0xb0], "after moving both counters (b by its error count)");
    // SAFETY: open set and counter.
    fi_ok("fi_poll_del", unsafe { (ops.poll_del.expect("poll_del"))(set, a.fid(), 0) })?;
    fi_ok("fi_cntr_add", a.add(1))?;
    ensure!(poll()?.is_empty(), "a counter deleted from the set was still reported");
    for fid in [b.fid(), cq.fid()] {
        // SAFETY: open set and objects.
        fi_ok("fi_poll_del", unsafe { (ops.poll_del.expect("poll_del"))(set, fid, 0) })?;
    }
    // SAFETY: the set is open and empty; nothing uses it afterwards.
    fi_ok("fi_close(poll)", unsafe { fabric::close_fid(set.cast()) })?;
    Ok(())
}
