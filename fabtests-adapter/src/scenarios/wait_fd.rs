//! FI_WAIT_FD (fi_cq(3), fi_cntr(3), fi_trywait(3)): a CQ and a counter whose wait object is a
//! file descriptor that the application blocks on itself, as fabtests' `-c fd` and event loops
//! built on poll or epoll do: `fi_control(FI_GETWAIT)` gives the descriptor, `fi_trywait` says
//! whether blocking on it is safe, and a peer's message makes it readable.
//!
//! `progress/wait_fd`, rank 0 waits, rank 1 sends:
//! - with nothing on its way, the descriptor stays unreadable for a whole 200 ms poll;
//! - a message sent 300 ms after rank 0 blocked in poll(2) wakes it, well within a second,
//!   without rank 0 spinning meanwhile (its CPU time over the wait is checked);
//! - with a message already in rank 0's queue, `fi_trywait` says -FI_EAGAIN;
//! - the same for a receive counter opened with FI_WAIT_FD: its descriptor wakes rank 0 and
//!   `fi_cntr_read` has moved.
//!
//! `progress/wait_set`: a wait set (fi_wait_open) holding the transmit and receive CQs and
//! counters (FI_WAIT_SET): fi_wait times out with nothing sent, returns once a message sent
//! 300 ms later arrives (without spinning), and fi_trywait on the set says -FI_EAGAIN with a
//! message queued; fi_control(FI_GETWAIT) gives the set's descriptor.
//!
//! `progress/wait_fd_dead_peer`: rank 0 blocks in poll(2) on its CQ's descriptor with a 1 MiB
//! send in flight to rank 1, which never receives it and is SIGKILLed: nothing will ever come
//! from rank 1, yet the descriptor must wake and the send complete with an error (not hang).

use super::{finish, scn, setup, Scenario};
use crate::fabric::{self, ffi, FiAddr};
use crate::fabric::{Cq, WaitSet};
use crate::harness::{
    check_pattern, cpu_time, fi_ok, pattern, Completion, FiCtx, Node, NodeCfg, Rank, Rx, TResult, TestErr, Tx,
};
use crate::{bail, ensure};
use std::ffi::c_void;
use std::time::{Duration, Instant};

pub fn scenarios() -> Vec<Scenario> {
    vec![
        scn(
            "progress/wait_fd",
            2,
            40,
            wait_fd,
            "FI_WAIT_FD CQ and counter: fi_trywait, then poll(2) on the descriptor until a peer's message arrives",
        ),
        scn(
            "progress/wait_set",
            2,
            40,
            wait_set,
            "fi_wait on a wait set holding both CQs and both counters: times out with nothing sent, wakes for a peer's message",
        ),
        scn(
            "progress/wait_fd_dead_peer",
            2,
            40,
            dead_peer,
            "FI_WAIT_FD CQ: a send in flight to a peer SIGKILLed while we block in poll(2) fails; the descriptor wakes",
        ),
    ]
}

const LEN: usize = 64;
/// How long the sender waits before each message that rank 0 blocks for.
const LATE: Duration = Duration::from_millis(300);

/// A provider without FI_WAIT_FD declines the scenarios (the C shm: fi_cq_open says
/// -FI_ENOSYS).
fn offers_wait_fd(r: &Rank) -> TResult {
    let probe = Node::open(&r.prov, &NodeCfg::default(), r.timeout)?;
    let mut attr =
        ffi::fi_cq_attr { format: ffi::FI_CQ_FORMAT_TAGGED, wait_obj: ffi::FI_WAIT_FD, ..Default::default() };
    Cq::open(probe.domain(), &mut attr).nos("fi_cq_open(FI_WAIT_FD)")?;
    Ok(())
}

/// The descriptor of a CQ, counter or wait set (`fi_control(FI_GETWAIT)`), after checking that
/// FI_GETWAITOBJ reports FI_WAIT_FD.
fn descriptor(fid: *mut ffi::fid, what: &str) -> TResult<i32> {
    let mut obj: ffi::fi_wait_obj = ffi::FI_WAIT_NONE;
    // SAFETY: an open object of the node; FI_GETWAITOBJ fills an enum fi_wait_obj.
    let ret = unsafe { fabric::control(fid, ffi::FI_GETWAITOBJ, (&mut obj as *mut ffi::fi_wait_obj).cast::<c_void>()) };
    fi_ok(&format!("fi_control({what}, FI_GETWAITOBJ)"), ret)?;
    ensure!(obj == ffi::FI_WAIT_FD, "fi_control({what}, FI_GETWAITOBJ) says wait object {obj}, not FI_WAIT_FD");
    let mut fd: i32 = -1;
    // SAFETY: as above; FI_GETWAIT fills an int for an FI_WAIT_FD object.
    let ret = unsafe { fabric::control(fid, ffi::FI_GETWAIT, (&mut fd as *mut i32).cast::<c_void>()) };
    fi_ok(&format!("fi_control({what}, FI_GETWAIT)"), ret)?;
    ensure!(fd >= 0, "fi_control({what}, FI_GETWAIT) gave descriptor {fd}");
    Ok(fd)
}

