//! An endpoint holds descriptors for its peers, about two per peer (`smr_core::fd_limit`):
//! with 500 peers, the 1,024 that most systems allow a process by default. A process that runs
//! out raises its soft limit on open files to the hard one and goes on, instead of failing to
//! reach its peers. Its tests change their process's limits, so each runs its case in a child
//! process.

use rshm_tests::*;
use smr_core::endpoint::SendStatus;
use smr_core::Error;

fn open_files_limit() -> libc::rlimit {
    smr_core::fd_limit::open_files_limit().expect("getrlimit")
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map(|d| d.count()).unwrap_or(0)
}

/// Which open meets the limit first depends on how many descriptors the process held before:
/// this test runs the one below in child processes that hold 0 to 7 more (an endpoint, its
/// peer and the receiver's side open about four per sender), so that each of the opens an
/// endpoint makes, of a region or a file of /proc, is the one that meets it in some child. (Its
/// pidfds are not among them: every watch here is of this one process, which has one pidfd.)
#[test]
fn peers_beyond_the_soft_open_files_limit_raise_it() {
    if let Some(extra) = std::env::var_os(EXTRA_ENV) {
        let extra = extra.to_str().and_then(|s| s.parse().ok()).expect("a count of descriptors");
        return forty_peers_under_a_soft_limit_of_64(extra);
    }
    for extra in 0..8 {
        let text = in_a_child("peers_beyond_the_soft_open_files_limit_raise_it", EXTRA_ENV, &extra.to_string());
        if text.contains("SKIPPED") {
            println!("{text}");
            return;
        }
    }
}

/// Test `test` of this binary run in a child process with `env` set to `value` (each case
/// changes its process's limits for good); its output, once it passed.
fn in_a_child(test: &str, env: &str, value: &str) -> String {
    let exe = std::env::current_exe().expect("this test's binary");
    let out = std::process::Command::new(&exe)
        .args(["--exact", test, "--nocapture"])
        .env(env, value)
        .output()
        .expect("a child test");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && text.contains("1 passed"), "{test} with {env}={value}:\n{text}");
    text
}

/// Where the hard limit is met too, the open that meets it fails with EMFILE, an error the
/// caller sees (the provider: -FI_EMFILE), not a hang or a panic; the process's hook hears it
/// once, and no raise; and the messages sent before arrive intact.
#[test]
fn peers_beyond_the_hard_open_files_limit_fail_with_emfile() {
    in_its_own_process(
        "peers_beyond_the_hard_open_files_limit_fail_with_emfile",
        HARD_ENV,
        senders_until_a_hard_limit_of_48,
    );
}

/// Run `case` if this process is the child that `env` marks; else test `test` (whose case it
/// is) in such a child.
fn in_its_own_process(test: &str, env: &str, case: fn()) {
    if std::env::var_os(env).is_some() {
        return case();
    }
    in_a_child(test, env, "1");
}

const HARD_ENV: &str = "RSHM_TEST_HARD_LIMIT";

fn senders_until_a_hard_limit_of_48() {
    use smr_core::fd_limit::LimitEvent;
    static EVENTS: std::sync::Mutex<Vec<LimitEvent>> = std::sync::Mutex::new(Vec::new());
    smr_core::fd_limit::on_event(|event| EVENTS.lock().unwrap().push(event));
    const LIMIT: u64 = 48;
    let lim = libc::rlimit { rlim_cur: LIMIT, rlim_max: LIMIT };
    // SAFETY: a valid rlimit (lowering the hard limit needs no privilege).
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) }, 0);
    let mut rx = Node::create(&unique_name("hardrx"), params(false)).expect("receiver");
    let mut senders = Vec::new();
    let failure = loop {
        assert!(senders.len() < 40, "40 senders under a hard limit of {LIMIT} descriptors");
        match sender_of_one_message(&mut rx, "hardtx", senders.len() as u32) {
            Ok(tx) => senders.push(tx),
            Err(e) => break e,
        }
    };
    assert!(matches!(failure, Error::Os(libc::EMFILE)), "the sender past the limit failed with {failure:?}");
    assert!(!senders.is_empty(), "no sender fit under the limit");
    println!("{} senders fit under a hard limit of {LIMIT}; the next failed with {failure:?}", senders.len());
    assert_eq!(*EVENTS.lock().unwrap(), [LimitEvent::Exhausted { limit: LIMIT }]);
    all_arrive_intact(&mut rx, &mut senders);
}

