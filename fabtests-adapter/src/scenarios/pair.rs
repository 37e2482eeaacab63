//! Two-process (and a few three-process) data scenarios with content checks.

use super::{check_recv, check_send, scn, seed, setup, Scenario, SIZES};
use crate::fabric::{self, ffi, FiAddr, FI_ADDR_UNSPEC};
use crate::harness::{check_pattern, fi_ok, pattern, Completion, Node, NodeCfg, Rank, Rx, TResult, TestErr, Tx};
use crate::{bail, ensure};
use std::time::{Duration, Instant};

pub fn scenarios() -> Vec<Scenario> {
    vec![
        scn("pair/msg_pingpong", 2, 60, msg_pingpong, "fi_send/fi_recv ping-pong, sizes 0 B..16 MiB, content checked"),
        scn("pair/tagged_pingpong", 2, 60, tagged_pingpong, "fi_tsend/fi_trecv ping-pong, sizes 0 B..16 MiB"),
        scn("pair/msg_bw", 2, 60, msg_bw, "windowed bandwidth (untagged), content checked"),
        scn("pair/tagged_bw", 2, 60, tagged_bw, "windowed bandwidth (tagged), content checked"),
        scn("pair/msg_iov", 2, 40, msg_iov, "fi_sendv/fi_recvv and msg iovs with different splits"),
        scn("pair/unexpected", 2, 60, unexpected, "2 x rx_size unexpected messages before any receive is posted"),
        scn("pair/multi_recv", 2, 40, multi_recv, "FI_MULTI_RECV buffers, FI_OPT_MIN_MULTI_RECV, release and repost"),
        scn("pair/remote_cq_data", 2, 40, remote_cq_data, "senddata/tsenddata/injectdata/sendmsg: FI_REMOTE_CQ_DATA"),
        scn("pair/directed_recv", 3, 40, directed_recv, "FI_DIRECTED_RECV receives and FI_SOURCE addresses, 2 senders"),
        scn("pair/tag_ignore", 2, 40, tag_ignore, "tag matching with ignore bits, expected and unexpected"),
        scn("pair/peek_claim_discard", 2, 40, peek_claim_discard, "FI_PEEK, FI_PEEK|FI_CLAIM, FI_CLAIM|FI_DISCARD"),
        scn("pair/cancel", 2, 40, cancel, "fi_cancel of posted receives: FI_ECANCELED, no message lost"),
        scn("pair/inject", 2, 40, inject, "fi_inject/tinject/injectdata up to inject_size; no completions"),
        scn("pair/selective_completion", 2, 40, selective_completion, "FI_SELECTIVE_COMPLETION with FI_COMPLETION"),
        scn("pair/delivery_complete", 2, 40, delivery_complete, "FI_DELIVERY_COMPLETE: data is at the target first"),
        scn("pair/av_insert_during_traffic", 3, 40, av_insert_during_traffic, "AV insert/remove while traffic flows"),
        scn(
            "pair/cntr_wait_large",
            2,
            60,
            cntr_wait_large,
            "8 MiB ping-pong waited for in fi_cntr_wait (4x the SAR pool): no sleep outlasts the transfer",
        ),
    ]
}

fn peer_of(r: &Rank) -> usize {
    1 - r.rank
}

fn default_cfg() -> NodeCfg {
    NodeCfg::default()
}

fn iters_for(size: usize) -> usize {
    match size {
        s if s >= 1 << 20 => 3,
        s if s >= 65536 => 10,
        _ => 30,
    }
}

fn pingpong(r: &mut Rank, tagged: bool) -> TResult {
    let (mut node, addrs) = setup(r, &default_cfg())?;
    let peer = addrs[peer_of(r)];
    let kind = if tagged { "tagged" } else { "msg" };
    r.pmi.barrier_with(&mut node.progressor())?;
    for &size in SIZES {
        r.pmi.step(&format!("{kind} ping-pong size {size}"));
        for it in 0..iters_for(size) {
            let tag = size as u64 ^ 0x5000_0000;
            let (rx, tx) = if tagged { (Rx::tagged(tag, 0), Tx::tagged(tag)) } else { (Rx::default(), Tx::default()) };
            let s_ping = seed(size as u64, it as u64, 0);
            let s_pong = seed(size as u64, it as u64, 1);
            let what = format!("{kind} size {size} iter {it}");
            let rid = node.recv(size, peer, &rx)?;
            if r.rank == 0 {
                let sid = node.send(&pattern(s_ping, size), peer, &tx)?;
                check_send(&node.wait_op(sid)?, &what)?;
                let c = node.wait_op(rid)?;
                check_recv(&c, &what, size, tagged)?;
                check_pattern(&what, s_pong, &c.payload, size)?;
                if tagged {
                    ensure!(c.tag == tag, "{what}: tag {:#x} != {tag:#x}", c.tag);
                }
            } else {
                let c = node.wait_op(rid)?;
                check_recv(&c, &what, size, tagged)?;
                check_pattern(&what, s_ping, &c.payload, size)?;
                let sid = node.send(&pattern(s_pong, size), peer, &tx)?;
                check_send(&node.wait_op(sid)?, &what)?;
            }
        }
    }
    super::finish(r, &mut node)
}

fn msg_pingpong(r: &mut Rank) -> TResult {
    pingpong(r, false)
}

fn tagged_pingpong(r: &mut Rank) -> TResult {
    pingpong(r, true)
}

