//! The owner-free paths of `direct.rs`: how a peer's progress is judged from its counts
//! (`peer_is_free`, `peer_progresses`, `peer_busy_with_own`, `peer_has_spare_cpu`), and CMA
//! copies of the registrations an owner publishes (`read_published`, `write_published`).

use super::*;

/// `peer_is_free`: a peer counts as free only while its count of free polls keeps moving
/// between our looks (or within the moment we watch it), not because it moved once long ago.
#[test]
fn a_peer_is_free_only_while_it_keeps_polling() {
    let (mut a, mut b, to_b) = pair("free", Params::default());
    b.note_poll(true);
    // The first look maps b's region and has nothing earlier to compare with; b does not poll
    // while we watch.
    assert!(!a.peer_is_free(to_b), "a poll before our first look says nothing about now");
    let hdr = MsgHeader { app: 0, tag: 0, data: 0, aux: 0, len: 8 };
    let opts = SendOpts { cookie: 1, delivery_complete: true, more: false, pull: false, split_early: false };
    let (mut ha, mut hb) = (Collect::default(), Collect::default());
    assert_eq!(a.send(to_b, hdr, LocalIov::owned(pattern(8, 1)), opts), Ok(SendStatus::Pending));
    pump_until((&mut a, &mut ha), (&mut b, &mut hb), "the message", |ha, _| ha.sends_done.len() == 1);
    assert!(!a.peer_is_free(to_b), "b has not polled since our first look");
    b.note_poll(true);
    assert!(a.peer_is_free(to_b), "b polled since our last look, a moment ago");
    assert!(!a.peer_is_free(to_b), "and not since");
    b.note_poll(true);
    std::thread::sleep(std::time::Duration::from_millis(2));
    assert!(!a.peer_is_free(to_b), "a poll long before this look says nothing about now");
}

/// `peer_busy_with_own`: busy when the owner's progress calls since our last look were all made
/// with operations of its own outstanding; a look that sees no call keeps the last verdict.
#[test]
fn a_peer_is_busy_with_its_own_when_it_polls_but_never_free() {
    let (mut a, mut b, to_b) = pair("busyown", Params::default());
    assert!(!a.peer_busy_with_own(to_b), "no call since the link was made");
    b.note_poll(false);
    assert!(a.peer_busy_with_own(to_b), "a call with its own outstanding");
    assert!(a.peer_busy_with_own(to_b), "no call since: the last verdict stands");
    b.note_poll(false);
    b.note_poll(true);
    assert!(!a.peer_busy_with_own(to_b), "a free call among them: it has time for peers");
    assert!(!a.peer_busy_with_own(to_b), "and no call since");
    b.note_poll(false);
    assert!(a.peer_busy_with_own(to_b), "busy again");
}

/// `peer_has_spare_cpu` reads what the owner says (`set_spare`), now: it does not depend on polls.
#[test]
fn a_peer_has_a_spare_cpu_while_it_says_so() {
    let (mut a, b, to_b) = pair("sparecpu", Params::default());
    assert!(!a.peer_has_spare_cpu(to_b), "an owner that said nothing has no CPU to spare");
    b.set_spare(true);
    assert!(a.peer_has_spare_cpu(to_b), "the owner said it has a CPU to spare");
    assert!(a.peer_has_spare_cpu(to_b), "and still does on a second look, with no poll between");
    b.set_spare(false);
    assert!(!a.peer_has_spare_cpu(to_b), "the owner took it back");
}