/// A new endpoint (`{tag}{i}`) that has sent `rx` one 64-byte message; the first error on the
/// way (its creation, the peer's, the send's) instead.
fn sender_of_one_message(rx: &mut Node, tag: &str, i: u32) -> Result<Node, Error> {
    let mut tx = Node::create(&unique_name(&format!("{tag}{i}")), params(false))?;
    let peer = tx.ep.add_peer(rx.ep.name())?;
    let data = pattern(i, 0, 64);
    let hdr = header(i, 0, &data);
    let mut data = Some(data);
    let dl = deadline();
    while let Some(d) = data.take() {
        match tx.try_send(peer, hdr, d, false) {
            Ok((SendStatus::Done | SendStatus::Pending, _)) => {}
            Err((Error::Again, back)) => {
                assert!(std::time::Instant::now() < dl, "sender {i} still answers Again");
                data = Some(back);
                tx.pump();
                rx.pump();
            }
            Err((e, _)) => return Err(e),
        }
    }
    rx.pump();
    Ok(tx)
}

/// Every sender's message reaches `rx`, every byte checked.
fn all_arrive_intact(rx: &mut Node, senders: &mut [Node]) {
    let dl = deadline();
    while rx.h.received.len() < senders.len() {
        assert!(std::time::Instant::now() < dl, "{} of {} messages arrived", rx.h.received.len(), senders.len());
        rx.pump();
        senders.iter_mut().for_each(|tx| _ = tx.pump());
    }
    for r in &rx.h.received {
        assert_eq!(r.result, Ok(64));
        verify(&r.hdr, &r.bytes).unwrap();
    }
}

const EXTRA_ENV: &str = "RSHM_TEST_EXTRA_FDS";

/// With a soft limit of 64 open files and `extra` more descriptors open, 40 endpoints each send
/// a message to one receiver in this process (about four descriptors per sender, both sides
/// counted): every message arrives intact, and the soft limit is the hard one afterwards.
/// Without the raise, the first open past 64 fails with EMFILE.
fn forty_peers_under_a_soft_limit_of_64(extra: usize) {
    const SOFT: u64 = 64;
    const SENDERS: u32 = 40;
    let mut lim = open_files_limit();
    if lim.rlim_max < 4 * SOFT {
        println!("SKIPPED: a hard limit of {} open files leaves nothing to raise to", lim.rlim_max);
        return;
    }
    lim.rlim_cur = SOFT;
    // SAFETY: a valid rlimit whose soft limit is below its hard one.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) }, 0);
    let _held: Vec<std::fs::File> = (0..extra).map(|_| std::fs::File::open("/dev/null").expect("/dev/null")).collect();
    assert!(open_fds() < SOFT as usize / 2, "the test starts with {} descriptors open", open_fds());

    let mut rx = Node::create(&unique_name("fdrx"), params(false)).expect("receiver");
    let mut senders: Vec<Node> = (0..SENDERS)
        .map(|i| {
            sender_of_one_message(&mut rx, "fdtx", i)
                .unwrap_or_else(|e| panic!("sender {i}: {e:?} with {} descriptors open", open_fds()))
        })
        .collect();
    all_arrive_intact(&mut rx, &mut senders);
    let now = open_files_limit();
    assert!(open_fds() > SOFT as usize, "{} descriptors open: the test did not need the raise", open_fds());
    assert_eq!((now.rlim_cur, now.rlim_max), (lim.rlim_max, lim.rlim_max), "the soft limit raised to the hard one");
}

const MEET_ENV: &str = "RSHM_TEST_MEET_AT_LIMIT";

/// A receiver out of descriptors when a live sender's first commands come cannot map the
/// sender's region then: the sender's commands wait (`parked`), and once descriptors are free
/// again every message arrives intact and in order, and every send completes.
#[test]
fn a_sender_met_while_out_of_descriptors_is_served_later() {
    in_its_own_process(
        "a_sender_met_while_out_of_descriptors_is_served_later",
        MEET_ENV,
        served_once_descriptors_are_free,
    );
}