fn bandwidth(r: &mut Rank, tagged: bool) -> TResult {
    let (mut node, addrs) = setup(r, &default_cfg())?;
    let peer = addrs[peer_of(r)];
    r.pmi.barrier_with(&mut node.progressor())?;
    for (size, window, windows) in [(64usize, 64usize, 4usize), (4096, 64, 4), (65536, 32, 3), (1 << 20, 8, 2)] {
        r.pmi.step(&format!("bw size {size} window {window}"));
        let t0 = Instant::now();
        for w in 0..windows {
            let what = format!("bw size {size} window {w}");
            if r.rank == 1 {
                let mut ids = Vec::new();
                for i in 0..window {
                    let rx = if tagged { Rx::tagged(i as u64, 0) } else { Rx::default() };
                    ids.push(node.recv(size, peer, &rx)?);
                }
                for (i, id) in ids.into_iter().enumerate() {
                    let c = node.wait_op(id)?;
                    check_recv(&c, &what, size, tagged)?;
                    check_pattern(&what, seed(size as u64, w as u64, i as u64), &c.payload, size)?;
                }
                let ack = node.send(&[], peer, &Tx::default())?;
                node.wait_ok(ack, "ack")?;
            } else {
                let ack = node.recv(0, peer, &Rx::default())?;
                let mut ids = Vec::new();
                for i in 0..window {
                    let tx = if tagged { Tx::tagged(i as u64) } else { Tx::default() };
                    ids.push(node.send(&pattern(seed(size as u64, w as u64, i as u64), size), peer, &tx)?);
                }
                for id in ids {
                    check_send(&node.wait_op(id)?, &what)?;
                }
                node.wait_ok(ack, "ack")?;
            }
        }
        if r.rank == 0 {
            let bytes = (size * window * windows) as f64;
            r.pmi.step(&format!("bw size {size}: {:.1} MB/s", bytes / t0.elapsed().as_secs_f64() / 1e6));
        }
    }
    super::finish(r, &mut node)
}

fn msg_bw(r: &mut Rank) -> TResult {
    bandwidth(r, false)
}

fn tagged_bw(r: &mut Rank) -> TResult {
    bandwidth(r, true)
}

fn msg_iov(r: &mut Rank) -> TResult {
    let (mut node, addrs) = setup(r, &default_cfg())?;
    let peer = addrs[peer_of(r)];
    let tx_lim = node.info.get().tx_attr().map_or(1, |t| t.iov_limit);
    let rx_lim = node.info.get().rx_attr().map_or(1, |t| t.iov_limit);
    let (tx_iov, rx_iov) = (tx_lim.min(3), rx_lim.min(2));
    let mut cases = Vec::new();
    for &size in &[64usize, 5000, 70000, 1 << 20] {
        for tagged in [false, true] {
            for usemsg in [false, true] {
                cases.push((size, tagged, usemsg));
            }
        }
    }
    // Receiver posts everything first, then the sender sends in the same order.
    let mut rids = Vec::new();
    if r.rank == 1 {
        for (k, &(size, tagged, usemsg)) in cases.iter().enumerate() {
            let rx = Rx {
                tag: tagged.then_some((k as u64, 0)),
                flags: usemsg.then_some(0),
                iov: rx_iov,
                ..Default::default()
            };
            rids.push(node.recv(size, peer, &rx)?);
        }
    }
    r.pmi.barrier_with(&mut node.progressor())?;
    if r.rank == 0 {
        let mut sids = Vec::new();
        for (k, &(size, tagged, usemsg)) in cases.iter().enumerate() {
            let tx =
                Tx { tag: tagged.then_some(k as u64), flags: usemsg.then_some(0), iov: tx_iov, ..Default::default() };
            sids.push(node.send(&pattern(k as u64, size), peer, &tx)?);
        }
        for id in sids {
            check_send(&node.wait_op(id)?, "iov send")?;
        }
    } else {
        for (k, (&(size, tagged, usemsg), id)) in cases.iter().zip(rids).enumerate() {
            let what = format!("iov case {k} (size {size}, tagged {tagged}, msg {usemsg}, {tx_iov}->{rx_iov} iovs)");
            let c = node.wait_op(id)?;
            check_recv(&c, &what, size, tagged)?;
            check_pattern(&what, k as u64, &c.payload, size)?;
        }
    }
    super::finish(r, &mut node)
}

fn unexpected(r: &mut Rank) -> TResult {
    let (mut node, addrs) = setup(r, &default_cfg())?;
    let peer = addrs[peer_of(r)];
    let rx_size = node.info.get().rx_attr().map_or(1024, |a| a.size).clamp(64, 4096);
    let n = 2 * rx_size;
    let sizes = [0usize, 64, 208, 4096, 4097];
    let size_of = |i: usize| {
        if i >= n - 3 {
            [65536, 1 << 20, 300][i - (n - 3)]
        } else {
            sizes[i % sizes.len()]
        }
    };
    r.pmi.barrier_with(&mut node.progressor())?;
    if r.rank == 0 {
        r.pmi.step(&format!("sending {n} messages unexpected"));
        let mut ids = Vec::new();
        for i in 0..n {
            ids.push(node.send(&pattern(i as u64, size_of(i)), peer, &Tx::default())?);
        }
        r.pmi.set("sent", "1");
        r.pmi.step("all sends posted");
        for id in ids {
            check_send(&node.wait_op(id)?, "unexpected send")?;
        }
    } else {
        // Progress without posting anything until the sender is done (or 3 s passed: a
        // provider may hold the sender with -FI_EAGAIN until receives are posted).
        let t = Instant::now();
        loop {
            if r.pmi.get_with("sent", Some(&mut node.progressor()))?.is_some() || t.elapsed() > Duration::from_secs(3) {
                break;
            }
            node.progress_for(Duration::from_millis(5))?;
        }
        r.pmi.step(&format!("posting {n} receives"));
        let mut ids = Vec::new();
        for i in 0..n {
            ids.push(node.recv(size_of(i), FI_ADDR_UNSPEC, &Rx::default())?);
            // Reap as we go so that more receives than rx_size can be posted.
            node.progress()?;
        }
        for (i, id) in ids.into_iter().enumerate() {
            let what = format!("unexpected message {i} of {n}");
            let c = node.wait_op(id)?;
            check_recv(&c, &what, size_of(i), false)?;
            check_pattern(&what, i as u64, &c.payload, size_of(i))?;
        }
    }
    super::finish(r, &mut node)
}