/// `peer_progresses` counts every progress call, `peer_is_free` only those made with nothing of
/// the owner's own outstanding: an owner busy with its own operations progresses, not free. A
/// move seen a moment ago still counts for `peer_progresses` (the owner's own operations may
/// keep it from polling for a few microseconds), not once `POLLING_NOW` has passed.
#[test]
fn a_busy_peer_progresses_without_being_free() {
    // "A moment ago" is under 200 us: a test thread preempted between two looks would see
    // otherwise, so a run with a pause in that stretch is run again.
    for attempt in 0.. {
        let (mut a, mut b, to_b) = pair(&format!("progresses{attempt}"), Params::default());
        // The first look maps b's region (a connection, system calls, page faults): done here,
        // outside "a moment", which took longer than 100 us in every attempt when the host was
        // slow, so that the test failed though nothing was wrong.
        a.link(to_b).unwrap();
        let moment = std::time::Instant::now();
        let first = [a.peer_progresses(to_b), a.peer_is_free(to_b)];
        b.note_poll(false);
        let busy = [a.peer_progresses(to_b), a.peer_is_free(to_b), a.peer_progresses(to_b)];
        b.note_poll(true);
        let free = a.peer_is_free(to_b);
        if moment.elapsed() > std::time::Duration::from_micros(100) {
            assert!(attempt < 50, "never 100 us without a pause");
            continue;
        }
        assert_eq!(first, [false, false], "no poll at all");
        assert!(busy[0], "b progressed since our last look, a moment ago");
        assert!(!busy[1], "but had operations of its own outstanding");
        assert!(busy[2], "a move seen a moment ago still counts");
        assert!(free, "a free poll since our last look");
        std::thread::sleep(std::time::Duration::from_millis(2));
        assert!(!a.peer_progresses(to_b), "no poll for longer than POLLING_NOW: it computes or sleeps");
        b.note_poll(false);
        std::thread::sleep(std::time::Duration::from_millis(2));
        assert!(!a.peer_progresses(to_b), "a poll long before this look says nothing about now");
        return;
    }
}

/// `write_published`: a peer writes a registration the owner published for writing, where the
/// entry says and nowhere else, and is refused (take the ordinary path) for an entry that only
/// allows reads, for a range outside the registration and once the owner withdrew the entry.
#[test]
fn a_published_registration_is_written_only_as_its_entry_allows() {
    use crate::published::{REMOTE_READ, REMOTE_WRITE};
    if !cma_or_skip("write_published") {
        return;
    }
    let (mut a, mut b, to_b) = pair("pubwrite", Params::default());
    let mut mem = vec![0u8; 8192];
    let base = mem.as_mut_ptr() as u64;
    b.publish_mr(1, base, 8192, REMOTE_READ).expect("room");
    let writable = b.publish_mr(2, base, 8192, REMOTE_WRITE).expect("room");
    let data = pattern(1000, 6);
    let read_only = a.peer_mr(to_b, 1).expect("published for reading");
    assert_eq!(a.write_published(to_b, &read_only, 0, &LocalIov::owned(data.clone())), Err(Error::Again));
    let entry = a.peer_mr(to_b, 2).expect("published for writing");
    assert_eq!(a.write_published(to_b, &entry, 100, &LocalIov::owned(data.clone())), Ok(1000));
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(mem[100..1100], data[..], "the bytes where the write named");
    assert!(mem[..100].iter().chain(&mem[1100..]).all(|&x| x == 0), "written outside the named range");
    assert!(
        matches!(a.write_published(to_b, &entry, 7500, &LocalIov::owned(data.clone())), Err(Error::Invalid(_))),
        "a write past the registration's end"
    );
    b.withdraw_mr(writable);
    assert_eq!(a.write_published(to_b, &entry, 0, &LocalIov::owned(data)), Err(Error::Again), "a withdrawn entry");
    assert!(mem[..100].iter().all(|&x| x == 0), "a refused write touched the memory");
    assert_eq!(a.stats().published_writes, 1);
}