/// Past `parked_timeout` the receiver gives such a sender up: its inline messages arrive, in
/// order, and the sends that needed its region fail with `PeerDead` (not a hang); once
/// descriptors are free, it is met afresh: its next messages arrive and their sends complete.
#[test]
fn a_sender_out_of_descriptors_too_long_is_given_up_with_errors() {
    in_its_own_process(
        "a_sender_out_of_descriptors_too_long_is_given_up_with_errors",
        GIVE_UP_ENV,
        given_up_past_the_timeout,
    );
}

const GIVE_UP_ENV: &str = "RSHM_TEST_GIVE_UP_AT_LIMIT";

/// A sender that goes on sending while the receiver cannot map its region is given up once
/// the receiver has set aside its bound of commands (4,096), without waiting for the timeout:
/// the receiver's memory stays bounded, and the sender's inline messages arrive, in order.
#[test]
fn a_sender_parked_past_the_command_bound_is_given_up() {
    in_its_own_process("a_sender_parked_past_the_command_bound_is_given_up", BOUND_ENV, given_up_past_the_bound);
}

const BOUND_ENV: &str = "RSHM_TEST_PARKED_BOUND";

fn given_up_past_the_bound() {
    const MESSAGES: u32 = 5000;
    lower_the_hard_limit_to_64();
    let mut rx = Node::create(&unique_name("boundrx"), params(false)).expect("receiver");
    let mut tx = Node::create(&unique_name("boundtx"), params(false)).expect("sender");
    let peer = tx.ep.add_peer(rx.ep.name()).expect("peer");
    let dl = deadline();
    let mut filler = None;
    for seq in 0..MESSAGES {
        if seq == 1 {
            // The first send mapped the receiver's region; the receiver has not met us yet.
            filler = Some(every_descriptor_left());
        }
        let mut data = Some(pattern(0, seq, 64));
        let hdr = header(0, seq, data.as_ref().unwrap());
        while let Some(d) = data.take() {
            match tx.try_send(peer, hdr, d, false) {
                Ok(_) => {}
                Err((smr_core::Error::Again, back)) => {
                    assert!(std::time::Instant::now() < dl, "message {seq} still answers Again");
                    data = Some(back);
                    rx.pump();
                }
                Err((e, _)) => panic!("message {seq}: {e:?}"),
            }
        }
        if seq == 10 {
            rx.pump();
            assert!(rx.h.received.is_empty(), "a message arrived while its sender's region did not open");
        }
    }
    rx.wait_until(dl, "every message, still out of descriptors", |rx| rx.h.received.len() == MESSAGES as usize);
    let arrived: Vec<usize> = rx.h.received.iter().map(|r| checked(r).0).collect();
    assert!(arrived.iter().enumerate().all(|(i, &seq)| i == seq), "the messages in the order sent");
    assert_eq!(rx.ep.stats().corrupt_commands, 0, "a sender given up counted as a corrupt one");
    drop(filler);
}

/// Lower this process's hard (and soft) limit on open files to 64 (no privilege needed).
fn lower_the_hard_limit_to_64() {
    let lim = libc::rlimit { rlim_cur: 64, rlim_max: 64 };
    // SAFETY: a valid rlimit.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) }, 0);
}

/// Every descriptor this process may still open, held until dropped.
fn every_descriptor_left() -> Vec<std::fs::File> {
    std::iter::from_fn(|| std::fs::File::open("/dev/null").ok()).collect()
}

/// Inline, CMA, inline, SAR or CMA, inline.
const MEET_SIZES: [usize; 5] = [64, 1 << 20, 64, 300_000, 64];