fn multi_recv(r: &mut Rank) -> TResult {
    // The threshold must cover the largest message, or the provider may have to truncate.
    let min = 16384;
    let cfg =
        NodeCfg { caps: (ffi::FI_MSG | ffi::FI_MULTI_RECV) as u64, min_multi_recv: Some(min), ..Default::default() };
    let (mut node, addrs) = setup(r, &cfg)?;
    let peer = addrs[peer_of(r)];
    let n = 300;
    let size_of = |i: usize| if i % 25 == 24 { 16384 } else { 1 + (i * 37) % 1500 };
    let bufsize = 64 * 1024;
    if r.rank == 1 {
        let mut posted = vec![
            node.recv(bufsize, FI_ADDR_UNSPEC, &Rx { multi: true, ..Default::default() })?,
            node.recv(bufsize, FI_ADDR_UNSPEC, &Rx { multi: true, ..Default::default() })?,
        ];
        r.pmi.barrier_with(&mut node.progressor())?;
        let mut got = 0usize;
        let mut released = 0;
        let mut last_off: std::collections::HashMap<u64, usize> = Default::default();
        let deadline = Instant::now() + node.timeout;
        while got < n {
            ensure!(Instant::now() < deadline, "timeout: {got} of {n} messages received through multi-recv");
            node.progress()?;
            for c in node.take_completions() {
                let op = c.op.unwrap_or(0);
                ensure!(posted.contains(&op), "completion for an unknown context (op {:?})", c.op);
                c.ok("multi-recv")?;
                if c.len > 0 {
                    let what = format!("multi-recv message {got}");
                    check_recv(&c, &what, size_of(got), false)?;
                    check_pattern(&what, got as u64, &c.payload, size_of(got))?;
                    let off = c.buf_off.unwrap_or(0);
                    if let Some(&prev) = last_off.get(&op) {
                        ensure!(off > prev, "{what}: offset {off} not after the previous message's {prev}");
                    }
                    last_off.insert(op, off);
                    got += 1;
                }
                if c.flags & ffi::FI_MULTI_RECV as u64 != 0 {
                    released += 1;
                    ensure!(!node.is_pending(op), "internal: released buffer still pending");
                    posted.retain(|&p| p != op);
                    posted.push(node.recv(bufsize, FI_ADDR_UNSPEC, &Rx { multi: true, ..Default::default() })?);
                }
            }
            std::thread::yield_now();
        }
        ensure!(released >= 2, "{n} messages filled 64 KiB buffers but only {released} FI_MULTI_RECV releases came");
    } else {
        r.pmi.barrier_with(&mut node.progressor())?;
        let mut ids = Vec::new();
        for i in 0..n {
            ids.push(node.send(&pattern(i as u64, size_of(i)), peer, &Tx::default())?);
        }
        for id in ids {
            check_send(&node.wait_op(id)?, "send to multi-recv")?;
        }
    }
    super::finish(r, &mut node)
}

fn remote_cq_data(r: &mut Rank) -> TResult {
    let (mut node, addrs) = setup(r, &default_cfg())?;
    let peer = addrs[peer_of(r)];
    let dsize = node.info.get().domain_attr().map_or(0, |d| d.cq_data_size);
    if dsize == 0 {
        return Err(TestErr::Nos(fabric::EOPNOTSUPP, "cq_data_size is 0".into()));
    }
    let mask = if dsize >= 8 { u64::MAX } else { (1u64 << (8 * dsize)) - 1 };
    // (kind, size, tagged)
    let cases: Vec<(&str, usize, bool)> = vec![
        ("senddata", 64, false),
        ("senddata", 70000, false),
        ("tsenddata", 64, true),
        ("tsenddata", 70000, true),
        ("injectdata", 32, false),
        ("tinjectdata", 32, true),
        ("sendmsg", 5000, false),
        ("tsendmsg", 5000, true),
        ("plain send", 64, false),
    ];
    let data = |k: usize| (0xC0DE_0000_0000_0000u64 | (0xA5A5_0000 + k as u64)) & mask;
    let mut rids = Vec::new();
    if r.rank == 1 {
        for (k, &(_, size, tagged)) in cases.iter().enumerate() {
            let rx = if tagged { Rx::tagged(k as u64, 0) } else { Rx::default() };
            rids.push(node.recv(size, peer, &rx)?);
        }
    }
    r.pmi.barrier_with(&mut node.progressor())?;
    if r.rank == 0 {
        let mut sids = Vec::new();
        for (k, &(kind, size, tagged)) in cases.iter().enumerate() {
            let p = pattern(k as u64, size);
            let tag = tagged.then_some(k as u64);
            match kind {
                "injectdata" | "tinjectdata" => node.inject(&p, peer, tag, Some(data(k)))?,
                "plain send" => sids.push(node.send(&p, peer, &Tx { tag, ..Default::default() })?),
                "sendmsg" | "tsendmsg" => {
                    sids.push(node.send(&p, peer, &Tx { tag, data: Some(data(k)), flags: Some(0), iov: 1 })?)
                }
                _ => sids.push(node.send(&p, peer, &Tx { tag, data: Some(data(k)), ..Default::default() })?),
            }
        }
        for id in sids {
            check_send(&node.wait_op(id)?, "send with data")?;
        }
    } else {
        for (k, (&(kind, size, tagged), id)) in cases.iter().zip(rids).enumerate() {
            let c = node.wait_op(id)?;
            check_recv(&c, kind, size, tagged)?;
            check_pattern(kind, k as u64, &c.payload, size)?;
            let has = c.flags & ffi::FI_REMOTE_CQ_DATA as u64 != 0;
            if kind == "plain send" {
                ensure!(!has, "{kind}: completion has FI_REMOTE_CQ_DATA although no data was sent");
            } else {
                ensure!(has, "{kind} size {size}: completion flags {:#x} lack FI_REMOTE_CQ_DATA", c.flags);
                ensure!(c.data & mask == data(k), "{kind} size {size}: data {:#x} != {:#x}", c.data, data(k));
            }
        }
    }
    super::finish(r, &mut node)
}