/// Copies of a registration the owner counts (`published::COUNT_WRITES`, `COUNT_READS`, as for
/// one bound to a FI_REMOTE_WRITE counter): each whole copy is counted once, by its kind, and
/// wakes an owner armed to sleep; copies of an entry that does not count them are not counted
/// and wake nobody; a copy refused is not counted; and what was counted before a withdrawal is
/// still taken after it.
#[test]
fn counted_copies_of_a_published_registration_are_counted_once_and_wake_the_owner() {
    use crate::published::{Counted, COUNT_READS, COUNT_WRITES, REMOTE_READ, REMOTE_WRITE};
    if !cma_or_skip("pubcount") {
        return;
    }
    let (mut a, mut b, to_b) = pair("pubcount", Params::default());
    let mut mem = vec![0u8; 8192];
    let base = mem.as_mut_ptr() as u64;
    let counted = b.publish_mr(5, base, 4096, REMOTE_READ | REMOTE_WRITE | COUNT_READS | COUNT_WRITES).expect("room");
    let plain = b.publish_mr(6, base + 4096, 4096, REMOTE_READ | REMOTE_WRITE).expect("room");
    let (c, u) = (a.peer_mr(to_b, 5).expect("published"), a.peer_mr(to_b, 6).expect("published"));
    assert!(c.counts(REMOTE_WRITE) && c.counts(REMOTE_READ) && !u.counts(REMOTE_WRITE) && !u.counts(REMOTE_READ));
    let wake = b.region.wake_word();
    let seq = crate::wake::arm(wake);
    let data = pattern(1000, 3);
    assert_eq!(a.write_published(to_b, &u, 0, &LocalIov::owned(data.clone())), Ok(1000));
    let mut back = LocalIov::owned(vec![0; 500]);
    assert_eq!(a.read_published(to_b, &u, 10, &mut back), Ok(500));
    assert_eq!(wake.seq.load(crate::sync::Ordering::SeqCst), seq, "an uncounted copy woke the owner");
    assert_eq!(a.write_published(to_b, &c, 100, &LocalIov::owned(data.clone())), Ok(1000));
    assert_ne!(wake.seq.load(crate::sync::Ordering::SeqCst), seq, "a counted write left the owner asleep");
    assert_eq!(a.write_published(to_b, &c, 2000, &LocalIov::owned(data.clone())), Ok(1000));
    let mut back = LocalIov::owned(vec![0; 1000]);
    assert_eq!(a.read_published(to_b, &c, 100, &mut back), Ok(1000));
    assert_eq!(back.into_owned().unwrap(), data, "the counted read's bytes");
    assert!(matches!(a.write_published(to_b, &c, 3500, &LocalIov::owned(data.clone())), Err(Error::Invalid(_))));
    crate::wake::disarm(wake);
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(mem[100..1100], data[..]);
    assert_eq!(b.take_mr_counts(counted), Counted { reads: 1, writes: 2, scribbled: false });
    assert_eq!(b.take_mr_counts(counted), Counted::default(), "taken twice");
    assert_eq!(b.take_mr_counts(plain), Counted::default(), "uncounted copies counted");
    // A write counted before the withdrawal, taken after it.
    assert_eq!(a.write_published(to_b, &c, 0, &LocalIov::owned(data)), Ok(1000));
    b.withdraw_mr(counted);
    assert_eq!(b.take_mr_counts(counted), Counted { reads: 0, writes: 1, scribbled: false });
    assert_eq!(a.stats().published_writes, 4);
    drop(mem);
}

/// A peer counted as a writer of a published registration and then stopped before its copy (a
/// SIGSTOP, a debugger, a host that does not run it) for longer than an owner once waited (1 s):
/// the owner's withdrawal (the provider's fi_close of the MR) returns only once the copy is over,
/// so the copy never lands in memory the application got back. The writer's mark in its entry of
/// the owner's table says it lives and writes (`PeerSlot::mr_write`).
#[test]
fn a_withdrawal_waits_for_a_published_writer_stopped_before_its_copy() {
    use crate::published::REMOTE_WRITE;
    if !cma_or_skip("pubstop") {
        return;
    }
    let (mut a, mut b, to_b) = pair("pubstop", Params::default());
    let mut mem = vec![0u8; 4096];
    let slot = b.publish_mr(3, mem.as_mut_ptr() as u64, 4096, REMOTE_WRITE).expect("room");
    let entry = a.peer_mr(to_b, 3).expect("published for writing");
    a.published_pause_after_count = std::time::Duration::from_millis(1500);
    let writer = std::thread::spawn(move || {
        let wrote = a.write_published(to_b, &entry, 0, &LocalIov::owned(pattern(1000, 9)));
        (a, wrote)
    });
    let dl = deadline();
    while b.region.mr_slots()[slot as usize].writers.load(crate::sync::Ordering::Relaxed) == 0 {
        assert!(std::time::Instant::now() < dl, "the writer was never counted");
        std::thread::yield_now();
    }
    b.withdraw_mr(slot);
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    let at_withdrawal = mem[..1000].to_vec();
    let (a, wrote) = writer.join().unwrap();
    assert_eq!((wrote, a.stats().published_writes), (Ok(1000), 1));
    assert!(at_withdrawal == pattern(1000, 9), "the withdrawal returned before the stopped writer's copy");
    drop(mem);
}

