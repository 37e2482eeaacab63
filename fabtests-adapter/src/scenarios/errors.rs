//! Error paths: bad fi_addr, oversize inject, closing objects in use, operations towards a
//! closed endpoint, and a peer that dies.

use super::{scn, setup, wait2, Scenario};
use crate::fabric::{self, ffi, Av, Cntr, Cq, Domain, Ep, FiAddr, Hints, EAGAIN, FI_ADDR_NOTAVAIL};
use crate::harness::{fi_ok, pattern, FiCtx, Node, NodeCfg, Rank, TResult, Tx};
use crate::{bail, ensure};
use std::time::{Duration, Instant};

pub fn scenarios() -> Vec<Scenario> {
    vec![
        scn("err/bad_fi_addr", 1, 40, bad_fi_addr, "send/inject to never-inserted, removed and NOTAVAIL fi_addrs"),
        scn("err/oversize", 1, 30, oversize, "inject of inject_size+1, more iovs than iov_limit"),
        scn("err/close_busy", 1, 20, close_busy, "fi_close of domain/fabric/CQ/AV/counter still in use"),
        scn("err/send_after_peer_close", 2, 40, send_after_peer_close, "sends to an endpoint its owner closed"),
        scn("err/peer_died", 2, 40, peer_died, "sends in flight to and after a SIGKILLed peer complete with errors"),
        scn(
            "err/peer_died_unreached",
            2,
            40,
            peer_died_unreached,
            "a send to a peer SIGKILLed before anything was sent to it fails (rshm: after FI_RSHM_DEAD_PEER_TIMEOUT_MS)",
        ),
        scn(
            "err/peer_died_rma",
            2,
            60,
            peer_died_rma,
            "checked RMA and atomics, then writes, reads and atomics in flight to and after a SIGKILLed target fail",
        ),
        scn(
            "err/peer_died_rma_midstream",
            2,
            60,
            peer_died_rma_midstream,
            "a target SIGKILLed at a random point of a stream of 8 RMA/atomic operations in flight",
        ),
    ]
}

/// A short deadline for error paths: a provider that hangs here fails quickly.
const ERR_TIMEOUT: Duration = Duration::from_secs(8);

/// What a provider documents for operations towards a peer that is gone (SIGKILLed, or closed
/// its endpoint): which error, and how soon.
struct GonePeer {
    /// Positive FI_Exxx: a refused post returns its negation, an error completion carries it.
    code: i32,
    /// Longest time from the peer's death (or our post, after it) to that error.
    within: Duration,
}

/// rshm: smr-core's Error::PeerDead maps to FI_EIO (provider/src/error.rs); peers are watched
/// every liveness interval (100 ms), so 2 s is a generous bound. Other providers: no contract,
/// the scenarios only ask for some error within ERR_TIMEOUT.
fn gone_peer_contract(prov: &str) -> Option<GonePeer> {
    (prov == "rshm").then_some(GonePeer { code: ffi::FI_EIO as i32, within: Duration::from_secs(2) })
}

impl GonePeer {
    /// The operation failed with the documented error, in time.
    fn check(&self, what: &str, f: &Fate, took: Duration) -> TResult {
        let code = match f {
            Fate::Refused(c) => -*c,
            Fate::ErrorCompletion(e) => *e,
            Fate::Succeeded => bail!("{what}: completed successfully (the data cannot have arrived)"),
        };
        ensure!(
            code == self.code,
            "{what}: {} (expected {} or an error completion {})",
            describe(f),
            fabric::errname(-self.code),
            fabric::errname(self.code)
        );
        ensure!(took <= self.within, "{what}: {} only after {took:?} (allowed: {:?})", describe(f), self.within);
        Ok(())
    }

    /// An fi_inject that must be refused with the documented error.
    fn check_inject(&self, what: &str, ret: isize) -> TResult {
        ensure!(
            ret == -(self.code as isize),
            "{what} returned {} (expected {})",
            fabric::errname(ret as i32),
            fabric::errname(-self.code)
        );
        Ok(())
    }
}

/// What became of an operation that should fail.
enum Fate {
    Refused(i32),
    ErrorCompletion(i32),
    Succeeded,
}

fn describe(f: &Fate) -> String {
    match f {
        Fate::Refused(c) => format!("refused with {}", fabric::errname(*c)),
        Fate::ErrorCompletion(e) => format!("error completion {}", fabric::errname(-*e)),
        Fate::Succeeded => "completed successfully".into(),
    }
}

/// Send once to `dest`; the fate of the operation (or a timeout failure).
fn send_fate(a: &mut Node, other: Option<&mut Node>, dest: FiAddr, size: usize, what: &str) -> TResult<Fate> {
    timed_send_fate(a, other, dest, size, what).map(|(f, _)| f)
}

