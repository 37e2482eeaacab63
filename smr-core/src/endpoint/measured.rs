//! Which protocol moves a large message faster on this host, SAR or CMA, learnt from the
//! messages themselves.
//!
//! Neither wins everywhere. On the hosts this project has run on, SAR (both CPUs copying through
//! bounce buffers) moved 64 KiB-4 MiB 1.5-2.5x faster than one `process_vm_readv` on one, and
//! CMA 1.4-1.6x faster than SAR on another (docs/perf/protocols.md); a fixed threshold is wrong
//! on one of them. So a receiver times the large transfers whose senders ask (`cmd::FLAG_TIMED`:
//! the CMA read, or its copies out of the SAR segments) and reports the time in its answer. The
//! sender of a SAR
//! message times its own copies into the SAR buffers too and credits the message with the two
//! as a pipeline (`sar_time`): in a stream the receiver may find every segment already in and
//! copy at memory speed while the sender's copies set the pace, and on some hosts the sender's
//! writes into lines the receiver read crawl at 2 GB/s where the receiver's reads do not. When
//! both sides were busy with operations of their own, nothing idle overlaps the copies, and the
//! message costs their sum (`Overlap`). It
//! keeps, per size class, a figure for each protocol and sends by the faster one. It keeps trying
//! the other now and then, since a host's state moves.

/// The two ways a large message can travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    Sar,
    Cma,
}

/// What a SAR message's two sides' copies overlap (`sar_time`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overlap {
    /// Each other: the receiver copies a segment out while the sender copies the next one in,
    /// on a CPU that had nothing else to do.
    Pipeline,
    /// Nothing that comes free: both sides were busy with operations of their own when the
    /// message went (each side of a two-way stream of large reads, fi_rma_bw -o read).
    None,
}

impl Overlap {
    /// The overlap of a message sent while we had `others_outstanding` operations of our own
    /// and its receiver was `receiver_busy` with its own (`Endpoint::peer_busy_with_own`, a
    /// look at the receiver's line: asked only when we are busy too). Either alone leaves a CPU
    /// free: a one-way stream's receiver only copies out, and the sender of a ping-pong waits.
    pub fn of(others_outstanding: bool, receiver_busy: impl FnOnce() -> bool) -> Overlap {
        if others_outstanding && receiver_busy() {
            Overlap::None
        } else {
            Overlap::Pipeline
        }
    }
}

impl Via {
    fn other(self) -> Via {
        match self {
            Via::Sar => Via::Cma,
            Via::Cma => Via::Sar,
        }
    }
}

/// A choice made by measurement: what the answer's time is to be credited to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Choice {
    pub via: Via,
    class: usize,
    /// False for the first message of a run (`RUN`), and for the messages in use between two
    /// sampled ones (`Chooser::sampling`): its time is not learnt.
    timed: bool,
}

impl Choice {
    /// Whether this message's time is learnt: a caller that times it itself need not read the
    /// clock otherwise.
    pub fn timed(&self) -> bool {
        self.timed
    }
}

/// Once a class has learnt both ways, one message in this many of the way in use is timed
/// (`Chooser::sampling`): by the choosers of one-sided operations, reads and writes sent alone
/// (`lone.rs`) and large reads answered or made by CMA (`read_way.rs`), and by the chooser of
/// large messages, whose receivers time a CMA read or SAR copies only when the sender asks
/// (`cmd::FLAG_TIMED`). Timing one costs two clock reads (34 ns each on the AMD host of
/// 2026-12-02) and its lesson's bookkeeping, an answered large read four clock reads on two
/// CPUs and a record of the read. Timing every one, fi_read of 4 KiB alone took 1,753
/// instructions against 1,517 sampled and 1,499 with measuring off; on that host reads alone of
/// 4-16 KiB took 0.12-0.14 us longer, writes alone of 8-32 KiB 0.25-0.35 us, and fi_rma_bw reads
/// of 24-128 KiB 5-12% (docs/perf/one-sided.md, sixtieth session). An 8 KiB CMA message's
/// arrival took about 140 instructions fewer untimed (docs/perf/where-the-time-goes.md).
pub const TIMED_ONE_IN: u32 = 8;