fn directed_recv(r: &mut Rank) -> TResult {
    let cfg = NodeCfg::caps((ffi::FI_MSG | ffi::FI_TAGGED) as u64 | ffi::FI_DIRECTED_RECV | ffi::FI_SOURCE);
    let (mut node, addrs) = setup(r, &cfg)?;
    if r.rank == 0 {
        // Posted in this order: the first receive for tag 7 names rank 2, so rank 1's message
        // (which may well arrive first) must skip it.
        let a = node.recv(256, addrs[2], &Rx::tagged(7, 0))?;
        let b = node.recv(256, addrs[1], &Rx::tagged(7, 0))?;
        let c = node.recv(256, addrs[2], &Rx::default())?;
        let d = node.recv(256, addrs[1], &Rx::default())?;
        r.pmi.barrier_with(&mut node.progressor())?;
        for (id, from, s, what) in
            [(a, 2, 2, "tagged from 2"), (b, 1, 1, "tagged from 1"), (c, 2, 12, "msg from 2"), (d, 1, 11, "msg from 1")]
        {
            let cpl = node.wait_op(id)?;
            check_recv(&cpl, what, 256, what.starts_with("tagged"))?;
            check_pattern(&format!("directed receive {what}"), s, &cpl.payload, 256)?;
            check_src(&cpl, addrs[from], what)?;
        }
        // FI_SOURCE on wildcard receives: rank 1 then rank 2 (ordered by a barrier).
        for from in [1usize, 2] {
            let id = node.recv(128, FI_ADDR_UNSPEC, &Rx::default())?;
            r.pmi.barrier_with(&mut node.progressor())?;
            let cpl = node.wait_op(id)?;
            check_recv(&cpl, "wildcard", 128, false)?;
            check_pattern("wildcard receive", 100 + from as u64, &cpl.payload, 128)?;
            check_src(&cpl, addrs[from], "wildcard receive")?;
        }
    } else {
        r.pmi.barrier_with(&mut node.progressor())?;
        let t = node.send(&pattern(r.rank as u64, 256), addrs[0], &Tx::tagged(7))?;
        let m = node.send(&pattern(10 + r.rank as u64, 256), addrs[0], &Tx::default())?;
        node.wait_ok(t, "tagged send")?;
        node.wait_ok(m, "send")?;
        for from in [1usize, 2] {
            r.pmi.barrier_with(&mut node.progressor())?;
            if from == r.rank {
                let id = node.send(&pattern(100 + from as u64, 128), addrs[0], &Tx::default())?;
                node.wait_ok(id, "send")?;
            }
        }
    }
    super::finish(r, &mut node)
}

fn check_src(c: &Completion, want: FiAddr, what: &str) -> TResult {
    ensure!(c.src == want, "{what}: FI_SOURCE address {} != sender's fi_addr {want}", fmt_addr(c.src));
    Ok(())
}

fn fmt_addr(a: FiAddr) -> String {
    if a == fabric::FI_ADDR_NOTAVAIL {
        "FI_ADDR_NOTAVAIL".into()
    } else {
        a.to_string()
    }
}

const TAGS: [u64; 5] = [0x1234, 0x5678, 0x12ff, 0xabcd, 0xffff_0000_0000_0001];