/// `send_fate` and how long from the post to the fate.
fn timed_send_fate(
    a: &mut Node,
    mut other: Option<&mut Node>,
    dest: FiAddr,
    size: usize,
    what: &str,
) -> TResult<(Fate, Duration)> {
    let t = Instant::now();
    let id = match other.as_deref_mut() {
        Some(b) => a.try_send_with(&pattern(1, size), dest, &Tx::default(), &mut b.progressor()),
        None => a.try_send(&pattern(1, size), dest, &Tx::default()),
    };
    let id = match id {
        Ok(Ok(id)) => id,
        Ok(Err(code)) => return Ok((Fate::Refused(code), t.elapsed())),
        Err(crate::harness::TestErr::Fail(m)) => bail!("{what}: {m}"),
        Err(e) => return Err(e),
    };
    let c = match other {
        Some(b) => wait2(a, b, id),
        None => a.wait_op(id),
    };
    let c = match c {
        Ok(c) => c,
        Err(crate::harness::TestErr::Fail(m)) => bail!("{what}: the send never completed ({m})"),
        Err(e) => return Err(e),
    };
    Ok((if c.err != 0 { Fate::ErrorCompletion(c.err) } else { Fate::Succeeded }, t.elapsed()))
}

fn bad_fi_addr(r: &mut Rank) -> TResult {
    let mut a = Node::open(&r.prov, &NodeCfg::default(), ERR_TIMEOUT)?;
    let mut b = Node::open(&r.prov, &NodeCfg::default(), ERR_TIMEOUT)?;
    let good = a.insert(&b.name.clone())?;
    let gone = a.insert(&b.name.clone())?;
    fi_ok("fi_av_remove", a.av().remove(&mut [gone], 0))?;
    for (dest, desc) in
        [(4242u64, "never-inserted fi_addr 4242"), (FI_ADDR_NOTAVAIL, "FI_ADDR_NOTAVAIL"), (gone, "removed fi_addr")]
    {
        if dest == good {
            continue; // a removed slot that got reused: not a bad address
        }
        for size in [64usize, 1 << 20] {
            let what = format!("send of {size} B to {desc}");
            crate::pmi::step(&what);
            let f = send_fate(&mut a, Some(&mut b), dest, size, &what)?;
            ensure!(!matches!(f, Fate::Succeeded), "{what}: {}", describe(&f));
        }
        crate::pmi::step(&format!("fi_inject to {desc}"));
        let ret = match a.try_inject_with(&pattern(2, 16), dest, None, None, &mut b.progressor()) {
            Ok(r) => r,
            Err(crate::harness::TestErr::Fail(m)) => bail!("fi_inject to {desc}: {m}"),
            Err(e) => return Err(e),
        };
        ensure!(ret < 0, "fi_inject to {desc} returned {ret} (the message went nowhere)");
    }
    // The endpoint still works.
    let rid = b.recv(64, fabric::FI_ADDR_UNSPEC, &Default::default())?;
    let sid = super::send2(&mut a, &mut b, &pattern(3, 64), good, &Tx::default())?;
    wait2(&mut b, &mut a, rid)?.ok("receive after the bad sends")?;
    wait2(&mut a, &mut b, sid)?.ok("send after the bad sends")?;
    Ok(())
}

fn oversize(r: &mut Rank) -> TResult {
    let mut a = Node::open(&r.prov, &NodeCfg::default(), ERR_TIMEOUT)?;
    let mut b = Node::open(&r.prov, &NodeCfg::default(), ERR_TIMEOUT)?;
    let dest = a.insert(&b.name.clone())?;
    let isz = a.info.get().tx_attr().map_or(0, |t| t.inject_size);
    let iov_limit = a.info.get().tx_attr().map_or(1, |t| t.iov_limit);
    let big = pattern(4, isz + 1);
    // Connect first (a first send may legitimately get -FI_EAGAIN during a handshake).
    let rid = b.recv(8, fabric::FI_ADDR_UNSPEC, &Default::default())?;
    let sid = super::send2(&mut a, &mut b, &pattern(0, 8), dest, &Tx::default())?;
    wait2(&mut b, &mut a, rid)?.ok("first receive")?;
    wait2(&mut a, &mut b, sid)?.ok("first send")?;
    for (tag, data, name) in
        [(None, None, "fi_inject"), (Some(1), None, "fi_tinject"), (None, Some(5), "fi_injectdata")]
    {
        let ret = match (tag, data) {
            (Some(t), _) => a.ep().tinject(&big, dest, t),
            (None, Some(d)) => a.ep().injectdata(&big, d, dest),
            _ => a.ep().inject(&big, dest),
        };
        ensure!(
            ret < 0 && ret != EAGAIN as isize,
            "{name} of inject_size+1 ({} B) returned {}",
            isz + 1,
            fabric::errname(ret as i32)
        );
    }
    if iov_limit < 64 {
        let n = iov_limit + 1;
        let tx = Tx { iov: n, ..Default::default() };
        let res = a.try_send_with(&pattern(5, n * 8), dest, &tx, &mut b.progressor())?;
        if let Ok(id) = res {
            let c = wait2(&mut a, &mut b, id)?;
            ensure!(c.err != 0, "fi_sendv with {n} iovs (iov_limit {iov_limit}) succeeded");
        }
    }
    Ok(())
}

