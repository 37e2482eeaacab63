//! In-process tests of two endpoints: every protocol, held and direct delivery, truncation.

use super::*;
use crate::cmd::CmdEntry;

/// A handler that delivers straight into owned buffers of the message's size (or holds).
#[derive(Default)]
struct Collect {
    hold: bool,
    dest_len: Option<usize>,
    received: Vec<(MsgHeader, Result<usize>, Vec<u8>)>,
    offered: Vec<Incoming>,
    sends_done: Vec<(u64, Result<()>)>,
}

impl Handler for Collect {
    fn on_message(&mut self, msg: &Incoming, _src_name: &str) -> Disposition {
        self.offered.push(*msg);
        if self.hold {
            return Disposition::Hold;
        }
        let len = self.dest_len.unwrap_or(msg.hdr.len as usize);
        Disposition::Deliver { dest: LocalIov::owned(vec![0; len]), ctx: msg.hdr.tag }
    }
    fn on_recv_done(&mut self, ctx: u64, result: Result<usize>, dest: LocalIov) {
        let hdr = self.offered.iter().find(|m| m.hdr.tag == ctx).map(|m| m.hdr).unwrap_or_default();
        self.received.push((hdr, result, dest.into_owned().unwrap()));
    }
    fn on_send_done(&mut self, cookie: u64, result: Result<()>) {
        self.sends_done.push((cookie, result));
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

fn name(tag: &str) -> String {
    format!("rshm_ut_{tag}_{}", std::process::id())
}

fn pair(tag: &str, params: Params) -> (Endpoint, Endpoint, PeerId) {
    let a = Endpoint::create(&name(&format!("{tag}a")), params.clone()).unwrap();
    let b = Endpoint::create(&name(&format!("{tag}b")), params).unwrap();
    let mut a = a;
    let to_b = a.add_peer(b.name()).unwrap();
    (a, b, to_b)
}

/// Send every size class from a to b and check the bytes that arrive.
fn exchange_all_sizes(tag: &str, params: Params) -> (u64, u64) {
    let (mut a, mut b, to_b) = pair(tag, params);
    let sizes = [0usize, 1, 208, 209, 4096, 4097, 65536, 1 << 20, 3 * (1 << 20) + 7];
    let (mut ha, mut hb) = (Collect::default(), Collect::default());
    for (i, &len) in sizes.iter().enumerate() {
        let data = pattern(len, i as u8);
        let hdr = MsgHeader { app: 1, tag: i as u64, data: 7, len: len as u64 };
        let status = loop {
            match a.send(
                to_b,
                hdr,
                LocalIov::owned(data.clone()),
                SendOpts { cookie: i as u64, delivery_complete: false },
            ) {
                Err(Error::Again) => {
                    a.progress(&mut ha);
                    b.progress(&mut hb);
                }
                other => break other.unwrap(),
            }
        };
        while hb.received.len() <= i
            || (status == SendStatus::Pending && !ha.sends_done.iter().any(|d| d.0 == i as u64))
        {
            a.progress(&mut ha);
            b.progress(&mut hb);
        }
        let (h, result, bytes) = &hb.received[i];
        assert_eq!(h.len, len as u64);
        assert_eq!(*result, Ok(len), "size {len}");
        assert!(*bytes == data, "payload of size {len} differs");
    }
    assert!(ha.sends_done.iter().all(|d| d.1.is_ok()));
    (b.stats().cma_fallbacks, a.stats().cma_fallbacks)
}

#[test]
fn every_size_through_cma() {
    exchange_all_sizes("cma", Params::default());
}

#[test]
fn every_size_through_sar() {
    exchange_all_sizes("sar", Params { cma: false, ..Params::default() });
}

#[test]
fn held_messages_are_delivered_later_and_truncated_on_request() {
    let (mut a, mut b, to_b) = pair("held", Params::default());
    let (mut ha, mut hb) = (Collect::default(), Collect { hold: true, ..Default::default() });
    let sizes = [5usize, 3000, 100_000, 300_000];
    for (i, &len) in sizes.iter().enumerate() {
        let hdr = MsgHeader { app: 0, tag: i as u64, data: 0, len: len as u64 };
        a.send(to_b, hdr, LocalIov::owned(pattern(len, 9)), SendOpts { cookie: i as u64, delivery_complete: true })
            .unwrap();
    }
    while hb.offered.len() < sizes.len() {
        a.progress(&mut ha);
        b.progress(&mut hb);
    }
    for _ in 0..100 {
        a.progress(&mut ha);
        b.progress(&mut hb);
    }
    // CMA sends stay pending until delivered.
    assert!(ha.sends_done.len() < sizes.len());
    for (i, m) in hb.offered.clone().iter().enumerate() {
        let want = if i == 3 { 1000 } else { sizes[i] };
        let result = match b.deliver(m.key, LocalIov::owned(vec![0; want]), i as u64).unwrap() {
            Delivered::Now(r, dest) => (r, dest.into_owned().unwrap()),
            Delivered::Later => {
                while hb.received.is_empty() {
                    a.progress(&mut ha);
                    b.progress(&mut hb);
                }
                let (_, r, v) = hb.received.pop().unwrap();
                (r, v)
            }
        };
        if i == 3 {
            assert_eq!(result.0, Err(Error::Truncated { delivered: 1000, sent: 300_000 }));
        } else {
            assert_eq!(result.0, Ok(sizes[i]));
        }
        assert_eq!(result.1[..], pattern(sizes[i], 9)[..want]);
    }
    while ha.sends_done.len() < sizes.len() {
        a.progress(&mut ha);
        b.progress(&mut hb);
    }
    assert_eq!(b.held_count(), 0);
}

#[test]
fn garbage_commands_are_counted_and_survived() {
    let (mut a, mut b, _to_b) = pair("junk", Params::default());
    let peer_view = crate::region::Region::open(b.name()).unwrap();
    let mut rng = 0x1234_5678_9abc_def0u64;
    for _ in 0..2000 {
        let mut e = CmdEntry::default();
        let bytes: &mut [u8] = &mut e.payload;
        for chunk in bytes.chunks_mut(8) {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let n = chunk.len();
            chunk.copy_from_slice(&rng.to_le_bytes()[..n]);
        }
        e.op = (rng % 6) as u8;
        e.proto = (rng >> 8) as u8 % 6;
        e.src = (rng >> 16) as u32 % 2048;
        e.len = rng >> (rng % 64);
        while peer_view.cmd_ring().push(&e).is_err() {
            b.progress(&mut Collect::default());
        }
    }
    let mut hb = Collect::default();
    b.progress(&mut hb);
    b.progress(&mut hb);
    assert!(b.stats().corrupt_commands > 1200, "{:?}", b.stats());
    // Still works afterwards.
    let to_b = a.add_peer(b.name()).unwrap();
    let hdr = MsgHeader { app: 0, tag: 1, data: 0, len: 4 };
    a.send(to_b, hdr, LocalIov::owned(b"live".to_vec()), SendOpts::default()).unwrap();
    while hb.received.is_empty() {
        b.progress(&mut hb);
    }
    assert_eq!(hb.received[0].2, b"live");
}

#[test]
fn closing_a_receiver_fails_pending_and_later_sends() {
    let (mut a, b, to_b) = pair("closed", Params::default());
    let mut ha = Collect::default();
    let big = pattern(100_000, 1);
    let hdr = MsgHeader { app: 0, tag: 1, data: 0, len: big.len() as u64 };
    // Pending until b reads it with CMA, which it never will.
    assert_eq!(
        a.send(to_b, hdr, LocalIov::owned(big), SendOpts { cookie: 9, ..SendOpts::default() }),
        Ok(SendStatus::Pending)
    );
    drop(b);
    let start = std::time::Instant::now();
    while ha.sends_done.is_empty() {
        a.progress(&mut ha);
        assert!(
            start.elapsed() < std::time::Duration::from_secs(2),
            "pending send not failed after the receiver closed"
        );
    }
    assert_eq!(ha.sends_done, vec![(9, Err(Error::PeerDead))]);
    let small = MsgHeader { app: 0, tag: 2, data: 0, len: 4 };
    assert_eq!(a.send(to_b, small, LocalIov::owned(b"lost".to_vec()), SendOpts::default()), Err(Error::PeerDead));
}