/// A writer count that stays up in a published entry with no live peer marking that it writes
/// there (a writer that died mid-copy, or a scribble): the owner's withdrawal returns once it
/// has looked past `WRITERS_LOOK_AFTER`, rather than wait for ever, though a live sender, not
/// writing, holds an entry of its table.
#[test]
fn a_withdrawal_does_not_wait_for_a_writer_count_no_live_peer_explains() {
    use crate::published::REMOTE_WRITE;
    let (mut a, mut b, to_b) = pair("pubstuck", Params::default());
    let mut hb = Collect::default();
    assert_eq!(a.send_bytes(to_b, hdr(1), &pattern(8, 1), SendOpts::default()), Ok(SendStatus::Done));
    receive_until(&mut b, &mut hb, 1, "a's message");
    let mut mem = vec![0u8; 4096];
    let slot = b.publish_mr(3, mem.as_mut_ptr() as u64, 4096, REMOTE_WRITE).expect("room");
    b.region.mr_slots()[slot as usize].writers.store(1, crate::sync::Ordering::Relaxed);
    let (done, withdrawn) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        b.withdraw_mr(slot);
        let _ = done.send(b);
    });
    let b = withdrawn.recv_timeout(deadline_span()).expect("the withdrawal waited on a count no live peer explains");
    assert!(b.region.mr_slots()[slot as usize].writers.load(crate::sync::Ordering::Relaxed) == 1);
    drop((a, mem));
}

/// A read of a published registration returns its bytes only when the kernel copied them all
/// and the entry still stood after the copy. One cut short (the owner's range ends in memory it
/// made unreadable: part of the bytes arrived), or whose entry the owner withdrew, or withdrew
/// and published anew, since the reader looked it up, is refused (take the ordinary path) and
/// counted nowhere, whether the owner counts reads or not.
#[test]
fn a_published_read_cut_short_or_outliving_its_entry_is_refused() {
    use crate::published::{Counted, COUNT_READS, REMOTE_READ};
    if !cma_or_skip("pubread") {
        return;
    }
    let (mut a, mut b, to_b) = pair("pubread", Params::default());
    // The first page readable, the second not: a copy across them stops at the boundary (and
    // `cma` then fails with EFAULT).
    let page = page_size();
    let mut mem = OwnPages::new(2 * page);
    mem.bytes()[..page].copy_from_slice(&pattern(page, 4));
    mem.forbid(page);
    b.publish_mr(1, mem.base(), 2 * page as u64, REMOTE_READ).expect("room");
    let counted = b.publish_mr(2, mem.base(), 2 * page as u64, REMOTE_READ | COUNT_READS).expect("room");
    for key in [1, 2] {
        let entry = a.peer_mr(to_b, key).expect("published");
        let mut whole = LocalIov::owned(vec![0; page]);
        assert_eq!(a.read_published(to_b, &entry, 0, &mut whole), Ok(page), "key {key}: the readable page");
        assert_eq!(whole.into_owned().unwrap(), pattern(page, 4), "key {key}");
        let mut across = LocalIov::owned(vec![0; 2 * page]);
        assert_eq!(a.read_published(to_b, &entry, 0, &mut across), Err(Error::Again), "key {key}: a read cut short");
    }
    assert_eq!(b.take_mr_counts(counted), Counted { reads: 1, writes: 0, scribbled: false }, "only the whole read");
    let stale = b.publish_mr(3, mem.base(), page as u64, REMOTE_READ).expect("room");
    let entry = a.peer_mr(to_b, 3).expect("published");
    b.withdraw_mr(stale);
    let mut back = LocalIov::owned(vec![0; page]);
    assert_eq!(a.read_published(to_b, &entry, 0, &mut back), Err(Error::Again), "a withdrawn entry");
    b.publish_mr(3, mem.base(), page as u64, REMOTE_READ).expect("room");
    assert_eq!(a.read_published(to_b, &entry, 0, &mut back), Err(Error::Again), "an entry published anew");
    let fresh = a.peer_mr(to_b, 3).expect("published");
    assert_eq!(a.read_published(to_b, &fresh, 0, &mut back), Ok(page), "the new entry");
    assert_eq!((a.stats().published_reads, a.stats().cma_reads), (3, 3), "whole reads only");
}

/// A write of more than `published::WRITE_MAX` bytes is never made without the owner (a
/// withdrawal would wait for it too long); one of exactly that many is.
#[test]
fn a_published_write_is_made_up_to_its_bound_and_no_further() {
    use crate::published::{REMOTE_WRITE, WRITE_MAX};
    if !cma_or_skip("pubmax") {
        return;
    }
    let (mut a, mut b, to_b) = pair("pubmax", Params::default());
    let max = WRITE_MAX as usize;
    let mut mem = vec![0u8; max + 1];
    b.publish_mr(1, mem.as_mut_ptr() as u64, max as u64 + 1, REMOTE_WRITE).expect("room");
    let entry = a.peer_mr(to_b, 1).expect("published");
    let data = vec![0x5au8; max + 1];
    let over = LocalIov::owned(data);
    assert_eq!(a.write_published(to_b, &entry, 0, &over), Err(Error::Again), "one byte over the bound");
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    assert!(mem[..4096].iter().all(|&x| x == 0), "a refused write touched the memory");
    let mut data = over.into_owned().unwrap();
    data.pop();
    assert_eq!(a.write_published(to_b, &entry, 1, &LocalIov::owned(data)), Ok(max), "exactly the bound");
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    assert!(mem[0] == 0 && mem[1..].iter().all(|&x| x == 0x5a));
    assert_eq!(a.stats().published_writes, 1);
}