fn served_once_descriptors_are_free() {
    let (mut rx, mut tx) = met_out_of_descriptors(std::time::Duration::from_secs(30), 0);
    let dl = deadline();
    let short = |rx: &Node, tx: &Node| {
        format!("{} of 5 messages arrived, {} sends in flight", rx.h.received.len(), tx.sends_in_flight())
    };
    pump_pair_until(&mut rx, &mut tx, dl, short, |rx, tx| {
        rx.h.received.len() == MEET_SIZES.len() && tx.sends_in_flight() == 0
    });
    let arrived: Vec<usize> = rx.h.received.iter().map(|r| checked(r).0).collect();
    assert_eq!(arrived, [0, 1, 2, 3, 4], "the messages in the order sent");
    assert!(tx.h.sends_done.iter().all(|(_, r)| r.is_ok()), "{:?}", tx.h.sends_done);
    assert_eq!(rx.ep.stats().corrupt_commands, 0);
}

fn given_up_past_the_timeout() {
    let timeout = std::time::Duration::from_millis(300);
    let (mut rx, mut tx) = met_out_of_descriptors(timeout, 3);
    let dl = deadline();
    let in_flight = |_: &Node, tx: &Node| format!("{} sends still in flight", tx.sends_in_flight());
    pump_pair_until(&mut rx, &mut tx, dl, in_flight, |_, tx| tx.sends_in_flight() == 0);
    let failed: Vec<&Result<(), smr_core::Error>> = tx.h.sends_done.iter().map(|(_, r)| r).collect();
    assert_eq!(failed, [&Err(smr_core::Error::PeerDead); 2], "the two sends that needed the sender");
    // Sent again, now that descriptors are free: the receiver meets the sender afresh, and
    // both arrive (the second needs the sender's region) and complete.
    for (seq, len) in [(5, 64), (6, 1 << 20)] {
        let data = pattern(0, seq, len);
        tx.send_retry(0, header(0, seq, &data), data, true, dl).expect("a send after the receiver gave us up");
    }
    let sends_after = |_: &Node, tx: &Node| format!("the sends after: {:?}", tx.h.sends_done);
    pump_pair_until(&mut rx, &mut tx, dl, sends_after, |_, tx| tx.h.sends_done.len() >= 4);
    assert!(tx.h.sends_done[2..].iter().all(|(_, r)| r.is_ok()), "{:?}", tx.h.sends_done);
    let arrived: Vec<usize> = rx.h.received.iter().map(|r| checked(r).0).collect();
    assert_eq!(arrived, [0, 2, 4, 5, 6], "the inline messages, in order, and the ones after");
    assert_eq!(rx.ep.stats().corrupt_commands, 0, "a sender given up counted as a corrupt one");
}

/// A receiver and a sender that sent `MEET_SIZES` to it before the receiver, out of
/// descriptors (the hard limit 64 and all used), met it: the receiver progressed through more
/// than `timeout` (`Params::parked_timeout`), and 50 passes, before descriptors were free again;
/// `during` messages arrived meanwhile (none: its commands wait).
fn met_out_of_descriptors(timeout: std::time::Duration, during: usize) -> (Node, Node) {
    lower_the_hard_limit_to_64();
    let mut p = params(false);
    p.parked_timeout = timeout;
    let mut rx = Node::create(&unique_name("meetrx"), p).expect("receiver");
    let mut tx = Node::create(&unique_name("meettx"), params(false)).expect("sender");
    let peer = tx.ep.add_peer(rx.ep.name()).expect("peer");
    let dl = deadline();
    for (seq, &len) in MEET_SIZES.iter().enumerate() {
        let data = pattern(0, seq as u32, len);
        tx.send_retry(peer, header(0, seq as u32, &data), data, false, dl).expect("send");
    }
    let filler = every_descriptor_left();
    let start = std::time::Instant::now();
    let mut passes = 0;
    while passes < 50 || start.elapsed() < timeout.min(std::time::Duration::from_secs(1)) * 2 {
        rx.pump();
        tx.pump();
        passes += 1;
    }
    let got: Vec<usize> = rx.h.received.iter().map(|r| checked(r).0).collect();
    assert_eq!(got.len(), during, "arrived while out of descriptors: {got:?}");
    drop(filler);
    (rx, tx)
}

/// The sequence number of received message `r`, its bytes checked.
fn checked(r: &rshm_tests::Received) -> (usize, usize) {
    let len = *r.result.as_ref().expect("a delivered message");
    verify(&r.hdr, &r.bytes).unwrap();
    (split_tag(r.hdr.tag).1 as usize, len)
}