fn close_busy(r: &mut Rank) -> TResult {
    let mut h = Hints::for_provider(&r.prov);
    h.caps((ffi::FI_MSG | ffi::FI_TAGGED) as u64).mode(ffi::FI_CONTEXT | ffi::FI_CONTEXT2);
    h.ep_attr().type_ = ffi::FI_EP_RDM;
    let list = fabric::getinfo(Some(&h)).ctx("fi_getinfo")?;
    let info = list.first().expect("non-empty").dup();
    let mut fab = fabric::open_fabric(&info).ctx("fi_fabric")?;
    let mut dom = Domain::open(&fab, &info).ctx("fi_domain")?;
    let mut aa = ffi::fi_av_attr { type_: ffi::FI_AV_TABLE, count: 4, ..Default::default() };
    let mut av = Av::open(&dom, &mut aa).ctx("fi_av_open")?;
    let mut ca = ffi::fi_cq_attr { format: ffi::FI_CQ_FORMAT_TAGGED, ..Default::default() };
    let mut cq = Cq::open(&dom, &mut ca).ctx("fi_cq_open")?;
    let mut ta = ffi::fi_cntr_attr { events: ffi::FI_CNTR_EVENTS_COMP, ..Default::default() };
    let mut cntr = Cntr::open(&dom, &mut ta).ctx("fi_cntr_open")?;
    let ep = Ep::open(&dom, &info).ctx("fi_endpoint")?;
    fi_ok("fi_ep_bind(av)", ep.bind(av.fid(), 0))?;
    fi_ok("fi_ep_bind(cq)", ep.bind(cq.fid(), (ffi::FI_TRANSMIT | ffi::FI_RECV) as u64))?;
    fi_ok("fi_ep_bind(cntr)", ep.bind(cntr.fid(), ffi::FI_SEND as u64))?;
    fi_ok("fi_enable", ep.enable())?;
    let mut wrongly_closed = Vec::new();
    for (name, ret) in [
        ("domain with an open endpoint", dom.try_close()),
        ("fabric with an open domain", fab.try_close()),
        ("CQ bound to an open endpoint", cq.try_close()),
        ("AV bound to an open endpoint", av.try_close()),
        ("counter bound to an open endpoint", cntr.try_close()),
    ] {
        if ret == 0 {
            wrongly_closed.push(name);
        }
    }
    if !wrongly_closed.is_empty() {
        // Objects were freed under their users: do not touch (or close) anything again.
        std::mem::forget((ep, av, cq, cntr, dom, fab, info));
        bail!("fi_close returned 0 for: {}", wrongly_closed.join(", "));
    }
    ep.close().ctx("fi_close(ep)")?;
    cntr.close().ctx("fi_close(cntr) after the endpoint")?;
    cq.close().ctx("fi_close(cq) after the endpoint")?;
    av.close().ctx("fi_close(av) after the endpoint")?;
    dom.close().ctx("fi_close(domain) after its objects")?;
    fab.close().ctx("fi_close(fabric) after its domain")?;
    Ok(())
}

/// One message each way, so both sides are connected before the interesting part.
pub(super) fn handshake(r: &mut Rank, node: &mut Node, peer: FiAddr) -> TResult {
    let rid = node.recv(16, peer, &Default::default())?;
    let sid = node.send(&pattern(r.rank as u64, 16), peer, &Tx::default())?;
    node.wait_ok(sid, "handshake send")?;
    node.wait_ok(rid, "handshake receive")?;
    r.pmi.barrier_with(&mut node.progressor())
}