/// Messages up to this size go by the caller's fixed rule: inject buffers up to their size (4 KiB),
/// which the chooser never sees. Above it SAR and CMA trade places with the host's state on
/// this project's AMD VM: 8 KiB by SAR took 1.6 us one way in its fast state (CMA 2.1-2.3) and
/// 3.9-4.1 us in its slow one, where CMA took 3.0-3.3 (docs/perf/protocols.md, seventy-eighth
/// session). From 8 KiB, as this was until then, a 5-8 KiB message paid SAR's slow state in full.
pub const MEASURED_ABOVE: u64 = 4 * 1024;

/// Size classes: (4 KiB, 8 KiB], (8 KiB, 16 KiB], ... up to (2 MiB, 4 MiB], then one class
/// for everything larger.
const CLASSES: usize = 11;
const SMALLEST_CLASS_TOP: u64 = 8 * 1024;
/// Answers of each protocol a class waits for before it trusts its figures.
const LEARN: u32 = 3;
/// Once it trusts them, one message in this many (at least) goes the other way, so that a change
/// in the host is noticed (about 3% of large messages on the slower protocol).
const RECHECK_EVERY: u32 = 32;
/// What the rechecks may cost, as a share of the time the messages between them take: the
/// further the other protocol is behind, the rarer its rechecks. On this project's VM SAR moved
/// 1.7 GB/s in some host states where CMA moved 10: one message in 32 by SAR then cost a 64 KiB
/// stream 15-25% (docs/perf/protocols.md). 3% until the smallest class came down to 5-8 KiB,
/// whose rechecks by CMA cost a third of a message each in the host's fast state; at 1% they
/// come a third as often, and a host that changes is still noticed within `RECHECK_MOST`
/// messages of a class. (A 5-8 KiB ping-pong measured 2-6% slower than by SAR alone in the
/// fast state either way: the timing and the choice cost as much as the rechecks.)
const RECHECK_COST_PERCENT: u64 = 1;
/// The rarest recheck, however far behind the other protocol is: a host that changes back is
/// noticed within this many messages of a class.
const RECHECK_MOST: u32 = 1024;
/// Messages a class sends alternately while it waits for its first timed answers.
const GIVE_UP: u32 = 64;
/// A protocol is tried in runs of this many messages, while learning and at each recheck, and
/// the first of a run is not learnt: it finds the caches as the other protocol left them. A
/// 64 KiB SAR message sent alone among CMA ones took 140 ns per KiB where SAR messages in a row
/// took 50, so that single rechecks kept choosing CMA (at 85) for a ping-pong that ran 1.6x
/// faster by SAR alone: the previous message had left the destination's lines in the other
/// process's cache (a split CMA copy is half written by the sender), and the receiver's copy
/// out of the SAR buffer had to take them back first.
const RUN: u32 = 3;

/// Answers a protocol's figure is the median of. An odd number, so that one answer far off
/// either way (the first message into pages never touched, which fault in the copy; a copy
/// preempted by the hypervisor) does not move the figure while the others agree.
const KEPT: usize = 5;

/// A protocol's cost in a class, in nanoseconds per KiB: the median of its newest answers.
#[derive(Debug, Clone, Copy, Default)]
struct Cost {
    newest: [u64; KEPT],
    /// Where the next answer goes in `newest`.
    next: usize,
    answers: u32,
    /// The median of `newest`, the figure compared (the upper one of an even count). The
    /// running mean this replaced let one answer four times the others hold the choice for a
    /// hundred messages. Kept, not computed at every choice, which is made for every message.
    median: u64,
}