fn tag_ignore(r: &mut Rank) -> TResult {
    let (mut node, addrs) = setup(r, &default_cfg())?;
    let peer = addrs[peer_of(r)];
    // Phase 1, expected: receives are posted before the messages are sent.
    // Receive i gets the message with tag TAGS[EXPECT1[i]].
    let recvs1: [(u64, u64); 5] = [(0x5600, 0xff), (0x1200, 0xff), (0x1200, 0xff), (0xabcd, 0), (0, u64::MAX)];
    const EXPECT1: [usize; 5] = [1, 0, 2, 3, 4];
    // Phase 2, unexpected: the messages are all there before these receives are posted.
    let recvs2: [(u64, u64); 5] = [(0xabcd, 0), (0x5600, 0xff), (0x1200, 0xff), (0x1200, 0xff), (0, u64::MAX)];
    const EXPECT2: [usize; 5] = [3, 1, 0, 2, 4];
    if r.rank == 1 {
        let ids: Vec<u64> =
            recvs1.iter().map(|&(t, i)| node.recv(100, peer, &Rx::tagged(t, i))).collect::<TResult<_>>()?;
        r.pmi.barrier_with(&mut node.progressor())?;
        for (k, id) in ids.into_iter().enumerate() {
            let want = TAGS[EXPECT1[k]];
            let c = node.wait_op(id)?;
            let what = format!("expected receive {k} (tag {:#x}/ignore {:#x})", recvs1[k].0, recvs1[k].1);
            check_recv(&c, &what, 100, true)?;
            ensure!(c.tag == want, "{what}: matched tag {:#x}, expected {want:#x}", c.tag);
            check_pattern(&what, want, &c.payload, 100)?;
        }
        r.pmi.barrier_with(&mut node.progressor())?;
        r.pmi.wait_key_with("sent2", &mut node.progressor())?;
        node.progress_for(Duration::from_millis(50))?;
        for (k, &(t, i)) in recvs2.iter().enumerate() {
            let want = TAGS[EXPECT2[k]];
            let id = node.recv(100, peer, &Rx::tagged(t, i))?;
            let c = node.wait_op(id)?;
            let what = format!("unexpected-path receive {k} (tag {t:#x}/ignore {i:#x})");
            check_recv(&c, &what, 100, true)?;
            ensure!(c.tag == want, "{what}: matched tag {:#x}, expected {want:#x}", c.tag);
            check_pattern(&what, want ^ 0xffff, &c.payload, 100)?;
        }
    } else {
        r.pmi.barrier_with(&mut node.progressor())?;
        let ids: Vec<u64> =
            TAGS.iter().map(|&t| node.send(&pattern(t, 100), peer, &Tx::tagged(t))).collect::<TResult<_>>()?;
        for id in ids {
            node.wait_ok(id, "tagged send")?;
        }
        r.pmi.barrier_with(&mut node.progressor())?;
        let ids: Vec<u64> =
            TAGS.iter().map(|&t| node.send(&pattern(t ^ 0xffff, 100), peer, &Tx::tagged(t))).collect::<TResult<_>>()?;
        for id in ids {
            node.wait_ok(id, "tagged send")?;
        }
        r.pmi.set("sent2", "1");
    }
    super::finish(r, &mut node)
}

fn peek_until(node: &mut Node, tag: u64, flags: u64, what: &str) -> TResult<(u64, Completion)> {
    let deadline = Instant::now() + node.timeout;
    loop {
        let id = node.peek(tag, 0, FI_ADDR_UNSPEC, flags)?;
        let c = node.wait_op(id)?;
        if c.err == 0 {
            return Ok((id, c));
        }
        ensure!(c.err == ffi::FI_ENOMSG as i32, "{what}: FI_PEEK completed with {}", fabric::errname(-c.err));
        ensure!(Instant::now() < deadline, "{what}: FI_PEEK kept returning FI_ENOMSG for a sent message");
        node.progress_for(Duration::from_millis(2))?;
    }
}

fn peek_claim_discard(r: &mut Rank) -> TResult {
    let (mut node, addrs) = setup(r, &default_cfg())?;
    let peer = addrs[peer_of(r)];
    let msgs: [(u64, usize); 4] = [(1, 100), (2, 200), (3, 300), (4, 5000)];
    r.pmi.barrier_with(&mut node.progressor())?;
    if r.rank == 1 {
        // A peek for a tag nobody sent: error completion FI_ENOMSG.
        let id = node.peek(99, 0, FI_ADDR_UNSPEC, 0)?;
        let c = node.wait_op(id)?;
        ensure!(
            c.err == ffi::FI_ENOMSG as i32,
            "FI_PEEK for an unsent tag completed with {} (expected FI_ENOMSG)",
            if c.err == 0 { "success".to_string() } else { fabric::errname(-c.err) }
        );
        r.pmi.wait_key_with("sent", &mut node.progressor())?;
        // Plain peek: length and tag reported, message stays.
        let (_, c) = peek_until(&mut node, 1, 0, "peek tag 1")?;
        ensure!(c.len == 100 && c.tag == 1, "FI_PEEK of tag 1: len {} tag {:#x}", c.len, c.tag);
        let (_, c) = peek_until(&mut node, 4, 0, "peek tag 4 (5000 B)")?;
        ensure!(c.len == 5000 && c.tag == 4, "FI_PEEK of tag 4: len {} tag {:#x}", c.len, c.tag);
        // Peek + claim, then receive the claimed message with FI_CLAIM.
        let (pid, c) = peek_until(&mut node, 2, ffi::FI_CLAIM, "peek|claim tag 2")?;
        ensure!(c.len == 200, "FI_PEEK|FI_CLAIM of tag 2: len {}", c.len);
        node.claim(pid, 200, 2, false)?;
        let c = node.wait_op(pid)?;
        check_recv(&c, "FI_CLAIM receive of tag 2", 200, true)?;
        check_pattern("claimed message", 2, &c.payload, 200)?;
        // Peek + claim, then discard.
        let (pid, _) = peek_until(&mut node, 3, ffi::FI_CLAIM, "peek|claim tag 3")?;
        node.claim(pid, 0, 3, true)?;
        node.wait_op(pid)?.ok("FI_CLAIM|FI_DISCARD")?;
        // The peeked (not claimed) tag 1 is still receivable.
        let id = node.recv(100, FI_ADDR_UNSPEC, &Rx::tagged(1, 0))?;
        let c = node.wait_op(id)?;
        check_recv(&c, "receive after FI_PEEK", 100, true)?;
        check_pattern("message 1 after peek", 1, &c.payload, 100)?;
        let id4 = node.recv(5000, FI_ADDR_UNSPEC, &Rx::tagged(4, 0))?;
        let c = node.wait_op(id4)?;
        check_recv(&c, "receive of tag 4", 5000, true)?;
        check_pattern("message 4", 4, &c.payload, 5000)?;
        // The discarded tag 3 must not be delivered.
        let id3 = node.recv(300, FI_ADDR_UNSPEC, &Rx::tagged(3, 0))?;
        node.progress_for(Duration::from_millis(200))?;
        if let Some(c) = node.poll_op(id3)? {
            bail!("discarded message (tag 3) was delivered to a later receive (err {})", c.err);
        }
        let ret = node.cancel(id3)?;
        ensure!(ret == 0, "fi_cancel returned {ret}");
        let c = node.wait_op(id3)?;
        ensure!(c.err == ffi::FI_ECANCELED as i32, "cancelled receive completed with err {}", c.err);
    } else {
        let ids: Vec<u64> =
            msgs.iter().map(|&(t, l)| node.send(&pattern(t, l), peer, &Tx::tagged(t))).collect::<TResult<_>>()?;
        r.pmi.set("sent", "1");
        for id in ids {
            node.wait_ok(id, "tagged send")?;
        }
    }
    super::finish(r, &mut node)
}