fn send_after_peer_close(r: &mut Rank) -> TResult {
    let (mut node, addrs) = setup(r, &NodeCfg::default())?;
    let peer = addrs[1 - r.rank];
    handshake(r, &mut node, peer)?;
    node.timeout = ERR_TIMEOUT;
    if r.rank == 1 {
        let ret = node.close_ep();
        ensure!(ret == 0, "fi_close(ep) returned {}", fabric::errname(ret));
        r.pmi.set("closed", "1");
        r.pmi.barrier()?;
    } else {
        r.pmi.wait_key_with("closed", &mut node.progressor())?;
        // Post all three, then give them one shared deadline.
        let sizes = [64usize, 65536, 1 << 20];
        let t0 = Instant::now();
        let mut ops = Vec::new();
        for &size in &sizes {
            ops.push(node.try_send(&pattern(size as u64, size), peer, &Tx::default())?);
        }
        let deadline = t0 + ERR_TIMEOUT;
        let mut fates = Vec::new();
        let mut hung = Vec::new();
        for (&size, op) in sizes.iter().zip(ops) {
            let fate = match op {
                Err(code) => Some(Fate::Refused(code)),
                Ok(id) => loop {
                    if let Some(c) = node.poll_op(id)? {
                        break Some(if c.err != 0 { Fate::ErrorCompletion(c.err) } else { Fate::Succeeded });
                    }
                    if Instant::now() > deadline {
                        hung.push(size);
                        break None;
                    }
                    std::thread::yield_now();
                },
            };
            if let Some(f) = fate {
                fates.push((size, f, t0.elapsed()));
            }
        }
        let text: Vec<String> =
            fates.iter().map(|(size, f, took)| format!("{size} B {} after {took:?}", describe(f))).collect();
        r.pmi.step(&text.join("; "));
        let summary = if text.is_empty() { String::new() } else { format!(" (others: {})", text.join("; ")) };
        ensure!(
            hung.is_empty(),
            "sends of {hung:?} B to an endpoint closed by its (live) owner never completed within {ERR_TIMEOUT:?}{summary}"
        );
        if let Some(gone) = gone_peer_contract(&r.prov) {
            // Every one of these was posted after the peer closed: none may succeed.
            for (size, f, took) in &fates {
                gone.check(&format!("send of {size} B to an endpoint its owner had closed"), f, *took)?;
            }
            let ret = node.try_inject(&pattern(3, 16), peer, None, None)?;
            gone.check_inject("fi_inject to an endpoint its owner had closed", ret)?;
        }
        r.pmi.barrier()?;
    }
    Ok(())
}

fn peer_died(r: &mut Rank) -> TResult {
    let (mut node, addrs) = setup(r, &NodeCfg::default())?;
    let peer = addrs[1 - r.rank];
    handshake(r, &mut node, peer)?;
    if r.rank == 1 {
        // No progress from here on: nothing sent to us can be received or acknowledged.
        let deadline = Instant::now() + Duration::from_secs(20);
        while r.pmi.get_with("posted", None)?.is_none() {
            ensure!(Instant::now() < deadline, "rank 0 never posted its sends");
            std::thread::sleep(Duration::from_millis(5));
        }
        r.pmi.killme();
    }
    let small = node.send(&pattern(1, 64), peer, &Tx::default())?;
    let big = node.send(&pattern(2, 1 << 20), peer, &Tx::default())?;
    r.pmi.set("posted", "1");
    r.pmi.wait_exit_with(1, &mut node.progressor())?;
    r.pmi.step("peer killed; waiting for the 1 MiB send in flight");
    let t = Instant::now();
    let c = node.wait_op(big).map_err(|e| match e {
        crate::harness::TestErr::Fail(m) => {
            crate::harness::TestErr::Fail(format!("1 MiB send in flight to a SIGKILLed peer: {m}"))
        }
        e => e,
    })?;
    ensure!(c.err != 0, "1 MiB send to a peer that never posted a receive and was SIGKILLed completed successfully");
    let detect = t.elapsed();
    let gone = gone_peer_contract(&r.prov);
    if let Some(g) = &gone {
        g.check("1 MiB send in flight to a SIGKILLed peer", &Fate::ErrorCompletion(c.err), detect)?;
    }
    // The 64 B send went inline into the peer's queue while it was alive (fi_send returned 0
    // before the peer was killed): it may count as sent, or fail with the documented error.
    let sc = node.wait_op(small)?;
    if let (Some(g), true) = (&gone, sc.err != 0) {
        g.check("64 B send queued before the peer died", &Fate::ErrorCompletion(sc.err), Duration::ZERO)?;
    }
    node.timeout = ERR_TIMEOUT;
    let mut fates = vec![
        format!("in-flight 1 MiB: {} after {detect:?}", describe(&Fate::ErrorCompletion(c.err))),
        format!("in-flight 64 B: {}", if sc.err == 0 { "success".into() } else { fabric::errname(-sc.err) }),
    ];
    // The peer is known dead now: nothing sent from here on can arrive.
    for size in [64usize, 1 << 20] {
        let what = format!("send of {size} B after the peer died");
        let (f, took) = timed_send_fate(&mut node, None, peer, size, &what)?;
        match &gone {
            Some(g) => g.check(&what, &f, took)?,
            None if size > 4096 => ensure!(!matches!(f, Fate::Succeeded), "{what}: completed successfully"),
            None => {}
        }
        fates.push(format!("{size} B after: {} after {took:?}", describe(&f)));
    }
    let ret = match node.try_inject(&pattern(3, 16), peer, None, None) {
        Ok(r) => r,
        Err(crate::harness::TestErr::Fail(m)) => bail!("fi_inject after the peer died: {m}"),
        Err(e) => return Err(e),
    };
    if let Some(g) = &gone {
        g.check_inject("fi_inject after the peer died", ret)?;
    }
    fates.push(format!("inject after: {}", fabric::errname(ret as i32)));
    r.pmi.step(&fates.join("; "));
    Ok(())
}