/// poll(2) for POLLIN on `fd`: whether it became readable within `limit`.
fn readable_within(fd: i32, limit: Duration) -> TResult<bool> {
    let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: one pollfd we own, for the duration of the call.
    let n = unsafe { libc::poll(&mut p, 1, limit.as_millis() as i32) };
    ensure!(n >= 0, "poll: {}", std::io::Error::last_os_error());
    Ok(n == 1 && p.revents & libc::POLLIN != 0)
}

/// fi_trywait on one object, then, if it allows, poll(2) on its descriptor for up to `limit`:
/// (trywait's return, whether the descriptor became readable, how long the poll took).
fn trywait_and_poll(node: &Node, fid: *mut ffi::fid, fd: i32, limit: Duration) -> TResult<(i32, bool, Duration)> {
    let ret = node.fabric().trywait(&mut [fid]);
    if ret != 0 {
        return Ok((ret, false, Duration::ZERO));
    }
    let t = Instant::now();
    let woke = readable_within(fd, limit)?;
    Ok((0, woke, t.elapsed()))
}

/// Until operation `id` completes: fi_trywait on the CQ, then poll(2) on its descriptor for up to
/// `limit` each time it allows. The completion, and whether a poll was woken by the descriptor
/// (not only a trywait that found the completion ready). A poll that sleeps its whole `limit`
/// through (`what` is what it waited for) fails, as does no completion within twice `limit`.
fn block_until_done(
    node: &mut Node,
    id: u64,
    (cq, fd): (*mut ffi::fid, i32),
    limit: Duration,
    what: &str,
) -> TResult<(Completion, bool)> {
    let (wall, mut woken) = (Instant::now(), false);
    loop {
        if let Some(c) = node.poll_op(id)? {
            return Ok((c, woken));
        }
        ensure!(wall.elapsed() < 2 * limit, "no completion {:?} after blocking for {what}", 2 * limit);
        let (ret, woke, _) = trywait_and_poll(node, cq, fd, limit)?;
        if ret == 0 && !woke {
            bail!("poll(2) on the CQ's descriptor slept {limit:?} through {what}");
        }
        woken |= woke;
    }
}

/// Step 3 of both scenarios: with the sender's second message already in our queue (two
/// barriers, no progress of ours in between), fi_trywait on `fid` must say -FI_EAGAIN.
fn trywait_finds_queued(r: &mut Rank, node: &mut Node, peer: FiAddr, fid: *mut ffi::fid, what: &str) -> TResult {
    let second = node.recv(LEN, peer, &Rx::tagged(2, 0))?;
    r.pmi.barrier()?;
    r.pmi.barrier()?; // the peer sent it
    r.pmi.step(&format!("fi_trywait({what}) with a message waiting"));
    let ret = node.fabric().trywait(&mut [fid]);
    ensure!(
        ret == -(ffi::FI_EAGAIN as i32),
        "fi_trywait({what}) with a message in its queue returned {} (expected -FI_EAGAIN)",
        fabric::errname(ret)
    );
    node.wait_ok(second, "receive of the message trywait found")?;
    Ok(())
}