fn cancel(r: &mut Rank) -> TResult {
    let (mut node, addrs) = setup(r, &default_cfg())?;
    let peer = addrs[peer_of(r)];
    if r.rank == 1 {
        let a = node.recv(64, FI_ADDR_UNSPEC, &Rx::tagged(0xC, 0))?;
        let b = node.recv(64, FI_ADDR_UNSPEC, &Rx::tagged(0xD, 0))?;
        let m = node.recv(70000, FI_ADDR_UNSPEC, &Rx::default())?;
        let ctx = node.ctx_ptr(a).expect("pending");
        let ret = node.cancel(a)?;
        ensure!(ret == 0, "fi_cancel of a posted receive returned {}", fabric::errname(ret as i32));
        let c = node.wait_op(a)?;
        ensure!(
            c.err == ffi::FI_ECANCELED as i32,
            "cancelled receive completed with err {} (want FI_ECANCELED)",
            c.err
        );
        ensure!(c.op == Some(a), "cancel completion has another context ({ctx:?})");
        let ret = node.cancel(m)?;
        ensure!(ret == 0, "fi_cancel of a posted untagged receive returned {ret}");
        let c = node.wait_op(m)?;
        ensure!(c.err == ffi::FI_ECANCELED as i32, "cancelled untagged receive: err {}", c.err);
        r.pmi.barrier_with(&mut node.progressor())?;
        let c = node.wait_op(b)?;
        check_recv(&c, "tag 0xD", 64, true)?;
        check_pattern("tag 0xD", 0xD, &c.payload, 64)?;
        // The 0xC message arrived with no receive posted: it must still be there.
        let a2 = node.recv(64, FI_ADDR_UNSPEC, &Rx::tagged(0xC, 0))?;
        let c = node.wait_op(a2)?;
        check_recv(&c, "tag 0xC after cancel", 64, true)?;
        check_pattern("tag 0xC after cancel", 0xC, &c.payload, 64)?;
        let m2 = node.recv(70000, FI_ADDR_UNSPEC, &Rx::default())?;
        let c = node.wait_op(m2)?;
        check_recv(&c, "untagged after cancel", 70000, false)?;
        check_pattern("untagged after cancel", 0xE, &c.payload, 70000)?;
    } else {
        r.pmi.barrier_with(&mut node.progressor())?;
        let x = node.send(&pattern(0xD, 64), peer, &Tx::tagged(0xD))?;
        let y = node.send(&pattern(0xC, 64), peer, &Tx::tagged(0xC))?;
        let z = node.send(&pattern(0xE, 70000), peer, &Tx::default())?;
        for id in [x, y, z] {
            node.wait_ok(id, "send")?;
        }
    }
    super::finish(r, &mut node)
}

fn inject(r: &mut Rank) -> TResult {
    let (mut node, addrs) = setup(r, &default_cfg())?;
    let peer = addrs[peer_of(r)];
    let isz = node.info.get().tx_attr().map_or(0, |t| t.inject_size);
    if isz == 0 {
        return Err(TestErr::Nos(fabric::EOPNOTSUPP, "inject_size is 0".into()));
    }
    let mut cases = Vec::new();
    for size in [0usize, 1, 64, isz] {
        for kind in ["inject", "tinject", "injectdata", "tinjectdata"] {
            cases.push((kind, size));
        }
    }
    if r.rank == 1 {
        let ids: Vec<u64> = cases
            .iter()
            .enumerate()
            .map(|(k, &(kind, size))| {
                let rx = if kind.starts_with('t') { Rx::tagged(k as u64, 0) } else { Rx::default() };
                node.recv(size, peer, &rx)
            })
            .collect::<TResult<_>>()?;
        r.pmi.barrier_with(&mut node.progressor())?;
        for (k, (&(kind, size), id)) in cases.iter().zip(ids).enumerate() {
            let what = format!("{kind} of {size} B");
            let c = node.wait_op(id)?;
            check_recv(&c, &what, size, kind.starts_with('t'))?;
            check_pattern(&what, k as u64, &c.payload, size)?;
            if kind.ends_with("data") {
                ensure!(
                    c.flags & ffi::FI_REMOTE_CQ_DATA as u64 != 0 && c.data == 0x1000 + k as u64,
                    "{what}: data missing"
                );
            }
        }
    } else {
        r.pmi.barrier_with(&mut node.progressor())?;
        for (k, &(kind, size)) in cases.iter().enumerate() {
            let mut buf = pattern(k as u64, size);
            let tag = kind.starts_with('t').then_some(k as u64);
            let data = kind.ends_with("data").then_some(0x1000 + k as u64);
            node.inject(&buf, peer, tag, data)?;
            // The buffer is the application's again: scribble over it.
            buf.iter_mut().for_each(|b| *b = 0xEE);
        }
        node.progress_for(Duration::from_millis(100))?;
        let stray = node.take_completions();
        ensure!(
            stray.is_empty(),
            "injects generated {} completion(s) (first flags {:#x})",
            stray.len(),
            stray[0].flags
        );
    }
    super::finish(r, &mut node)
}