impl Cost {
    fn learn(&mut self, ns_per_kib: u64) {
        self.newest[self.next] = ns_per_kib;
        self.next = (self.next + 1) % KEPT;
        self.answers = self.answers.saturating_add(1);
        let kept = (self.answers as usize).min(KEPT);
        let mut sorted = self.newest;
        sorted[..kept].sort_unstable();
        self.median = sorted[kept / 2];
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct Class {
    sar: Cost,
    cma: Cost,
    /// Messages sent each way, answered or not (a window of messages goes out before the first
    /// answer comes back: while learning, they alternate).
    sent_sar: u32,
    sent_cma: u32,
    /// Messages since the last recheck.
    since_recheck: u32,
    /// The recheck in progress: which way, and how many of its run (`RUN`) are still to go.
    recheck: Option<(Via, u32)>,
}

impl Class {
    fn count(&mut self, via: Via) {
        match via {
            Via::Sar => self.sent_sar = self.sent_sar.saturating_add(1),
            Via::Cma => self.sent_cma = self.sent_cma.saturating_add(1),
        }
    }

    /// Messages between two rechecks: `RECHECK_EVERY`, or more when the other protocol is so
    /// far behind that a recheck every `RECHECK_EVERY` would cost more than
    /// `RECHECK_COST_PERCENT` of the time (a recheck costs the difference of the two figures,
    /// the messages between them the faster figure each).
    fn recheck_every(&self) -> u32 {
        let (fast, slow) = (self.sar.median.min(self.cma.median), self.sar.median.max(self.cma.median));
        if fast == 0 {
            return RECHECK_EVERY;
        }
        let spacing = (slow - fast).saturating_mul(100 * u64::from(RUN)) / fast.saturating_mul(RECHECK_COST_PERCENT);
        spacing.clamp(u64::from(RECHECK_EVERY), u64::from(RECHECK_MOST)) as u32
    }
}

/// The sender's figures, for every peer alike (the speeds are the host's).
#[derive(Debug, Clone, Default)]
pub struct Chooser {
    classes: [Class; CLASSES],
    /// Once a class has learnt both protocols, only one message in this many of the one in use
    /// is timed (0 or 1: every one; `sampling`).
    sample_every: u32,
}

fn class_of(len: u64) -> usize {
    let mut top = SMALLEST_CLASS_TOP;
    let mut class = 0;
    while len > top && class + 1 < CLASSES {
        top *= 2;
        class += 1;
    }
    class
}

impl Chooser {
    /// A chooser that, once a class has learnt both protocols, times only one message in
    /// `every` of the protocol in use (learning runs and rechecks are timed as always): for
    /// operations short enough that the clock reads of their timing show (`TIMED_ONE_IN`).
    pub fn sampling(every: u32) -> Chooser {
        Chooser { sample_every: every, ..Chooser::default() }
    }

    /// The protocol for a message of `len` bytes; None when the answers taught nothing (no
    /// timed answer of either protocol after `GIVE_UP` messages): the caller's fixed rule.
    pub fn choose(&mut self, len: u64) -> Option<Choice> {
        let class = class_of(len);
        let c = &mut self.classes[class];
        let learning = c.sar.answers < LEARN || c.cma.answers < LEARN;
        let sent = c.sent_sar.saturating_add(c.sent_cma);
        let via = if learning && sent < GIVE_UP {
            // Runs of CMA and SAR in turn, CMA first; a run's first message is not learnt.
            let via = if (sent / RUN) % 2 == 0 { Via::Cma } else { Via::Sar };
            c.count(via);
            return Some(Choice { via, class, timed: sent % RUN != 0 });
        } else {
            // A protocol whose answers never carry a time (a receiver that answers later, by
            // another path) counts as slower; the rechecks keep asking.
            let best = match (c.sar.answers, c.cma.answers) {
                (0, 0) => return None,
                (0, _) => Via::Cma,
                (_, 0) => Via::Sar,
                _ if c.cma.median <= c.sar.median => Via::Cma,
                _ => Via::Sar,
            };
            let (via, left) = match c.recheck {
                Some(run) => run,
                None => {
                    c.since_recheck += 1;
                    if c.since_recheck < c.recheck_every() {
                        c.count(best);
                        let timed = self.sample_every <= 1 || c.since_recheck % self.sample_every == 0;
                        return Some(Choice { via: best, class, timed });
                    }
                    c.since_recheck = 0;
                    (best.other(), RUN)
                }
            };
            // A recheck: a run of the other protocol, only its last message learnt. The
            // protocol in use is measured warm, so the other is compared warm too: a 1 MiB
            // ping-pong by SAR at 38-42 ns/KiB turned to CMA (47-50) and stayed there, since
            // SAR's rechecks came back at 68-109 for the second message of each run (still
            // paying for the switch) and 42-50 for the third; it ran at 62-65 us one-way where
            // SAR alone took 49-51. (The learning runs at the start learn two of three: both
            // protocols pay alike there.)
            c.recheck = (left > 1).then_some((via, left - 1));
            (via, left == 1)
        };
        let (via, timed) = via;
        c.count(via);
        Some(Choice { via, class, timed })
    }

    /// Whether the figures learnt so far (both protocols timed `LEARN` times or more) put `via`
    /// first for messages of `len` bytes: for a caller that follows the choice without making
    /// one of its own to time. Changes nothing.
    pub fn settled_on(&self, via: Via, len: u64) -> bool {
        let c = &self.classes[class_of(len)];
        let cma_first = c.cma.median <= c.sar.median;
        c.sar.answers >= LEARN && c.cma.answers >= LEARN && cma_first == (via == Via::Cma)
    }

    /// A receiver's time for a message sent by `choice`: `ns` for `len` bytes (0: not timed).
    pub fn learn(&mut self, choice: Choice, len: u64, ns: u64) {
        if ns == 0 || len == 0 || !choice.timed {
            return;
        }
        let ns_per_kib = ns.saturating_mul(1024) / len;
        let c = &mut self.classes[choice.class.min(CLASSES - 1)];
        let learnt = c.sar.answers >= LEARN && c.cma.answers >= LEARN;
        let (this, other) = match choice.via {
            Via::Sar => (&mut c.sar, &c.cma),
            Via::Cma => (&mut c.cma, &c.sar),
        };
        this.learn(ns_per_kib);
        // A recheck that beat the protocol in use without turning the choice yet asks for the
        // next one at once: a median turns after three such answers, and a recheck learns one,
        // so a host that changed would otherwise wait three recheck spacings (up to 3 x
        // `RECHECK_MOST` messages).
        if learnt && this.median > other.median && ns_per_kib < other.median {
            c.since_recheck = RECHECK_MOST;
        }
    }
}

#[cfg(test)]
impl Chooser {
    /// Timed answers so far for messages of `len` bytes: (SAR, CMA).
    pub fn answers(&self, len: u64) -> (u32, u32) {
        let c = &self.classes[class_of(len)];
        (c.sar.answers, c.cma.answers)
    }

    /// The figures compared for messages of `len` bytes, ns per KiB: (SAR, CMA).
    pub fn figures(&self, len: u64) -> (u64, u64) {
        let c = &self.classes[class_of(len)];
        (c.sar.median, c.cma.median)
    }
}

/// A SAR message's time, from the receiver's copies out (`receiver_ns`) and the sender's copies
/// in (`sender_ns`) of its `len` bytes. Copies only, not the span from first segment to last:
/// that span also holds whatever else either side did meanwhile (the CMA messages queued between
/// the segments, docs/perf/protocols.md), which made SAR look up to 200 times slower than it was.
///
/// With `Overlap::Pipeline` the two copy in a pipeline, so the slower side's copies plus the
/// other side's share of the first segment (`first_segment` bytes), which nothing overlaps. With
/// `Overlap::None` (both sides busy with operations of their own: `Overlap::of`) the sum: each
/// side's copies take CPU time its own work wanted, where a CMA read takes one side's.
pub fn sar_time(receiver_ns: u64, sender_ns: u64, len: u64, first_segment: u64, overlap: Overlap) -> u64 {
    let (slow, fast) = (receiver_ns.max(sender_ns), receiver_ns.min(sender_ns));
    if overlap == Overlap::None {
        return slow.saturating_add(fast);
    }
    if len == 0 {
        return slow;
    }
    let fill = (fast as u128 * first_segment.min(len) as u128 / len as u128) as u64;
    slow.saturating_add(fill)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    /// Messages one protocol is sent while a class learns: runs of `RUN`, `RUN - 1` of each
    /// learnt, until `LEARN` are.
    const LEARN_SENT: usize = (RUN * LEARN.div_ceil(RUN - 1)) as usize;

    /// Answer `n` messages of `len` with what each protocol costs, in ns per KiB.
    fn run(ch: &mut Chooser, len: u64, n: usize, sar: u64, cma: u64) -> (usize, usize) {
        let (mut by_sar, mut by_cma) = (0, 0);
        for _ in 0..n {
            let c = ch.choose(len).expect("timed answers");
            let per_kib = match c.via {
                Via::Sar => {
                    by_sar += 1;
                    sar
                }
                Via::Cma => {
                    by_cma += 1;
                    cma
                }
            };
            ch.learn(c, len, per_kib * len / 1024);
        }
        (by_sar, by_cma)
    }

    #[test]
    fn sends_by_the_faster_once_it_has_measured_both() {
        let mut ch = Chooser::default();
        // CMA faster (the host of 2026-11-25): after learning, nearly all go by CMA.
        let rechecks = RUN as usize * (200 / RECHECK_EVERY as usize + 1);
        let (sar, cma) = run(&mut ch, MIB, 200, 120, 78);
        assert!(sar <= LEARN_SENT + rechecks, "sar {sar} cma {cma}");
        // SAR faster in another class (the host of 2026-11-23): that class learns on its own.
        let (sar, cma) = run(&mut ch, 128 * 1024, 200, 40, 100);
        assert!(cma <= LEARN_SENT + rechecks, "sar {sar} cma {cma}");
        // And the first class still goes by CMA.
        assert_eq!(ch.choose(MIB).map(|c| c.via), Some(Via::Cma));
    }

    #[test]
    fn follows_the_host_when_it_changes() {
        let mut ch = Chooser::default();
        run(&mut ch, 4 * MIB, 100, 50, 100);
        assert_eq!(ch.choose(4 * MIB).map(|c| c.via), Some(Via::Sar));
        // SAR becomes slow: the rechecks of CMA, and SAR's own answers, turn the choice.
        let (_, cma) = run(&mut ch, 4 * MIB, 400, 200, 100);
        assert!(cma > 300, "cma {cma}");
        assert_eq!(run(&mut ch, 4 * MIB, 10, 200, 100), (0, 10));
    }

    #[test]
    fn a_sampling_chooser_times_one_in_a_few_of_the_way_in_use_and_still_follows_the_host() {
        let len = 4 * 1024;
        let mut ch = Chooser::sampling(8);
        run(&mut ch, len, 100, 50, 100);
        // Learnt: SAR in use. Of its messages about one in eight is timed; the rechecks' last
        // messages (CMA) always are.
        let (mut in_use, mut timed, mut recheck_timed) = (0, 0, 0);
        for _ in 0..800 {
            let c = ch.choose(len).expect("learnt");
            match c.via {
                Via::Sar => {
                    in_use += 1;
                    timed += usize::from(c.timed());
                }
                Via::Cma => recheck_timed += usize::from(c.timed()),
            }
            ch.learn(c, len, if c.via == Via::Sar { 50 } else { 100 } * len / 1024);
        }
        assert!(in_use > 700, "in use {in_use}");
        assert!((in_use / 9..=in_use / 7).contains(&timed), "timed {timed} of {in_use}");
        assert!(recheck_timed > 0, "the rechecks are timed");
        // SAR becomes slow: its sampled answers and the rechecks of CMA turn the choice.
        let (_, cma) = run(&mut ch, len, 400, 200, 100);
        assert!(cma > 250, "cma {cma}");
        assert_eq!(run(&mut ch, len, 10, 200, 100), (0, 10));
    }

    #[test]
    fn a_protocol_far_behind_is_rechecked_rarely_but_still_rechecked() {
        let mut ch = Chooser::default();
        run(&mut ch, 64 * 1024, 2 * LEARN as usize, 500, 100);
        // SAR five times slower (the host state where it moved 1.7 GB/s): a recheck every 32
        // would put a fifth of the time into them; a run of three every `RECHECK_MOST` instead.
        let (sar, cma) = run(&mut ch, 64 * 1024, 2 * RECHECK_MOST as usize, 500, 100);
        assert!((RUN as usize..=3 * RUN as usize).contains(&sar), "sar {sar} cma {cma}");
        // Two protocols close together keep the usual rate.
        let (sar, _) = run(&mut ch, MIB, 2 * LEARN as usize + 320, 110, 100);
        assert!(sar >= LEARN as usize + 9, "sar {sar}");
        // SAR recovers: the rare rechecks still see it, and it wins again.
        let (sar, cma) = run(&mut ch, 64 * 1024, 2 * RECHECK_MOST as usize, 50, 100);
        assert!(sar > RECHECK_MOST as usize, "sar {sar} cma {cma}");
        // SAR is the choice again: at most one recheck run of CMA among the next 20.
        assert!(run(&mut ch, 64 * 1024, 20, 50, 100).0 >= 20 - RUN as usize);
    }

    /// `settled_on` says nothing while a class learns, then follows the figures, per class.
    #[test]
    fn settled_only_once_both_are_learnt_and_on_the_faster() {
        let mut ch = Chooser::default();
        assert!(!ch.settled_on(Via::Cma, MIB) && !ch.settled_on(Via::Sar, MIB), "nothing learnt");
        // One run of each: CMA's first two learnt, SAR's not yet three.
        run(&mut ch, MIB, 2 * RUN as usize, 100, 50);
        assert!(!ch.settled_on(Via::Cma, MIB), "still learning");
        run(&mut ch, MIB, LEARN_SENT, 100, 50);
        assert!(ch.settled_on(Via::Cma, MIB) && !ch.settled_on(Via::Sar, MIB));
        assert!(!ch.settled_on(Via::Cma, 64 * 1024), "another class learnt nothing");
        // SAR turns faster: once its figure passes CMA's, the class settles on it.
        run(&mut ch, MIB, 400, 20, 50);
        assert!(ch.settled_on(Via::Sar, MIB) && !ch.settled_on(Via::Cma, MIB));
    }

    /// A recheck's run teaches one answer, its last: the earlier ones still pay for the switch.
    #[test]
    fn a_recheck_run_learns_only_its_last_message() {
        let mut ch = Chooser::default();
        run(&mut ch, MIB, 2 * LEARN_SENT, 100, 50);
        let (sar_before, _) = ch.answers(MIB);
        let mut rechecks = 0;
        for _ in 0..2000 {
            let c = ch.choose(MIB).expect("measured");
            if c.via == Via::Sar {
                rechecks += 1;
                assert_eq!(c.timed, ch.classes[class_of(MIB)].recheck.is_none(), "only the run's last counts");
            }
            ch.learn(c, MIB, if c.via == Via::Sar { 100 * 1024 } else { 50 * 1024 });
            if rechecks == 3 * RUN as usize {
                break;
            }
        }
        assert_eq!(rechecks, 3 * RUN as usize, "three recheck runs by SAR");
        assert_eq!(ch.answers(MIB).0 - sar_before, 3);
    }

    /// The protocol not in use is compared warm: its rechecks' second message still pays for
    /// the switch (here 80 ns/KiB for SAR, as a 1 MiB ping-pong measured), and only the run's
    /// last, warm one (38) counts against the one in use (CMA, 48); a recheck that beats it calls
    /// the next at once, so SAR takes over after three rechecks in a row (79 messages when each
    /// waited for the usual spacing).
    #[test]
    fn a_recheck_is_judged_by_its_warm_last_message() {
        let mut ch = Chooser::default();
        // CMA faster first: the chooser settles on it.
        run(&mut ch, MIB, 200, 60, 48);
        assert_eq!(ch.choose(MIB).map(|c| c.via), Some(Via::Cma));
        // SAR becomes faster once warm; its first two messages after a CMA one pay 80.
        let mut since_cma = 0;
        let vias: Vec<Via> = (0..2000)
            .map(|_| {
                let c = ch.choose(MIB).expect("measured");
                let per_kib = match c.via {
                    Via::Cma => {
                        since_cma = 0;
                        48
                    }
                    Via::Sar => {
                        since_cma += 1;
                        if since_cma <= 2 {
                            80
                        } else {
                            38
                        }
                    }
                };
                ch.learn(c, MIB, per_kib * 1024);
                c.via
            })
            .collect();
        // SAR takes over within the first recheck spacing and the three rechecks after it (the
        // first beat CMA, so the next follow at once), and keeps the choice.
        let took_over = vias.windows(20).position(|w| w.iter().all(|&v| v == Via::Sar)).expect("SAR never took over");
        assert!(took_over <= RECHECK_EVERY as usize + 3 * RUN as usize, "SAR took over after {took_over} messages");
        let by_sar = vias[1000..].iter().filter(|&&v| v == Via::Sar).count();
        assert!(by_sar > 900, "SAR {by_sar} of the last 1000");
    }

    #[test]
    fn one_answer_far_off_does_not_decide() {
        let mut ch = Chooser::default();
        // The first CMA answer took 25 times the others (pages faulting in, a preempted copy):
        // the faster protocol still wins as soon as both have been measured.
        let mut slow_given = false;
        while ch.answers(MIB).0 < LEARN || ch.answers(MIB).1 < LEARN {
            let c = ch.choose(MIB).expect("learning");
            let per_kib = match c.via {
                Via::Sar => 100,
                Via::Cma if c.timed && !slow_given => {
                    slow_given = true;
                    1000
                }
                Via::Cma => 40,
            };
            ch.learn(c, MIB, per_kib * 1024);
        }
        assert!(slow_given);
        let (sar, cma) = run(&mut ch, MIB, 20, 100, 40);
        assert_eq!((sar, cma), (0, 20));
        // And a single slow CMA answer later does not turn it either.
        let c = ch.choose(MIB).expect("measured");
        ch.learn(c, MIB, 1000 * 1024);
        assert_eq!(run(&mut ch, MIB, 5, 100, 40), (0, 5));
    }

    #[test]
    fn a_window_sent_before_any_answer_tries_both() {
        let mut ch = Chooser::default();
        let n = 4 * RUN as usize;
        let vias: Vec<Via> = (0..n).map(|_| ch.choose(MIB).expect("learning").via).collect();
        assert_eq!(vias.iter().filter(|&&v| v == Via::Cma).count(), n / 2);
        assert_eq!(vias.iter().filter(|&&v| v == Via::Sar).count(), n / 2);
        // In runs: the first of each is not learnt (it finds the caches as the other left them).
        assert_eq!(vias[..RUN as usize], [Via::Cma; RUN as usize]);
    }

    #[test]
    fn untimed_answers_teach_nothing_and_leave_the_choice_to_the_caller() {
        let mut ch = Chooser::default();
        for _ in 0..GIVE_UP {
            let c = ch.choose(MIB).expect("learning");
            ch.learn(c, MIB, 0);
        }
        let class = &ch.classes[class_of(MIB)];
        assert_eq!((class.sar.answers, class.cma.answers), (0, 0));
        assert_eq!(ch.choose(MIB), None);
        // Timed answers of one protocol only: that one, and the other now and then.
        let c = Choice { via: Via::Sar, class: class_of(MIB), timed: true };
        ch.learn(c, MIB, 1_000_000);
        let vias: Vec<Via> = (0..RECHECK_EVERY + RUN - 1).map(|_| ch.choose(MIB).expect("one answer").via).collect();
        assert_eq!(vias.iter().filter(|&&v| v == Via::Cma).count(), RUN as usize, "one run of rechecks");
    }

    #[test]
    fn any_time_a_peer_reports_is_taken_without_overflow() {
        let mut ch = Chooser::default();
        for ns in [u64::MAX, u64::MAX, 1, u64::MAX / 3] {
            let c = ch.choose(1).unwrap_or(Choice { via: Via::Cma, class: 0, timed: true });
            ch.learn(c, 1, ns);
        }
        assert!(ch.choose(1).is_some());
    }

    #[test]
    fn classes_by_size() {
        assert_eq!(class_of(MEASURED_ABOVE + 1), 0);
        assert_eq!(class_of(8 * 1024), 0);
        assert_eq!(class_of(8 * 1024 + 1), 1);
        assert_eq!(class_of(16 * 1024), 1);
        assert_eq!(class_of(16 * 1024 + 1), 2);
        assert_eq!(class_of(40 * 1024), 3);
        assert_eq!(class_of(64 * 1024), 3);
        assert_eq!(class_of(64 * 1024 + 1), 4);
        assert_eq!(class_of(MIB), 7);
        assert_eq!(class_of(4 * MIB), 9);
        assert_eq!(class_of(1 << 30), CLASSES - 1);
    }

    #[test]
    fn sar_time_is_the_slower_side_and_the_first_segment_of_the_other() {
        // 64 KiB: the receiver copied out in 2,000 ns, the sender in in 3,000; the receiver's
        // first quarter (16 KiB) could not overlap anything.
        let p = Overlap::Pipeline;
        assert_eq!(sar_time(2_000, 3_000, 64 * 1024, 16 * 1024, p), 3_500);
        assert_eq!(sar_time(3_000, 2_000, 64 * 1024, 16 * 1024, p), 3_500);
        // One segment: both copies in turn.
        assert_eq!(sar_time(5, 7, 16 * 1024, 16 * 1024, p), 12);
        assert_eq!(sar_time(u64::MAX, u64::MAX, 1, 1, p), u64::MAX);
        assert_eq!(sar_time(9, 0, 0, 16 * 1024, p), 9);
        // Both sides busy with their own: the copies cost their sum, one segment or many.
        assert_eq!(sar_time(2_000, 3_000, 64 * 1024, 16 * 1024, Overlap::None), 5_000);
        assert_eq!(sar_time(5, 7, 16 * 1024, 16 * 1024, Overlap::None), 12);
        assert_eq!(sar_time(u64::MAX, 1, 1, 1, Overlap::None), u64::MAX);
        assert_eq!(Overlap::of(true, || true), Overlap::None);
        assert_eq!(Overlap::of(true, || false), Overlap::Pipeline);
        assert_eq!(Overlap::of(false, || true), Overlap::Pipeline);
        let entry = crate::cmd::RespEntry::done_timed(7, crate::cmd::Status::Ok, 1, 123_456);
        assert_eq!(entry.time(), 123_456);
    }
}