/// What this scenario sets FI_RSHM_DEAD_PEER_TIMEOUT_MS to: three times its default, so that
/// a provider that ignored it would fail too soon.
const DEAD_PEER_WAIT: Duration = Duration::from_millis(1500);

/// A peer SIGKILLed before anything was sent to it: its endpoint is left behind with a dead
/// owner, and a restarted process could still take its address. A send to it must fail, not
/// hang; for rshm with FI_EIO once FI_RSHM_DEAD_PEER_TIMEOUT_MS (set here) has passed with no
/// successor, and not before. Other providers: no assertion beyond the deadline.
fn peer_died_unreached(r: &mut Rank) -> TResult {
    if r.prov == "rshm" && r.rank == 0 {
        // Before the provider reads its parameters (at the first endpoint).
        std::env::set_var("FI_RSHM_DEAD_PEER_TIMEOUT_MS", DEAD_PEER_WAIT.as_millis().to_string());
    }
    let (mut node, addrs) = setup(r, &NodeCfg::default())?;
    let peer = addrs[1 - r.rank];
    if r.rank == 1 {
        r.pmi.killme();
    }
    r.pmi.wait_exit_with(1, &mut node.progressor())?;
    node.timeout = ERR_TIMEOUT;
    let what = "send of 64 B to a peer SIGKILLed before anything was sent to it";
    let (f, took) = timed_send_fate(&mut node, None, peer, 64, what)?;
    r.pmi.step(&format!("{what}: {} after {took:?}", describe(&f)));
    if let Some(g) = gone_peer_contract(&r.prov) {
        // rshm times its waits with the coarse clock (a tick of up to 4 ms: smr_core::clock), so
        // it may give up a tick before this precise clock says; a provider that ignores the
        // variable gives up after 0.5 s.
        let early = Duration::from_millis(10);
        ensure!(took + early >= DEAD_PEER_WAIT, "{what}: failed after {took:?}, before FI_RSHM_DEAD_PEER_TIMEOUT_MS");
        GonePeer { within: DEAD_PEER_WAIT + g.within, ..g }.check(what, &f, took)?;
    }
    Ok(())
}