fn selective_completion(r: &mut Rank) -> TResult {
    let cfg = NodeCfg { selective: true, counters: true, ..Default::default() };
    let (mut node, addrs) = setup(r, &cfg)?;
    let peer = addrs[peer_of(r)];
    let n = 20;
    let size_of = |i: usize| if i % 3 == 2 { 70000 } else { 64 };
    if r.rank == 1 {
        let ids: Vec<u64> = (0..n).map(|i| node.recv(size_of(i), peer, &Rx::default())).collect::<TResult<_>>()?;
        r.pmi.barrier_with(&mut node.progressor())?;
        for (i, id) in ids.into_iter().enumerate() {
            let c = node.wait_op(id)?;
            check_recv(&c, "receive", size_of(i), false)?;
            check_pattern("selective", i as u64, &c.payload, size_of(i))?;
        }
    } else {
        r.pmi.barrier_with(&mut node.progressor())?;
        let mut want = Vec::new();
        for i in 0..n {
            let p = pattern(i as u64, size_of(i));
            if i % 4 == 0 {
                want.push(node.send(
                    &p,
                    peer,
                    &Tx { flags: Some(ffi::FI_COMPLETION as u64), iov: 1, ..Default::default() },
                )?);
            } else {
                node.send(&p, peer, &Tx::default())?;
            }
        }
        let deadline = Instant::now() + node.timeout;
        while node.tx_cntr.as_ref().expect("cntr").read() < n as u64 {
            ensure!(
                Instant::now() < deadline,
                "send counter stuck at {} of {n}",
                node.tx_cntr.as_ref().expect("cntr").read()
            );
            node.progress()?;
            std::thread::yield_now();
        }
        node.progress_for(Duration::from_millis(100))?;
        let got = node.take_completions();
        let ops: Vec<u64> = got.iter().filter_map(|c| c.op).collect();
        ensure!(
            got.len() == want.len() && want.iter().all(|w| ops.contains(w)),
            "selective completion: {} CQ entries (ops {ops:?}), expected exactly the {} FI_COMPLETION sends {want:?}",
            got.len(),
            want.len()
        );
        ensure!(node.tx_cntr.as_ref().expect("cntr").readerr() == 0, "send error counter non-zero");
    }
    super::finish(r, &mut node)
}

fn delivery_complete(r: &mut Rank) -> TResult {
    let (mut node, addrs) = setup(r, &default_cfg())?;
    let peer = addrs[peer_of(r)];
    let sizes = [64usize, 4096, 70000, 1 << 20];
    let dc = Tx { flags: Some(ffi::FI_DELIVERY_COMPLETE as u64), iov: 1, ..Default::default() };
    for (k, &size) in sizes.iter().enumerate() {
        r.pmi.step(&format!("delivery-complete size {size}"));
        if r.rank == 1 {
            let id = node.recv(size, peer, &Rx::default())?;
            r.pmi.barrier_with(&mut node.progressor())?;
            // Stay away from the provider for a while: with manual progress nothing can be
            // delivered by us now, so a delivery-complete at the sender means the data is
            // already in our buffer.
            std::thread::sleep(Duration::from_millis(300));
            // (If the barrier's progress already read the receive's completion, the buffer is
            // no longer pending: the completion's payload is checked below.)
            if let (Some(_), Some(now)) = (r.pmi.get_with(&format!("dc{k}"), None)?, node.peek_buf(id)) {
                check_pattern(
                    &format!("size {size}: target buffer when the sender had its FI_DELIVERY_COMPLETE completion"),
                    k as u64,
                    &now,
                    size,
                )?;
            }
            let c = node.wait_op(id)?;
            check_recv(&c, "delivery-complete receive", size, false)?;
            check_pattern("delivery-complete receive", k as u64, &c.payload, size)?;
        } else {
            r.pmi.barrier_with(&mut node.progressor())?;
            let id = node.send(&pattern(k as u64, size), peer, &dc)?;
            let c = node.wait_op(id)?;
            check_send(&c, "FI_DELIVERY_COMPLETE send")?;
            r.pmi.set(&format!("dc{k}"), "1");
        }
        r.pmi.barrier_with(&mut node.progressor())?;
    }
    Ok(())
}