fn wait_fd(r: &mut Rank) -> TResult {
    let cfg = NodeCfg { cq_wait: ffi::FI_WAIT_FD, counters: true, cntr_wait: ffi::FI_WAIT_FD, ..NodeCfg::default() };
    offers_wait_fd(r)?;
    let (mut node, addrs) = setup(r, &cfg)?;
    let peer: FiAddr = addrs[1 - r.rank];
    if r.rank == 1 {
        return sender(r, node, peer);
    }
    let cq = node.tx_cq().fid();
    let cq_fd = descriptor(cq, "cq")?;
    let cntr = node.rx_cntr.as_ref().map(|c| c.fid()).ok_or_else(|| TestErr::Fail("no receive counter".into()))?;
    let cntr_fd = descriptor(cntr, "cntr")?;

    // 1. Nothing on its way: trywait allows blocking, and the descriptor stays quiet.
    let first = node.recv(LEN, peer, &Rx::tagged(1, 0))?;
    r.pmi.barrier()?;
    r.pmi.step("fi_trywait and poll with nothing sent");
    let (ret, woke, _) = trywait_and_poll(&node, cq, cq_fd, Duration::from_millis(200))?;
    fi_ok("fi_trywait(cq) with nothing sent", ret)?;
    ensure!(!woke, "the CQ's descriptor became readable with nothing sent");

    // 2. A message sent while we are blocked in poll wakes us, and we did not spin.
    r.pmi.barrier()?;
    r.pmi.step("blocked in poll(2) until the peer's message");
    let (wall, cpu) = (Instant::now(), cpu_time());
    let (got, woken) = block_until_done(&mut node, first, (cq, cq_fd), Duration::from_secs(5), "the peer's message")?;
    let (waited, spent) = (wall.elapsed(), cpu_time() - cpu);
    ensure!(woken, "the message completed, but the descriptor never woke the poll");
    ensure!(waited >= LATE / 2, "woke after {waited:?}, before the peer can have sent (it waits {LATE:?})");
    ensure!(waited < LATE + Duration::from_secs(1), "woke {waited:?} after blocking; the message came after {LATE:?}");
    ensure!(spent < waited / 4, "used {spent:?} of CPU while blocked for {waited:?}: it spun instead of sleeping");
    got.ok("receive of the message that woke the poll")?;
    check_pattern("the message that woke the poll", 1, &got.payload, LEN)?;

    // 3. A message already in our queue: trywait must say so instead of letting us block.
    trywait_finds_queued(r, &mut node, peer, cq, "cq")?;

    // 4. The receive counter's descriptor: it wakes for the next message, and the count moved.
    let counted = node.rx_cntr.as_ref().map(|c| c.read()).unwrap_or(0);
    let third = node.recv(LEN, peer, &Rx::tagged(3, 0))?;
    r.pmi.barrier()?;
    r.pmi.step("blocked in poll(2) on the receive counter's descriptor");
    let wall = Instant::now();
    let (ret, woke, _) = trywait_and_poll(&node, cntr, cntr_fd, Duration::from_secs(5))?;
    fi_ok("fi_trywait(cntr)", ret)?;
    ensure!(woke, "poll(2) on the counter's descriptor slept 5 s through the peer's message");
    ensure!(wall.elapsed() < LATE + Duration::from_secs(1), "the counter's descriptor woke after {:?}", wall.elapsed());
    let now = node.rx_cntr.as_ref().map(|c| c.read()).unwrap_or(0);
    ensure!(now == counted + 1, "the receive counter read {now} after the wake-up, {counted} before");
    node.wait_ok(third, "receive of the counted message")?;
    finish(r, &mut node)
}

fn sender(r: &mut Rank, mut node: Node, peer: FiAddr) -> TResult {
    r.pmi.barrier()?; // 1: nothing sent
    r.pmi.barrier()?; // 2: the peer is about to block
    std::thread::sleep(LATE);
    let id = node.send(&pattern(1, LEN), peer, &Tx::tagged(1))?;
    node.wait_ok(id, "send of the message that wakes the peer")?;
    r.pmi.barrier()?; // 3: the peer posted its receive
    let id = node.send(&pattern(2, LEN), peer, &Tx::tagged(2))?;
    node.wait_ok(id, "send of the message trywait must find")?;
    r.pmi.barrier()?;
    r.pmi.barrier()?; // 4: the peer is about to block on its counter
    std::thread::sleep(LATE);
    let id = node.send(&pattern(3, LEN), peer, &Tx::tagged(3))?;
    node.wait_ok(id, "send of the counted message")?;
    finish(r, &mut node)
}