/// The variable that makes `child_refused_by_seccomp` do its work.
const REFUSED_CHILD: &str = "RSHM_PUBLISHED_REFUSED_CHILD";

/// As a child (this binary run again by the test below): two pairs that found CMA allowed and
/// looked up a published entry each; then a seccomp filter refuses CMA (as a policy that
/// judges each peer would, like Yama's); print what a read through one pair and a write
/// through the other return, and whether the entries can still be looked up.
#[test]
fn child_refused_by_seccomp() {
    use crate::published::{REMOTE_READ, REMOTE_WRITE};
    if std::env::var_os(REFUSED_CHILD).is_none() || !crate::cma::probe() {
        return;
    }
    let mut mem = vec![7u8; 4096];
    let base = mem.as_mut_ptr() as u64;
    let (mut r, mut rb, r_to) = pair("refusedr", Params::default());
    let (mut w, mut wb, w_to) = pair("refusedw", Params::default());
    rb.publish_mr(1, base, 4096, REMOTE_READ).expect("room");
    wb.publish_mr(1, base, 4096, REMOTE_WRITE).expect("room");
    let (read_entry, write_entry) = (r.peer_mr(r_to, 1).unwrap(), w.peer_mr(w_to, 1).unwrap());
    crate::test_child::refuse_cma_by_seccomp();
    let read = r.read_published(r_to, &read_entry, 0, &mut LocalIov::owned(vec![0; 100]));
    let write = w.write_published(w_to, &write_entry, 0, &LocalIov::owned(vec![1; 100]));
    println!(
        "read={read:?} then={:?} write={write:?} then={:?}",
        r.peer_mr(r_to, 1).map(|p| p.key),
        w.peer_mr(w_to, 1).map(|p| p.key)
    );
    assert!(mem.iter().all(|&x| x == 7));
}

/// A copy the kernel refuses by policy (seccomp here; Yama or a container's rules elsewhere),
/// after CMA was found allowed: the read or write says "take the ordinary path", and CMA is
/// never tried again for that peer (its entries are no longer offered).
#[cfg(target_arch = "x86_64")]
#[test]
fn a_copy_refused_by_policy_turns_cma_off_for_that_peer() {
    if !cma_or_skip("pubrefused") {
        return;
    }
    let mut cmd = crate::test_child::rerun("endpoint::tests::direct::child_refused_by_seccomp", REFUSED_CHILD, "1");
    let report = crate::test_child::report_line(&mut cmd, "read=");
    assert_eq!(report, "read=Err(Again) then=None write=Err(Again) then=None");
}

/// A look long after the last one watches the owner for a moment: an owner polling right now
/// (a thread here) is seen free and progressing though nothing recent is known of it.
#[test]
fn a_peer_polling_now_is_seen_after_a_long_gap() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let (mut a, b, to_b) = pair("pollnow", Params::default());
    a.link(to_b).unwrap();
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let polling = stop.clone();
    let poller = std::thread::spawn(move || {
        let mut b = b;
        while !polling.load(Ordering::Relaxed) {
            b.note_poll(true);
            for _ in 0..10 {
                std::hint::spin_loop();
            }
        }
        b
    });
    let mut seen = [false; 2];
    // The poller and this thread must run at once for a look to see it: on a busy host (other
    // tests, other processes) not in every attempt, so it is tried until the deadline.
    let dl = deadline();
    while seen != [true, true] && std::time::Instant::now() < dl {
        std::thread::sleep(std::time::Duration::from_millis(1));
        seen[0] |= a.peer_is_free(to_b);
        std::thread::sleep(std::time::Duration::from_millis(1));
        seen[1] |= a.peer_progresses(to_b);
    }
    stop.store(true, Ordering::Relaxed);
    drop(poller.join().unwrap());
    assert_eq!(seen, [true, true], "[free, progresses] never seen while it polled");
}