/// RMA and atomics towards a target that is SIGKILLed. Rank 1 registers 1 MiB plus a counter
/// word and serves; rank 0 runs 150 checked rounds (a write of 8 B, 4000 B or 70 000 B, a read
/// of the same range compared byte for byte, a fetch-add on the counter whose fetched value must
/// be the round number, a compare-swap every tenth round). Then rank 1 stops progressing, rank
/// 0 posts a 1 MiB write, a 1 MiB read, a fetch-add and a compare-swap, and rank 1 is killed.
/// Asserted: the atomics in flight (which only the target can apply) complete with an error, the
/// write and read in flight complete (successfully, if CMA finished them before the kill, or
/// with an error), and every write, read and atomic posted after the death fails; for rshm the
/// error is FI_EIO. No time bound beyond the harness's deadline (which only catches a hang).
fn peer_died_rma(r: &mut Rank) -> TResult {
    use super::rma_util::{self as u, must, payload, AKind, Peer, Spec, Target};
    use crate::harness::TestErr;
    const BIG: usize = 1 << 20;
    const ROUNDS: u64 = 150;
    let mut p = Peer::open(r, &Spec::new(u::RMA | u::ATOMIC, u::BASIC))?;
    p.exchange(r)?;
    let mut mine = Vec::new();
    if r.rank == 1 {
        let g = p.alloc(BIG + 64);
        let (_, mi) = p.reg(g, 0, BIG + 64, u::REMOTE_READ | u::REMOTE_WRITE, 0x5107, 0)?;
        mine.push(mi);
    }
    let all = p.share_mrs(r, &mine)?;
    if r.rank == 1 {
        // Serve (atomics need our progress) until rank 0 asks us to stop, then stop dead.
        r.pmi.wait_key_with("stop", &mut || p.progress().map(|_| ()))?;
        r.pmi.set("stopped", "1");
        let deadline = Instant::now() + Duration::from_secs(30);
        while r.pmi.get_with("posted", None)?.is_none() {
            ensure!(Instant::now() < deadline, "rank 0 never posted its operations");
            std::thread::sleep(Duration::from_millis(5));
        }
        r.pmi.killme();
    }
    let m = *all[1].first().ok_or_else(|| TestErr::Fail("no MR from rank 1".into()))?;
    let t = Target { dest: p.addrs[1], addr: m.addr, key: m.key };
    let counter = t.at(BIG);
    r.pmi.step("checked RMA and atomics while the target lives");
    let (mut bytes, mut cswaps) = (0usize, 0u64);
    for i in 0..ROUNDS {
        let len = [8usize, 4000, 70_000][i as usize % 3];
        let off = (i as usize * 4096) % (BIG - len);
        let data = pattern(1000 + i, len);
        let w = must("fi_write", p.write(&format!("fi_write #{i} ({len} B)"), data.clone(), t.at(off), None)?)?;
        p.wait_ok(w)?;
        let rd = must("fi_read", p.read(&format!("fi_read #{i} ({len} B)"), len, t.at(off))?)?;
        let d = p.wait_ok(rd)?;
        ensure!(payload(&d.what, &d.bufs[0], len)? == &data[..], "{}: read back other bytes than written", d.what);
        let what = format!("fi_fetch_atomic(SUM 1) #{i}");
        let one = 1u64.to_ne_bytes().to_vec();
        let f = must(&what, p.atomic(&what, AKind::Fetch, ffi::FI_UINT64, ffi::FI_SUM, 1, one, vec![], counter)?)?;
        let d = p.wait_ok(f)?;
        let got = u64::from_ne_bytes(payload(&d.what, &d.bufs[2], 8)?.try_into().expect("8 bytes"));
        ensure!(got == i + cswaps * 1000, "{what}: fetched {got}, expected {}", i + cswaps * 1000);
        if i % 10 == 9 {
            // The counter is i + 1 + 1000 * cswaps now: add 1000 by compare-swap.
            let now = i + 1 + cswaps * 1000;
            let what = format!("fi_compare_atomic(CSWAP) #{i}");
            let c = p.atomic(
                &what,
                AKind::Compare,
                ffi::FI_UINT64,
                ffi::FI_CSWAP,
                1,
                (now + 1000).to_ne_bytes().to_vec(),
                now.to_ne_bytes().to_vec(),
                counter,
            )?;
            let d = p.wait_ok(must(&what, c)?)?;
            let old = u64::from_ne_bytes(payload(&d.what, &d.bufs[2], 8)?.try_into().expect("8 bytes"));
            ensure!(old == now, "{what}: fetched {old}, expected {now}");
            cswaps += 1;
        }
        bytes += 2 * len;
    }
    r.pmi.set("stop", "1");
    r.pmi.wait_key_with("stopped", &mut || p.progress().map(|_| ()))?;
    let want_eio = r.prov == "rshm";
    // Posted while the target lives but no longer progresses: the atomics cannot be applied.
    let one = || 1u64.to_ne_bytes().to_vec();
    let mut inflight = Vec::new();
    let w = p.write("1 MiB fi_write in flight", pattern(7, BIG), t, None)?;
    inflight.push(("1 MiB fi_write in flight", w, false));
    let rd = p.read("1 MiB fi_read in flight", BIG, t)?;
    inflight.push(("1 MiB fi_read in flight", rd, false));
    // A read the target answers in one trip, in a buffer of ours: nothing but its progress
    // serves it (rshm answers reads of up to 512 B so whatever the target does). Ones of 1000 and
    // 10 000 B, which rshm makes itself from a target that does not progress where CMA is
    // permitted (as the 1 MiB ones), must fail only where CMA is not.
    inflight.push(("500 B fi_read in flight", p.read("500 B fi_read in flight", 500, t)?, want_eio));
    let cma = super::passive::cma_permitted();
    inflight.push(("1000 B fi_read in flight", p.read("1000 B fi_read in flight", 1000, t)?, want_eio && !cma));
    inflight.push(("10000 B fi_read in flight", p.read("10000 B fi_read in flight", 10_000, t)?, want_eio && !cma));
    // Likewise a write within an inject buffer, above rshm's `LONE_WRITE_MIN` (2 KiB).
    let w = p.write("3000 B fi_write in flight", pattern(10, 3000), t.at(BIG / 2), None)?;
    inflight.push(("3000 B fi_write in flight", w, want_eio && !cma));
    let f =
        p.atomic("fi_fetch_atomic in flight", AKind::Fetch, ffi::FI_UINT64, ffi::FI_SUM, 1, one(), vec![], counter)?;
    inflight.push(("fi_fetch_atomic in flight", f, true));
    let c = p.atomic(
        "fi_compare_atomic in flight",
        AKind::Compare,
        ffi::FI_UINT64,
        ffi::FI_CSWAP,
        1,
        one(),
        0u64.to_ne_bytes().to_vec(),
        counter,
    )?;
    inflight.push(("fi_compare_atomic in flight", c, true));
    r.pmi.set("posted", "1");
    r.pmi.wait_exit_with(1, &mut || p.progress().map(|_| ()))?;
    r.pmi.step("target killed; waiting for the operations in flight");
    let mut fates = Vec::new();
    let check = |what: &str, code: i32, must_fail: bool| -> TResult {
        ensure!(!(must_fail && code == 0), "{what}: completed successfully (the target never applied it)");
        if want_eio && code != 0 {
            ensure!(code == ffi::FI_EIO as i32, "{what}: {} (expected FI_EIO)", fabric::errname(-code));
        }
        Ok(())
    };
    let mut succeeded = std::collections::HashMap::new();
    for (what, posted, must_fail) in inflight {
        let code = match posted {
            Ok(id) => {
                let done = p.wait(id)?;
                let code = done.err;
                if code == 0 {
                    succeeded.insert(what, done);
                }
                code
            }
            Err(c) => -c,
        };
        check(what, code, must_fail)?;
        fates.push(format!("{what}: {}", if code == 0 { "success".into() } else { fabric::errname(-code) }));
    }
    // A 10 000 B read that succeeded after the 1 MiB write did (both made by the initiator, the
    // write complete before the read was posted) holds the write's first bytes.
    if let (Some(_), Some(read)) =
        (succeeded.get("1 MiB fi_write in flight"), succeeded.get("10000 B fi_read in flight"))
    {
        let got = payload("10000 B fi_read in flight", &read.bufs[0], 10_000)?;
        ensure!(
            got == &pattern(7, BIG)[..10_000],
            "10000 B fi_read in flight: succeeded with other bytes than the write's before it"
        );
    }
    // The target is known dead now: nothing posted from here on can reach it.
    let after: Vec<(&str, Result<u64, i32>)> = vec![
        ("8 B fi_write after", p.write("8 B fi_write after", pattern(8, 8), t, None)?),
        ("3000 B fi_write after", p.write("3000 B fi_write after", pattern(11, 3000), t, None)?),
        ("70000 B fi_write after", p.write("70000 B fi_write after", pattern(9, 70_000), t, None)?),
        ("8 B fi_read after", p.read("8 B fi_read after", 8, t)?),
        (
            "fi_atomic after",
            p.atomic("fi_atomic after", AKind::Base, ffi::FI_UINT64, ffi::FI_SUM, 1, one(), vec![], counter)?,
        ),
        (
            "fi_fetch_atomic after",
            p.atomic("fi_fetch_atomic after", AKind::Fetch, ffi::FI_UINT64, ffi::FI_SUM, 1, one(), vec![], counter)?,
        ),
    ];
    for (what, posted) in after {
        let code = match posted {
            Ok(id) => p.wait(id)?.err,
            Err(c) => -c,
        };
        check(what, code, true)?;
        fates.push(format!("{what}: {}", fabric::errname(-code)));
    }
    r.pmi.step(&format!(
        "note: {ROUNDS} checked rounds ({bytes} bytes written and read back, {ROUNDS} fetch-adds, {cswaps} \
         compare-swaps); {}",
        fates.join("; ")
    ));
    Ok(())
}