fn av_insert_during_traffic(r: &mut Rank) -> TResult {
    let cfg = default_cfg();
    let mut node = Node::open(&r.prov, &cfg, r.timeout)?;
    let all = r.pmi.allgather(&crate::pmi::hex(&node.name))?;
    let name = |i: usize| crate::pmi::unhex(&all[i]).unwrap_or_default();
    let iters = 200;
    match r.rank {
        0 => {
            let p1 = node.insert(&name(1))?;
            r.pmi.barrier_with(&mut node.progressor())?;
            let mut p2 = None;
            let mut side = Vec::new();
            for it in 0..iters {
                if it == iters / 2 {
                    r.pmi.step("inserting rank 2 during traffic");
                    let fa = node.insert(&name(2))?;
                    // Insert and remove a few more entries (our own address) on the way.
                    for _ in 0..4 {
                        let own = node.name.clone();
                        let x = node.insert(&own)?;
                        crate::harness::fi_ok("fi_av_remove", node.av().remove(&mut [x], 0))?;
                    }
                    p2 = Some(fa);
                }
                let size = if it % 20 == 19 { 70000 } else { 256 };
                let rid = node.recv(size, p1, &Rx::default())?;
                let sid = node.send(&pattern(seed(it, 0, 0), size), p1, &Tx::default())?;
                if let Some(p2) = p2 {
                    if side.len() < 20 {
                        side.push((
                            side.len(),
                            node.send(&pattern(seed(7, side.len() as u64, 2), 512), p2, &Tx::tagged(2))?,
                        ));
                    }
                }
                node.wait_ok(sid, "send to rank 1")?;
                let c = node.wait_op(rid)?;
                check_recv(&c, "pong from rank 1", size, false)?;
                check_pattern(&format!("pong {it}"), seed(it, 0, 1), &c.payload, size)?;
            }
            for (_, id) in side {
                node.wait_ok(id, "send to rank 2")?;
            }
            let p2 = p2.expect("inserted");
            crate::harness::fi_ok("fi_av_remove(rank 2)", node.av().remove(&mut [p2], 0))?;
            // Traffic with rank 1 after the removal.
            let rid = node.recv(64, p1, &Rx::default())?;
            let sid = node.send(&pattern(999, 64), p1, &Tx::default())?;
            node.wait_ok(sid, "send after remove")?;
            let c = node.wait_op(rid)?;
            check_pattern("pong after remove", 998, &c.payload, 64)?;
        }
        1 => {
            let p0 = node.insert(&name(0))?;
            r.pmi.barrier_with(&mut node.progressor())?;
            for it in 0..iters {
                let size = if it % 20 == 19 { 70000 } else { 256 };
                let rid = node.recv(size, p0, &Rx::default())?;
                let c = node.wait_op(rid)?;
                check_recv(&c, "ping from rank 0", size, false)?;
                check_pattern(&format!("ping {it}"), seed(it, 0, 0), &c.payload, size)?;
                let sid = node.send(&pattern(seed(it, 0, 1), size), p0, &Tx::default())?;
                node.wait_ok(sid, "pong")?;
            }
            let rid = node.recv(64, p0, &Rx::default())?;
            let c = node.wait_op(rid)?;
            check_pattern("ping after remove", 999, &c.payload, 64)?;
            let sid = node.send(&pattern(998, 64), p0, &Tx::default())?;
            node.wait_ok(sid, "pong")?;
        }
        _ => {
            node.insert(&name(0))?;
            let ids: Vec<u64> =
                (0..20).map(|_| node.recv(512, FI_ADDR_UNSPEC, &Rx::tagged(2, 0))).collect::<TResult<_>>()?;
            r.pmi.barrier_with(&mut node.progressor())?;
            for (i, id) in ids.into_iter().enumerate() {
                let c = node.wait_op(id)?;
                check_recv(&c, "message from a late-inserting peer", 512, true)?;
                check_pattern("late-insert message", seed(7, i as u64, 2), &c.payload, 512)?;
            }
        }
    }
    super::finish(r, &mut node)
}

/// A ping-pong of messages four times the receiver's SAR pool (2 MiB by default), each side
/// blocking in fi_cntr_wait for its send and its receive, as fabtests' fi_rdm_cntr_pingpong does.
/// By SAR (FI_RSHM_CMA=0 in scripts/test.sh) a sender waits for buffers the receiver gives back
/// while it sleeps; it used to sleep out the wait's 100 ms slice each time (400 ms a message
/// here), so the bound below is about 70 times what the round trips need, and the content is
/// checked.
fn cntr_wait_large(r: &mut Rank) -> TResult {
    const SIZE: usize = 8 << 20;
    const ROUNDS: u64 = 6;
    let cfg = NodeCfg { counters: true, cntr_wait: ffi::FI_WAIT_UNSPEC, ..default_cfg() };
    let (mut node, addrs) = setup(r, &cfg)?;
    let peer = addrs[peer_of(r)];
    r.pmi.barrier_with(&mut node.progressor())?;
    r.pmi.step("8 MiB ping-pong in fi_cntr_wait");
    let t = Instant::now();
    for round in 0..ROUNDS {
        let what = format!("8 MiB round {round}");
        let rid = node.recv(SIZE, peer, &Rx::default())?;
        let send = |node: &mut Node, side: u64| -> TResult<u64> {
            let sid = node.send(&pattern(seed(SIZE as u64, round, side), SIZE), peer, &Tx::default())?;
            let tc = node.tx_cntr.as_ref().expect("counters");
            fi_ok(&format!("{what}: fi_cntr_wait(tx counter, {})", round + 1), tc.wait(round + 1, 20_000))?;
            Ok(sid)
        };
        let sid = if r.rank == 0 { Some(send(&mut node, 0)?) } else { None };
        let rc = node.rx_cntr.as_ref().expect("counters");
        fi_ok(&format!("{what}: fi_cntr_wait(rx counter, {})", round + 1), rc.wait(round + 1, 20_000))?;
        let sid = match sid {
            Some(sid) => sid,
            None => send(&mut node, 1)?,
        };
        check_send(&node.wait_op(sid)?, &what)?;
        let c = node.wait_op(rid)?;
        check_recv(&c, &what, SIZE, false)?;
        check_pattern(&what, seed(SIZE as u64, round, 1 - r.rank as u64), &c.payload, SIZE)?;
    }
    let took = t.elapsed();
    ensure!(took < Duration::from_secs(2), "{ROUNDS} round trips of 8 MiB in fi_cntr_wait took {took:?}");
    super::finish(r, &mut node)
}