fn dead_peer(r: &mut Rank) -> TResult {
    let cfg = NodeCfg { cq_wait: ffi::FI_WAIT_FD, ..NodeCfg::default() };
    offers_wait_fd(r)?;
    let (mut node, addrs) = setup(r, &cfg)?;
    let peer: FiAddr = addrs[1 - r.rank];
    super::errors::handshake(r, &mut node, peer)?;
    if r.rank == 1 {
        // No progress from here on: the 1 MiB message is never received.
        let deadline = Instant::now() + Duration::from_secs(20);
        while r.pmi.get_with("blocking", None)?.is_none() {
            ensure!(Instant::now() < deadline, "rank 0 never blocked");
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(LATE);
        r.pmi.killme();
    }
    let cq = node.tx_cq().fid();
    let fd = descriptor(cq, "cq")?;
    let big = node.send(&pattern(7, 1 << 20), peer, &Tx::default())?;
    r.pmi.set("blocking", "1");
    r.pmi.step("blocked in poll(2) with a 1 MiB send in flight to a peer about to be killed");
    let wall = Instant::now();
    let (done, _) =
        block_until_done(&mut node, big, (cq, fd), Duration::from_secs(10), "a send in flight to a dead peer")?;
    ensure!(done.err != 0, "the 1 MiB send to a peer that never received it and was killed completed successfully");
    r.pmi.step(&format!("the send failed with {} after {:?}", fabric::errname(-done.err), wall.elapsed()));
    r.pmi.wait_exit_with(1, &mut node.progressor())?;
    Ok(())
}

fn wait_set(r: &mut Rank) -> TResult {
    {
        // A provider without wait sets declines (the C shm opens one, then refuses a CQ in it
        // with -FI_ENOSYS).
        let probe = Node::open(&r.prov, &NodeCfg::default(), r.timeout)?;
        let mut attr = ffi::fi_wait_attr { wait_obj: ffi::FI_WAIT_UNSPEC, ..Default::default() };
        let set = WaitSet::open(probe.fabric(), &mut attr).nos("fi_wait_open")?;
        let mut attr = ffi::fi_cq_attr {
            format: ffi::FI_CQ_FORMAT_TAGGED,
            wait_obj: ffi::FI_WAIT_SET,
            wait_set: set.raw(),
            ..Default::default()
        };
        Cq::open(probe.domain(), &mut attr).nos("fi_cq_open(FI_WAIT_SET)")?;
    }
    let cfg = NodeCfg { wait_set: true, separate_cqs: true, counters: true, ..NodeCfg::default() };
    let (mut node, addrs) = setup(r, &cfg)?;
    let peer: FiAddr = addrs[1 - r.rank];
    if r.rank == 1 {
        return sender(r, node, peer);
    }
    let set = node.wait_set.as_ref().map(|w| w.fid()).ok_or_else(|| TestErr::Fail("no wait set".into()))?;
    descriptor(set, "wait set")?;
    let wait = |node: &Node, ms: i32| node.wait_set.as_ref().map_or(0, |w| w.wait(ms));

    // 1. Nothing on its way: fi_wait times out, having waited.
    let first = node.recv(LEN, peer, &Rx::tagged(1, 0))?;
    r.pmi.barrier()?;
    r.pmi.step("fi_wait(200 ms) with nothing sent");
    let t = Instant::now();
    let ret = wait(&node, 200);
    ensure!(ret == -(ffi::FI_ETIMEDOUT as i32), "fi_wait(200 ms) with nothing sent returned {}", fabric::errname(ret));
    ensure!(t.elapsed() >= Duration::from_millis(150), "fi_wait(200 ms) returned after {:?}", t.elapsed());

    // 2. A message sent while we wait ends fi_wait, and we did not spin.
    r.pmi.barrier()?;
    r.pmi.step("fi_wait until the peer's message");
    let (wall, cpu) = (Instant::now(), cpu_time());
    let got = loop {
        if let Some(c) = node.poll_op(first)? {
            break c;
        }
        ensure!(wall.elapsed() < Duration::from_secs(10), "no completion 10 s after blocking in fi_wait");
        let ret = wait(&node, 5000);
        ensure!(ret == 0, "fi_wait(5 s) with the peer's message on its way returned {}", fabric::errname(ret));
    };
    let (waited, spent) = (wall.elapsed(), cpu_time() - cpu);
    ensure!(waited >= LATE / 2, "fi_wait returned after {waited:?}, before the peer can have sent");
    ensure!(
        waited < LATE + Duration::from_secs(1),
        "fi_wait returned {waited:?} after it began; the message came at {LATE:?}"
    );
    ensure!(spent < waited / 4, "used {spent:?} of CPU in fi_wait over {waited:?}: it spun instead of sleeping");
    got.ok("receive of the message that ended fi_wait")?;
    check_pattern("the message that ended fi_wait", 1, &got.payload, LEN)?;

    // 3. A message already queued: fi_trywait on the set must say so.
    trywait_finds_queued(r, &mut node, peer, set, "wait set")?;

    // 4. The sender's last message, taken as it comes.
    let third = node.recv(LEN, peer, &Rx::tagged(3, 0))?;
    r.pmi.barrier()?;
    node.wait_ok(third, "receive of the last message")?;
    finish(r, &mut node)
}