/// A target SIGKILLed in the middle of a stream of one-sided operations: rank 0 keeps 8
/// writes (8 B to 128 KiB), reads (of a slot with no write in flight, compared with what was
/// last written there) and fetch-adds in flight to rank 1, which serves until rank 0, after a
/// random number of completed operations (50-449; the seed is in the note, `RSHM_KILL_SEED`
/// replays it), asks the coordinator
/// to kill it. Asserted: every operation completes (no hang); each one that succeeded is right
/// (reads return the bytes last written, fetch-adds fetch distinct values below the number
/// issued); once one has failed, all 16 posted after it fail too; for rshm the errors are FI_EIO.
fn peer_died_rma_midstream(r: &mut Rank) -> TResult {
    use super::rma_util::{self as u, payload, AKind, Peer, Spec, Target};
    use crate::harness::TestErr;
    const SLOTS: usize = 8;
    const SLOT: usize = 128 << 10;
    const WINDOW: usize = 8;
    let mut p = Peer::open(r, &Spec::new(u::RMA | u::ATOMIC, u::BASIC))?;
    p.exchange(r)?;
    let mut mine = Vec::new();
    if r.rank == 1 {
        let g = p.alloc(SLOTS * SLOT + 64);
        let (_, mi) = p.reg(g, 0, SLOTS * SLOT + 64, u::REMOTE_READ | u::REMOTE_WRITE, 0x5108, 0)?;
        mine.push(mi);
    }
    let all = p.share_mrs(r, &mine)?;
    if r.rank == 1 {
        // Serve until told to die; then die without another progress call.
        r.pmi.wait_key_with("kill", &mut || p.progress().map(|_| ()))?;
        r.pmi.killme();
    }
    let m = *all[1].first().ok_or_else(|| TestErr::Fail("no MR from rank 1".into()))?;
    let t = Target { dest: p.addrs[1], addr: m.addr, key: m.key };
    let counter = t.at(SLOTS * SLOT);
    // RSHM_KILL_SEED replays a run's kill point.
    let seed = crate::harness::kill_seed();
    let kill_after = 50 + seed % 400;
    r.pmi.step(&format!("stream; the target is killed after {kill_after} completed operations (seed {seed})"));
    #[derive(Clone)]
    enum Kind {
        Write { slot: usize, data: Vec<u8> },
        Read { slot: usize, expect: Vec<u8> },
        Fetch,
    }
    let want_eio = r.prov == "rshm";
    // Per slot: the bytes of its last successful write, and whether a write to it is in flight.
    let mut written: Vec<Vec<u8>> = vec![Vec::new(); SLOTS];
    let mut writing = [false; SLOTS];
    let mut inflight: std::collections::VecDeque<(u64, u64, Kind)> = Default::default();
    let (mut issued, mut completed, mut ok_counts) = (0u64, 0u64, [0u64; 3]);
    let (mut fetches, mut fetched) = (0u64, Vec::new());
    let mut first_error: Option<u64> = None; // ops issued before the first error was seen
    let mut killed = false;
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        // 16 operations posted after the first failure was seen: the stream ends.
        let done_posting = |first_error: Option<u64>, issued: u64| first_error.is_some_and(|n| issued - n >= 16);
        if done_posting(first_error, issued) && inflight.is_empty() {
            break;
        }
        while inflight.len() < WINDOW && !done_posting(first_error, issued) {
            let i = issued;
            let slot = (i as usize) % SLOTS;
            let kind = match i % 3 {
                0 if !writing[slot] => {
                    let len = [8usize, 4000, 70_000, SLOT][(i as usize / 3) % 4];
                    Kind::Write { slot, data: pattern(5000 + i, len) }
                }
                1 if !writing[slot] && !written[slot].is_empty() => Kind::Read { slot, expect: written[slot].clone() },
                _ => Kind::Fetch,
            };
            let what = format!("op #{i}");
            let posted = match &kind {
                Kind::Write { slot, data } => p.write(&what, data.clone(), t.at(slot * SLOT), None)?,
                Kind::Read { slot, expect } => p.read(&what, expect.len(), t.at(slot * SLOT))?,
                Kind::Fetch => {
                    fetches += 1;
                    let one = 1u64.to_ne_bytes().to_vec();
                    p.atomic(&what, AKind::Fetch, ffi::FI_UINT64, ffi::FI_SUM, 1, one, vec![], counter)?
                }
            };
            issued += 1;
            match posted {
                Ok(id) => {
                    if let Kind::Write { slot, .. } = &kind {
                        writing[*slot] = true;
                    }
                    inflight.push_back((id, i, kind));
                }
                Err(code) => {
                    // Refused at once: only once the target was killed, and with the contract's code.
                    ensure!(killed, "op #{i} refused with {} while the target lived", fabric::errname(code));
                    if want_eio {
                        ensure!(
                            -code == ffi::FI_EIO as i32,
                            "op #{i} refused with {} (expected FI_EIO)",
                            fabric::errname(code)
                        );
                    }
                    first_error.get_or_insert(issued);
                }
            }
        }
        let Some((id, index, kind)) = inflight.pop_front() else { continue };
        let d = p.wait(id)?;
        completed += 1;
        if let Kind::Write { slot, .. } = &kind {
            writing[*slot] = false;
        }
        if d.err != 0 {
            ensure!(killed, "{}: {} before the target was killed", d.what, fabric::errname(-d.err));
            if want_eio {
                ensure!(d.err == ffi::FI_EIO as i32, "{}: {} (expected FI_EIO)", d.what, fabric::errname(-d.err));
            }
            first_error.get_or_insert(issued);
        } else {
            let posted_after = first_error.is_some_and(|n| index >= n);
            ensure!(!posted_after, "{}: succeeded although posted after an operation had failed", d.what);
            match kind {
                Kind::Write { slot, data } => {
                    written[slot] = data;
                    ok_counts[0] += 1;
                }
                Kind::Read { expect, .. } => {
                    ensure!(payload(&d.what, &d.bufs[0], expect.len())? == &expect[..], "{}: read other bytes", d.what);
                    ok_counts[1] += 1;
                }
                Kind::Fetch => {
                    fetched.push(u64::from_ne_bytes(payload(&d.what, &d.bufs[2], 8)?.try_into().expect("8 bytes")));
                    ok_counts[2] += 1;
                }
            }
        }
        if !killed && completed >= kill_after {
            r.pmi.set("kill", "1");
            killed = true;
        }
        ensure!(
            Instant::now() < deadline,
            "the stream did not end: {completed} completed, first error {first_error:?}"
        );
    }
    ensure!(killed && first_error.is_some(), "no operation failed after the target was killed");
    let mut distinct = fetched.clone();
    distinct.sort_unstable();
    distinct.dedup();
    ensure!(distinct.len() == fetched.len(), "fetch-adds fetched a value twice: {fetched:?}");
    ensure!(fetched.iter().all(|&v| v < fetches), "a fetch-add fetched a value >= the {fetches} issued");
    r.pmi.wait_exit_with(1, &mut || p.progress().map(|_| ()))?;
    r.pmi.step(&format!(
        "note: seed {seed}: {issued} operations, {} writes, {} reads and {} fetch-adds checked, the rest failed \
         ({} posted after the first failure)",
        ok_counts[0],
        ok_counts[1],
        ok_counts[2],
        issued - first_error.unwrap_or(issued)
    ));
    Ok(())
}
