//! CMA refused by the kernel after it was found allowed (a peer in another user namespace or
//! container, one that made itself undumpable, a seccomp policy): the message goes on through
//! SAR buffers instead (`recv::pull_cma`, `Status::CmaFailed`).

use super::*;

/// The variable that makes `child_whose_cma_is_refused` do its work.
const CHILD: &str = "RSHM_CMA_REFUSED_CHILD";

/// As a child (this binary run again by the test below): pairs that found CMA allowed, then a
/// seccomp filter that refuses it; a 200 KB message sent by CMA, read whole, split with its
/// sender, or held for the handler and delivered then; print, for each, what arrived and what
/// the receiver counted.
#[test]
fn child_whose_cma_is_refused() {
    if std::env::var_os(CHILD).is_none() || !crate::cma::probe() {
        return;
    }
    let len = 200_000;
    let cases = [("whole", usize::MAX), ("split", 64 * 1024), ("held", usize::MAX)];
    let pairs: Vec<_> = cases
        .iter()
        .map(|&(label, split_min)| {
            let params = Params { cma_min: 0, split_min, measure_protocol: false, ..Params::default() };
            (label, pair(&format!("refused{label}"), params))
        })
        .collect();
    crate::test_child::refuse_cma_by_seccomp();
    for (label, (mut a, mut b, to_b)) in pairs {
        let (mut ha, mut hb) = (Collect::default(), Collect { hold: label == "held", ..Default::default() });
        let hdr = MsgHeader { app: 0, tag: 1, data: 0, aux: 0, len: len as u64 };
        let sent = pattern(len, 8);
        assert_eq!(a.send(to_b, hdr, LocalIov::owned(sent.clone()), acked(5)), Ok(SendStatus::Pending));
        if hb.hold {
            pump_until((&mut a, &mut ha), (&mut b, &mut hb), "held", |_, hb| hb.offered.len() == 1);
            if let Delivered::Now(r, dest) = b.deliver(hb.offered[0].key, LocalIov::owned(vec![0; len]), 9).unwrap() {
                hb.received.push((hdr, r, dest.into_owned().unwrap()));
            }
        }
        pump_until((&mut a, &mut ha), (&mut b, &mut hb), label, |ha, hb| {
            !ha.sends_done.is_empty() && !hb.received.is_empty()
        });
        let intact = hb.received.iter().map(|(_, r, bytes)| (r.clone(), bytes == &sent)).collect::<Vec<_>>();
        let s = b.stats();
        println!(
            "{label}: sent_cma={} splits={} received={intact:?} done={:?} fallbacks={} cma_reads={}",
            a.stats().sent_cma,
            s.splits_offered,
            ha.sends_done,
            s.cma_fallbacks,
            s.cma_reads
        );
    }
}

/// A CMA message whose reads the kernel refuses (here a seccomp filter, installed after CMA was
/// found allowed) arrives through SAR buffers, intact, its send completing once; the receiver
/// counts the fallback. Whole, split (a split's head read refused ends the split too), and held
/// for the handler (refused when it is delivered).
#[cfg(target_arch = "x86_64")]
#[test]
fn a_cma_message_whose_read_is_refused_arrives_through_sar() {
    if !cma_or_skip("cmarefused") {
        return;
    }
    let out = crate::test_child::rerun("endpoint::tests::cma_refused::child_whose_cma_is_refused", CHILD, "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "the child failed: {out:?}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    for (label, splits) in [("whole", 0), ("split", 1), ("held", 0)] {
        let at = stdout.find(&format!("{label}: ")).unwrap_or_else(|| panic!("no report of {label} in {stdout}"));
        assert_eq!(
            stdout[at..].lines().next().unwrap(),
            format!(
                "{label}: sent_cma=1 splits={splits} received=[(Ok(200000), true)] done=[(5, Ok(()))] fallbacks=1 \
                 cma_reads=0"
            )
        );
    }
}

/// A CMA read that fails for any other reason than a refusal (here the sender's range is no
/// longer readable, as when an application gives its buffer back before its send completed,
/// or a sender names ranges it does not have) is not retried through SAR buffers: the receive
/// fails with EFAULT, the send fails, and the sender's range is never touched again.
#[test]
fn a_cma_read_of_an_unreadable_range_fails_both_sides_without_falling_back() {
    if !cma_or_skip("cmaunreadable") {
        return;
    }
    for (hold, split_min) in [(false, usize::MAX), (false, 64 * 1024), (true, usize::MAX)] {
        read_of_an_unreadable_range(hold, split_min);
    }
}

/// The case above, the message delivered at once (read whole, or split with its sender from
/// `split_min`) or held for the handler (`hold`) and delivered then.
fn read_of_an_unreadable_range(hold: bool, split_min: usize) {
    let len = 200_000;
    let params = Params { cma_min: 0, split_min, measure_protocol: false, ..Params::default() };
    let (mut a, mut b, to_b) = pair(&format!("cmaunreadable{hold}{split_min}"), params);
    let (mut ha, mut hb) = (Collect::default(), Collect { hold, ..Default::default() });
    let mut mem = OwnPages::new(len);
    mem.bytes()[..len].copy_from_slice(&pattern(len, 2));
    // SAFETY: readable until `forbid`; then only the kernel reads it (the test's point).
    let iov = unsafe { LocalIov::from_raw(&[(mem.at, len)]) };
    let hdr = MsgHeader { app: 0, tag: 1, data: 0, aux: 0, len: len as u64 };
    assert_eq!(a.send(to_b, hdr, iov, acked(5)), Ok(SendStatus::Pending));
    mem.forbid(0);
    if hold {
        pump_until((&mut a, &mut ha), (&mut b, &mut hb), "held", |_, hb| hb.offered.len() == 1);
        let Delivered::Now(r, dest) = b.deliver(hb.offered[0].key, LocalIov::owned(vec![0; len]), 9).unwrap() else {
            panic!("a failed read is over at once")
        };
        hb.received.push((hdr, r, dest.into_owned().unwrap()));
    }
    pump_until((&mut a, &mut ha), (&mut b, &mut hb), "both ends", |ha, hb| {
        !ha.sends_done.is_empty() && !hb.received.is_empty()
    });
    let received: Vec<_> = hb.received.iter().map(|(_, r, _)| r.clone()).collect();
    let case = format!("held: {hold}, split from {split_min}");
    assert_eq!(received, [Err(Error::Os(libc::EFAULT))], "{case}");
    assert_eq!(ha.sends_done, [(5, Err(Error::Refused(libc::EFAULT as u32)))], "the send fails too ({case})");
    let s = b.stats();
    assert_eq!((s.cma_fallbacks, s.splits_offered, a.stats().sent_cma), (0, (split_min < len).into(), 1), "{case}");
}
