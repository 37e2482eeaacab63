//! An engine endpoint: one owned region plus the peers it talks to, and the progress engine.
//!
//! The provider (or a test) drives it: `send` starts a message, `progress` drains the command
//! and response rings, moves SAR segments, re-sends unanswered connection requests and checks
//! peer liveness, reporting through a `Handler`. Received messages are offered to the handler
//! first (`on_message`), which either gives a destination, asks the engine to hold the message
//! (unexpected), or discards it; held messages are delivered later with `deliver`.

mod acked;
mod answer;
mod backlog;
mod batch;
mod cold;
mod dead_receivers;
mod direct;
mod entry;
mod express;
pub mod lone;
pub mod measured;
mod ok_run;
mod parked;
mod peers;
mod read_way;
mod recv;
mod refill;
mod send;
mod spare;
mod split;
#[cfg(test)]
mod tests;
mod unmet;

use crate::clock::Instant;
use crate::cmd::{CmdEntry, Limits, MsgHeader, ANSWER_DATA_MAX, INLINE_MAX};
use crate::error::{Error, Result};
use crate::free_stack::StackCheck;
use crate::idmap::IdMap;
use crate::iov::{LentRange, LocalIov};
use crate::layout::{Counts, FLAG_CMA, INJECT_SIZE};
use crate::liveness::ProcessIdentity;
use crate::region::Region;
use crate::ring::{Consumer, Pop, StallWatch};
use peers::{OutPeer, SrcTable};
use recv::{Held, SarRx};
use send::PendingSend;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

pub use crate::cmd::MsgHeader as Header;
pub use answer::{AnswerBuf, ANSWER_BUFS_MAX};
pub use recv::outcome;

/// Handle of a peer we send to (index into our peer list).
pub type PeerId = u32;
/// Identity of a sender as this endpoint sees it: its index in our peer table.
pub type SrcId = u32;
/// Handle of a received message the engine holds.
pub type MsgKey = u64;

/// Tunables; the provider exposes them as FI_RSHM_* parameters.
#[derive(Debug, Clone)]
pub struct Params {
    pub counts: Counts,
    /// Allow CMA (it is still probed, and abandoned per peer when the kernel refuses it).
    pub cma: bool,
    /// Messages longer than `inject_max` but shorter than this go through SAR buffers even
    /// where CMA is allowed (0: CMA for every message above `inject_max`). Which of the two is
    /// faster depends on the host; the provider's default is measured (docs/perf/protocols.md).
    pub cma_min: usize,
    /// Choose between SAR and CMA by measurement (`measured.rs`) for messages above
    /// `measured::MEASURED_ABOVE` where CMA is allowed; below, `cma_min` decides.
    pub measure_protocol: bool,
    /// A CMA message of at least this many bytes, received into one buffer, is copied by both
    /// processes at once (`split`): the receiver reads the head, the sender writes the tail.
    /// From half of it where the receiver goes on with other work (`Endpoint::splits`).
    pub split_min: usize,
    /// SAR buffers of ours held back after we copy out of them, so that a sender writes into
    /// lines that have left our caches (`cold.rs`); at most seven eighths of the pool.
    pub sar_hold: usize,
    /// The same for our inject buffers: held back after we take a message or an answer out of
    /// them (`cold.rs`); at most seven eighths of the pool. Off by default: at 2-4 KiB it pays
    /// only where a line costs much to cross between the two CPUs (`cold.rs` has the figures).
    pub inject_hold: usize,
    /// Largest message carried inside the command entry.
    pub inline_max: usize,
    /// The same for a message sent alone (a ping-pong: its sender polled since its last send,
    /// and did not ask for more to follow): longer ones, up to `inline_max`, go through an inject
    /// buffer, which costs the receiver fewer waits for lines that cross between the CPUs
    /// (`send.rs`, `PINGPONG_INLINE_MAX`). Streams keep `inline_max`: there the inject buffers'
    /// turnover halved the rate.
    pub pingpong_inline_max: usize,
    /// Largest message carried through one inject buffer.
    pub inject_max: usize,
    /// Longest message, read or write (`MAX_MSG_SIZE`).
    pub max_msg_size: u64,
    /// A claimed but unpublished head slot is skipped after this long (its producer died).
    pub stall_timeout: Duration,
    /// How often peers with outstanding operations are checked for liveness.
    pub liveness_interval: Duration,
    /// An unacknowledged connection request is sent again after this long.
    pub connect_retry: Duration,
    /// How long sends to a name with no region keep answering "again" before failing.
    pub absent_peer_timeout: Duration,
    /// How long sends to a name whose region's owner is dead (and that we never reached) answer
    /// "again", waiting for a successor, before failing with `PeerDead`.
    pub dead_owner_timeout: Duration,
    /// How long the commands of a live sender whose region we cannot map for want of
    /// descriptors or memory wait for the shortage to pass before we give it up (`parked`).
    pub parked_timeout: Duration,
    /// For names that say which process owns them (the provider's generated names carry its
    /// pid): true when that process is known to be gone. A name with no region whose owner is
    /// gone is a dead peer's whose region was removed (`crate::reap`), not a peer still
    /// starting: sends to it fail after `dead_owner_timeout`, not `absent_peer_timeout`.
    pub name_owner_gone: Option<fn(&str) -> bool>,
}

/// The longest message, read or write, by default: no limit of ours (SIZE_MAX, as the C shm
/// says). No protocol has one (lengths and offsets are 64-bit; a SAR segment is named by its
/// sender's sequence number, not by its offset), and a message that arrives before its receive
/// is buffered only where the allocator has room for it (else refused).
pub const MAX_MSG_SIZE: u64 = u64::MAX;

impl Default for Params {
    fn default() -> Self {
        Params {
            counts: Counts {
                cmd_len: 1024,
                // Half the command ring: a response is one or two lines where a command slot is
                // seventeen, and a full response ring only holds answers back in their
                // responders' backlog until we poll. The 64 KiB this saves pays for the claim
                // records' lines in the peer table (`layout::PeerSlot`), keeping an endpoint
                // with every pool in use within issue 8's 4 MiB (`tests/perf/ep_memory.c`).
                resp_len: 512,
                inject_count: 128,
                // 2 MiB of bounce space in 32 KiB buffers rather than 64 KiB ones: enough for
                // 64 reads of up to 16 KiB in flight, each answered into a buffer of its own
                // (`reserve_answer_buf`), as fi_rma_bw and SOS's bandwidth tests keep them;
                // with 32 buffers half of such a window fell back to the slower CMA read
                // (docs/perf/protocols.md).
                sar_count: 64,
                sar_size: 32 * 1024,
                max_peers: 1024,
            },
            cma: true,
            cma_min: 0,
            measure_protocol: false,
            split_min: usize::MAX,
            sar_hold: usize::MAX,
            inject_hold: 0,
            inline_max: INLINE_MAX,
            pingpong_inline_max: send::PINGPONG_INLINE_MAX,
            inject_max: INJECT_SIZE as usize,
            max_msg_size: MAX_MSG_SIZE,
            stall_timeout: Duration::from_millis(500),
            liveness_interval: Duration::from_millis(100),
            connect_retry: Duration::from_millis(100),
            absent_peer_timeout: Duration::from_secs(30),
            dead_owner_timeout: Duration::from_millis(500),
            parked_timeout: Duration::from_secs(30),
            name_owner_gone: None,
        }
    }
}

/// A received message as the handler first sees it.
#[derive(Debug, Clone, Copy)]
pub struct Incoming {
    pub key: MsgKey,
    pub src: SrcId,
    /// Which sender holds `src` now (its region's random incarnation; 0 for one already gone):
    /// a handler that caches something per source id checks this number, not the name, to
    /// notice that the id went to another sender.
    pub src_gen: u64,
    /// The sender's id for this message; with `Disposition::Later`, `answer` takes it back.
    pub msg_id: u64,
    pub hdr: MsgHeader,
    /// The sender waits for this message's answer (it asked for one, or its protocol, CMA or
    /// SAR, always answers). False for an inline or inject message its sender completed when it
    /// queued it: a `Refuse` then reaches no one, and the handler should say why itself.
    pub acked: bool,
}

impl Incoming {
    /// Where its answer goes, for a message taken with `Disposition::Later`.
    pub fn answer_to(&self) -> AnswerTo {
        AnswerTo { src: self.src, src_gen: self.src_gen, msg_id: self.msg_id }
    }
}

/// The sender of a message as it was when the message arrived, and the sender's id for it:
/// where `answer`, `answer_with` and `answer_into` send. The entry of our peer table that names
/// the sender (`src`) may pass to another sender before the answer goes (the first died or
/// closed); the answer then reaches nobody, rather than the successor, whose message ids are
/// its own (an answer could complete one of its sends).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AnswerTo {
    pub src: SrcId,
    pub src_gen: u64,
    pub msg_id: u64,
}

/// What to do with an arriving message.
pub enum Disposition {
    /// Copy it into `dest`; `on_recv_done(ctx, ..)` follows.
    Deliver { dest: LocalIov, ctx: u64 },
    /// Keep it; the handler will `deliver` or `discard` it by key later.
    Hold,
    /// Drop it (the sender still completes normally).
    Discard,
    /// Refuse it: the sender's operation fails with `Error::Refused(errno)` (if it asked for an
    /// acknowledgement, which senders of refusable messages do).
    Refuse(u32),
    /// Deliver it like `Deliver`, but leave the sender waiting: the handler answers later with
    /// `Endpoint::answer(src, msg_id, ..)`, e.g. once a reply it sends back has arrived or once
    /// it has checked and placed SAR-delivered data. A message read with CMA is still answered
    /// when delivered (the answer also releases the sender's memory).
    Later { dest: LocalIov, ctx: u64 },
    /// From `on_payload` only: the handler took the payload it was given. The sender completes
    /// normally, or, with `answer_later`, when the handler answers (`answer`, `answer_with`).
    Taken { answer_later: bool },
    /// From `on_payload` only: the handler took the payload, and answers at once with `data`,
    /// which the engine copies now into the answer buffer `buf` that the request named
    /// (`Endpoint::answer_into`: the name is checked; a bad one refuses the request). Returned
    /// for any other message it refuses it (`EINVAL`).
    AnswerInto { buf: AnswerBuf, data: LocalIov },
    /// From `on_payload` only: the handler took the payload and answers at once with these few
    /// bytes (`Endpoint::answer_with`, in this same step: no answer queued for later). Returned
    /// for any other message it refuses it (`EINVAL`).
    AnswerWith(AnswerData),
}

/// The bytes an answer carries in its response entry (at most `ANSWER_DATA_MAX`).
#[derive(Debug, Clone, Copy)]
pub struct AnswerData {
    len: u8,
    bytes: [u8; ANSWER_DATA_MAX],
}

impl AnswerData {
    /// `len` bytes, filled by `fill`, if `len` fits in an answer.
    pub fn new(len: usize, fill: impl FnOnce(&mut [u8])) -> Option<AnswerData> {
        let mut a = AnswerData { len: u8::try_from(len).ok()?, bytes: [0; ANSWER_DATA_MAX] };
        fill(a.bytes.get_mut(..len)?);
        Some(a)
    }

    pub fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }
}

/// Callbacks from `progress`.
pub trait Handler {
    /// A message arrived from the sender named `src_name` (its address): deliver it, hold
    /// it, or drop it.
    fn on_message(&mut self, msg: &Incoming, src_name: &str) -> Disposition;
    /// As `on_message`, for a message whose payload is here in full (inline in the command or
    /// in an inject buffer, up to the inject size): the handler may take the bytes at once
    /// (`Disposition::Taken`) instead of lending a destination. They are a peer's bytes: as
    /// untrusted as any payload.
    fn on_payload(&mut self, msg: &Incoming, src_name: &str, _payload: &[u8]) -> Disposition {
        self.on_message(msg, src_name)
    }
    /// The express path of the most common arrival: a message from a connected sender whose
    /// payload is here in full (inline in the command, or in one of our inject buffers),
    /// offered with it as by `on_payload`, but before the general path's decoding into a
    /// `Command` and without the sender's name. A handler that can finish it at once
    /// says how (a `Disposition`, as from `on_payload`: the engine answers the sender as it
    /// would there); None sends the command the general way, as if this had not been called,
    /// so the handler must change nothing then. The bytes are a peer's: as untrusted as any.
    fn on_inline(&mut self, _msg: &Incoming, _payload: &[u8]) -> Option<Disposition> {
        None
    }
    /// The express path of a message the engine can place in one step into one buffer: a CMA
    /// message of one range (read with `process_vm_readv`), or a SAR message whose first
    /// segment holds all of it (copied out of our SAR buffer). Offered before the general path,
    /// as `on_inline` is: a handler with a receive at hand for it, of one buffer, lends that
    /// buffer to `fill`, which places the message there and returns the bytes placed, and
    /// completes the receive with them. `fill` answers None when it failed (a CMA read the
    /// kernel refused, a sender gone); then, and whenever it is not called, the handler
    /// changes nothing and returns false, and the message goes the general way (`on_message`).
    fn on_fill_express(&mut self, _msg: &Incoming, _fill: impl FnOnce(LentRange) -> Option<usize>) -> bool {
        false
    }
    /// A delivery finished: bytes delivered, or why not. `dest` is handed back.
    fn on_recv_done(&mut self, ctx: u64, result: Result<usize>, dest: LocalIov);
    /// A send that returned `SendStatus::Pending` finished.
    fn on_send_done(&mut self, cookie: u64, result: Result<()>);
    /// The receiver answered that send with data (`Endpoint::answer_with`, or placed in the
    /// send's answer buffers: `Endpoint::answer_into`), in parts to be read in order (one but
    /// for an answer spanning buffers); `on_send_done` follows at once. The bytes are a peer's:
    /// as untrusted as a message's payload.
    fn on_send_answer(&mut self, _cookie: u64, _parts: &[&[u8]]) {}
    /// The first bytes of that answer are in already (`parts`, in order, as `on_send_answer`
    /// would hand them: always from the answer's start), and more follow: a handler may copy
    /// out what it has not yet. `on_send_answer` still hands over the whole answer. As
    /// untrusted as it: a later call may name fewer bytes, or more than the answer holds.
    fn on_send_answer_part(&mut self, _cookie: u64, _parts: &[&[u8]]) {}
}

/// How to send.
#[derive(Debug, Clone, Copy, Default)]
pub struct SendOpts {
    pub cookie: u64,
    /// Complete only once the receiver has taken the data (always so for CMA and SAR).
    pub delivery_complete: bool,
    /// More sends follow at once (libfabric's FI_MORE): a small message waits in the peer's
    /// batch, which goes out with one ring claim and one wake-up on the next send without
    /// `more` or the next `progress`. It completes (`on_send_done`) once out.
    pub more: bool,
    /// Above the first SAR segment (16 KiB), let the receiver pull the whole message with CMA
    /// where both sides allow it, whatever `Params::cma_min` says. For one-sided operations:
    /// their target may progress rarely (a PE computing, a polling loop that looks at memory),
    /// and through SAR it would have to take part in every segment (a write) or push every one
    /// (a read's reply), while a CMA pull needs one step of its progress, or none. A message of
    /// one segment needs one step either way and goes by SAR, without the system call.
    pub pull: bool,
    /// Sent by CMA, let the receiver copy it in halves with us from half of `split_min`
    /// (`cmd::FLAG_SPLIT_EARLY`): a read's reply the receiver asked us to push.
    pub split_early: bool,
}

/// What `send` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendStatus {
    /// Done: the buffer may be reused, no callback follows.
    Done,
    /// `on_send_done(cookie, ..)` follows; the buffer must stay valid until then.
    Pending,
}

/// What `deliver` did.
#[derive(Debug)]
pub enum Delivered {
    /// Finished now: result and the destination back.
    Now(Result<usize>, LocalIov),
    /// The message is still arriving; `on_recv_done` follows.
    Later,
}

/// Counters for tests, logs and benchmarks.
#[derive(Debug, Default, Clone)]
pub struct Stats {
    pub corrupt_commands: u64,
    /// Answers read after their sends failed because the receiver died (`dead_receivers.rs`).
    pub late_answers: u64,
    pub skipped_slots: u64,
    /// Shared control words (ring claim counters, free-stack heads and links) that a peer
    /// scribbled over and the owner put back (`check_stalls`).
    pub repaired_words: u64,
    /// Entries of our table of published registrations put back after a peer scribbled over
    /// them (`published::Publisher::repair`).
    pub repaired_registrations: u64,
    /// Entries of our peer table found held by senders that died before we met them (`unmet`).
    pub unmet_dead_senders: u64,
    pub cma_fallbacks: u64,
    /// Split copies (`split`): tails offered by us as a receiver, written by our senders
    /// (as receiver: `splits_taken`), and written (or failed to write) by us as a sender.
    pub splits_offered: u64,
    pub splits_taken: u64,
    pub splits_written: u64,
    pub split_writes_failed: u64,
    /// System calls that read the heads of several split copies at once, and calls that wrote
    /// the tails of several whole (`split::together`).
    pub split_heads_together: u64,
    pub split_tails_together: u64,
    /// Messages copied out of their sender with CMA (tests check that CMA really carried data).
    pub cma_reads: u64,
    /// Answers copied into their requesters' memory with CMA (`cma_write`).
    pub cma_writes: u64,
    /// Reads of a peer's published registrations, made without the peer (`read_published`).
    pub published_reads: u64,
    /// Writes into a peer's published registrations, made without the peer (`write_published`).
    pub published_writes: u64,
    /// Messages sent by each protocol (SAR: messages that started as SAR, not segments).
    pub sent_inline: u64,
    pub sent_inject: u64,
    pub sent_cma: u64,
    pub sent_sar: u64,
    /// FI_MORE batches pushed (each with one ring claim and one wake-up).
    pub batches: u64,
    /// Answers this endpoint placed in their senders' answer buffers (`answer_into`).
    pub answers_placed: u64,
    /// Responses that each finished several acknowledged messages (`ok_run.rs`).
    pub ok_runs: u64,
}

pub struct Endpoint {
    region: Arc<Region>,
    params: Params,
    limits: Limits,
    me: ProcessIdentity,
    cma_ok: bool,
    cmd_rx: Consumer,
    /// Where commands are popped to (`Consumer::pop_into`): a command slot is over a kilobyte,
    /// and a small message uses its first line.
    cmd_entry: Option<Box<CmdEntry>>,
    resp_rx: Consumer,
    cmd_stall: StallWatch,
    resp_stall: StallWatch,
    /// What the liveness tick's checks of our two free stacks remember.
    stack_checks: [StackCheck; 2],
    out: Vec<OutPeer>,
    out_by_name: HashMap<String, PeerId>,
    inp: SrcTable,
    /// Senders we dropped (dead or disconnected): commands they queued before they went still
    /// arrive, hold our buffers, and (inline and inject ones) still carry data.
    forgotten: HashMap<SrcId, peers::Forgotten>,
    /// Senders whose regions we could not map for a shortage of ours, their commands set aside
    /// (`parked`).
    parked: Vec<parked::Parked>,
    pending: IdMap<u64, PendingSend>,
    /// Acknowledged small sends, all in the ring already: only whom they went to and whom to
    /// tell (`send::AckedSend`), kept apart from `pending`, whose records carry a buffer and SAR
    /// state (about 140 bytes moved in and out of the map on every acknowledged write, read and
    /// atomic), in a table by id (`acked.rs`).
    acked: acked::AckedSends,
    sar_tx: VecDeque<u64>,
    /// Our SAR buffers we are done with, on their way back to the pool (`cold.rs`).
    sar_cold: cold::ColdReuse,
    /// Our inject buffers we are done with, on their way back to the pool (`cold.rs`).
    inject_cold: cold::ColdReuse,
    /// SAR messages arriving, by sender and the sender's message id (a peer's choice).
    sar_rx: crate::idmap::PeerIdMap<(SrcId, u64), SarRx>,
    held: IdMap<MsgKey, Held>,
    /// Responses waiting for room in their senders' rings (`peers::QueuedResp`).
    resp_backlog: backlog::RespBacklog,
    /// Ok answers of this pass not pushed yet (`ok_run.rs`).
    ok_run: ok_run::OkRun,
    /// Our inject buffers of the messages taken in the last pass, given back at the next
    /// (`spare`).
    taken_injects: Vec<u32>,
    /// Per entry of our peer table, per pool (`spare::Pool`): the highest id of the inject
    /// messages, and the highest sequence number of the SAR segments, handled from it (0: none); and the
    /// forgotten senders whose held buffers are still to be decided about (`spare`).
    handled: Vec<[u64; 2]>,
    decisions: Vec<spare::Decision>,
    /// Where the next look for entries of dead senders we never met starts (`unmet`).
    unmet_cursor: usize,
    /// Receivers that died with sends waiting, and sends failed whose answers may still come.
    dead_receivers: dead_receivers::DeadReceivers,
    /// Messages sent with `SendOpts::more`, not yet in their peers' rings (`batch.rs`).
    staged: batch::Staged,
    /// Batched sends that went out (or failed) and still have to be reported to the handler.
    staged_done: Vec<(u64, Result<()>)>,
    next_msg_id: u64,
    /// The sequence number of the next SAR segment we push (`cmd::SarSeg::seq`).
    next_sar_seq: u64,
    next_key: MsgKey,
    last_liveness: Instant,
    polls: u32,
    /// Small messages pushed since the last poll (`has_work`): more than one means a stream.
    sent_since_poll: u32,
    /// `has_work` found the liveness tick due: the next `progress` runs it.
    tick_due: bool,
    /// Which entries of our region's MR table we filled (`direct.rs`).
    publisher: crate::published::Publisher,
    /// Our counts of progress calls and of free ones among them (`note_poll`), mirrored into
    /// the region.
    polls_made: u64,
    free_polls: u64,
    /// What the receivers' answers taught about SAR against CMA (`Params::measure_protocol`).
    chooser: measured::Chooser,
    /// What timed reads taught about answered reads against our CMA reads (`read_way.rs`).
    read_chooser: measured::Chooser,
    /// Reads and writes sent alone: ours by CMA or the ordinary way (`lone.rs`), by `Lone` and,
    /// size (`lone::chooser_of`). Made at the first such operation: a few KiB that an
    /// endpoint without one-sided traffic does not carry (its private memory counts against the
    /// 4 MiB per endpoint, `ep_memory`).
    lone_choosers: Option<Box<[measured::Chooser; lone::CHOOSERS]>>,
    /// Answered reads being timed, by message id: how they were chosen, and their length.
    timed_reads: crate::idmap::IdMap<u64, (measured::Choice, u64)>,
    /// What reads from targets busy with operations of their own taught about their replies
    /// pushed (split copies) against our CMA reads (`read_way.rs`, `choose_busy_read`).
    busy_read_chooser: measured::Chooser,
    /// Pushed reads being timed, oldest first: how they were chosen, and their length
    /// (`expect_pushed_read`), up to `read_way::PUSHED_TIMED_MAX`.
    pushed_timed: std::collections::VecDeque<(measured::Choice, u64)>,
    /// Received messages whose tails their senders are writing (`split`).
    splits: Vec<split::SplitRx>,
    /// Received messages whose tails are offered and whose heads wait to be read together with
    /// the next ones' (`split::together`): empty but between a command that left its head and
    /// the next.
    heads: Vec<split::SplitRx>,
    /// Tails of our messages taken in this drain of our responses, written together at its end
    /// (`split::together`).
    tails: Vec<split::TailTaken>,
    /// Tests: this sender's split writes fail (as if the kernel refused them).
    #[cfg(test)]
    fail_split_writes: bool,
    /// Tests: how long this sender stops between taking a split's tail and writing it (as a
    /// SIGSTOP, a debugger or a host that does not run it would stop it).
    #[cfg(test)]
    split_pause_after_take: Duration,
    /// Tests: the most heads this receiver reads in one call (`split::together`; 1: each alone).
    #[cfg(test)]
    split_heads_max: Option<usize>,
    /// Tests: how long this peer stops between being counted as a writer of a published
    /// registration and its copy (`direct::write_published`).
    #[cfg(test)]
    published_pause_after_count: Duration,
    /// Tests: every open of a sender's region fails for want of descriptors (EMFILE), as in a
    /// process that ran out of them (`parked`).
    #[cfg(test)]
    opens_short: bool,
    /// Tests: how long this receiver leaves a split offer open for its sender before it looks,
    /// and before it takes back one left open while the sender wrote an earlier tail (so that a
    /// test's sender, however it is scheduled, takes it).
    #[cfg(any(test, feature = "test-hooks"))]
    split_offer_wait: Duration,
    stats: Stats,
}

/// Commands handled per `progress` call, so one busy sender cannot starve the caller.
const PROGRESS_BUDGET: usize = 256;

impl Endpoint {
    pub fn create(name: &str, params: Params) -> Result<Endpoint> {
        if params.inline_max > INLINE_MAX || params.inject_max > INJECT_SIZE as usize {
            return Err(Error::Invalid("inline_max or inject_max above the layout's capacity"));
        }
        let cma_ok = params.cma && crate::cma::probe();
        let region = Region::create(name, params.counts, if cma_ok { FLAG_CMA } else { 0 })?;
        // The region was created as this process: its owner is our identity.
        let me = region.owner();
        let c = params.counts;
        let limits = Limits {
            max_peers: c.max_peers,
            inject_count: c.inject_count,
            sar_count: c.sar_count,
            sar_size: c.sar_size,
            max_msg_size: params.max_msg_size,
        };
        let sar_cold = cold::ColdReuse::new(params.sar_hold, c.sar_count);
        let inject_cold = cold::ColdReuse::new(params.inject_hold, c.inject_count);
        Ok(Endpoint {
            region: Arc::new(region),
            limits,
            me,
            cma_ok,
            params,
            cmd_rx: Consumer::new(),
            cmd_entry: None,
            resp_rx: Consumer::new(),
            cmd_stall: StallWatch::default(),
            resp_stall: StallWatch::default(),
            stack_checks: Default::default(),
            out: Vec::new(),
            out_by_name: HashMap::new(),
            inp: SrcTable::default(),
            forgotten: HashMap::new(),
            parked: Vec::new(),
            pending: IdMap::default(),
            acked: acked::AckedSends::default(),
            sar_tx: VecDeque::new(),
            sar_cold,
            inject_cold,
            sar_rx: Default::default(),
            held: IdMap::default(),
            resp_backlog: backlog::RespBacklog::default(),
            ok_run: ok_run::OkRun::default(),
            taken_injects: Vec::new(),
            handled: vec![[0; 2]; c.max_peers as usize],
            decisions: Vec::new(),
            unmet_cursor: 0,
            dead_receivers: dead_receivers::DeadReceivers::default(),
            staged: batch::Staged::default(),
            staged_done: Vec::new(),
            next_msg_id: 1,
            next_sar_seq: 1,
            next_key: 1,
            last_liveness: Instant::now(),
            polls: 0,
            sent_since_poll: 0,
            tick_due: false,
            publisher: Default::default(),
            polls_made: 0,
            free_polls: 0,
            chooser: measured::Chooser::sampling(measured::TIMED_ONE_IN),
            read_chooser: measured::Chooser::sampling(measured::TIMED_ONE_IN),
            lone_choosers: Default::default(),
            timed_reads: Default::default(),
            busy_read_chooser: measured::Chooser::sampling(measured::TIMED_ONE_IN),
            pushed_timed: Default::default(),
            splits: Vec::new(),
            heads: Vec::new(),
            tails: Vec::new(),
            #[cfg(test)]
            fail_split_writes: false,
            #[cfg(test)]
            split_pause_after_take: Duration::ZERO,
            #[cfg(test)]
            split_heads_max: None,
            #[cfg(test)]
            published_pause_after_count: Duration::ZERO,
            #[cfg(test)]
            opens_short: false,
            #[cfg(any(test, feature = "test-hooks"))]
            split_offer_wait: Duration::ZERO,
            stats: Stats::default(),
        })
    }

    pub fn name(&self) -> &str {
        self.region.name()
    }

    pub fn params(&self) -> &Params {
        &self.params
    }

    /// Whether CMA is on for this endpoint (parameter and run-time probe).
    pub fn cma_enabled(&self) -> bool {
        self.cma_ok
    }

    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Operations still waiting for a peer (sends not yet completed, partial receives).
    pub fn outstanding(&self) -> usize {
        self.pending.len() + self.acked.len() + self.sar_rx.len() + self.splits.len() + self.heads.len()
    }

    /// Run the engine once. Returns how many events it handled.
    pub fn progress(&mut self, h: &mut impl Handler) -> usize {
        // A poll, as `has_work` counts one (callers that progress without asking first).
        self.sent_since_poll = 0;
        self.give_back_taken();
        if !self.staged.is_empty() {
            self.flush_staged();
        }
        let mut events = self.staged_done.len();
        if events > 0 {
            for (cookie, result) in self.staged_done.drain(..) {
                h.on_send_done(cookie, result);
            }
        }
        events += self.drain_commands(h);
        self.flush_ok_run();
        events += self.drain_responses(h);
        if !self.splits.is_empty() {
            events += self.check_splits(h);
        }
        if !self.resp_backlog.is_empty() {
            self.flush_resp_backlog();
        }
        if !self.sar_tx.is_empty() {
            self.push_sar_segments();
        }
        // After both rings were drained: a peer that found one full may push again.
        let wanted = crate::wake::take_room_wanted(self.region.wake_word());
        if wanted != 0 {
            self.wake_for_room(wanted);
        }
        if std::mem::take(&mut self.tick_due) || self.liveness_due() {
            self.last_liveness = Instant::now();
            self.check_stalls();
            if !self.parked.is_empty() {
                events += self.replay_parked(h);
            }
            events += self.check_peers(h);
            self.stats.unmet_dead_senders += self.find_unmet_dead() as u64;
            self.decide_due();
        }
        events
    }

    /// Whether a message went out since the last `has_work` (which starts the count again).
    #[inline]
    pub fn sent_since_poll(&self) -> bool {
        self.sent_since_poll > 0
    }

    /// Whether `progress` has anything to do: a command or a response published at a ring's
    /// head, a peer waiting for room in one (`wake::want_room`), responses or SAR segments of
    /// ours still to push, or a liveness tick due. On the idle path that is two loads of ring
    /// stamps and one of our wake word's line (shared, written only when a ring is full), so a
    /// caller polling in a tight loop can skip the rest of its progress pass (and the polling
    /// thread notices an arrival sooner). The inject buffers of the messages the last pass took
    /// go back here too (`spare`), without a pass of their own.
    #[inline]
    pub fn has_work(&mut self) -> bool {
        self.sent_since_poll = 0;
        self.give_back_taken();
        if self.cmd_rx.ready(&self.region.cmd_ring())
            || self.resp_rx.ready(&self.region.resp_ring())
            || crate::wake::room_wanted(self.region.wake_word())
            || !self.resp_backlog.is_empty()
            || !self.sar_tx.is_empty()
            || !self.staged.is_empty()
            || !self.staged_done.is_empty()
            || !self.splits.is_empty()
        {
            return true;
        }
        self.tick_due = self.liveness_due();
        self.tick_due
    }

    /// Time for the liveness checks? The clock is read on every 8th call only: callers poll in
    /// tight loops, and even one call per 100 ms sleep slice keeps the checks inside their bound.
    #[inline]
    fn liveness_due(&mut self) -> bool {
        self.polls = self.polls.wrapping_add(1);
        self.polls % 8 == 0 && self.last_liveness.elapsed() >= self.params.liveness_interval
    }

    fn drain_commands(&mut self, h: &mut impl Handler) -> usize {
        let mut handled = 0;
        // Out of `self` while commands are handled, which borrows `self` mutably.
        let mut entry = self.cmd_entry.take().unwrap_or_default();
        while handled < PROGRESS_BUDGET {
            // The ring view is three loads: building it per pop lets `handle_command` borrow
            // `self` mutably, with no reference count to bump on the data path.
            match self.cmd_rx.peek_into(&self.region.cmd_ring(), &mut entry) {
                Pop::Item(in_slot) => {
                    self.ok_run.in_slot = true;
                    // SAFETY: the entry `peek_into` found stays in its slot of our own region,
                    // mapped as long as `self`, until the release below.
                    if unsafe { self.express(&entry, in_slot, h) } {
                        self.cmd_rx.release(&self.region.cmd_ring());
                    } else {
                        // The general path works on a copy of the whole entry: the slot goes
                        // back before it runs (a SAR segment's copy or a CMA read can be long).
                        self.cmd_rx.take_rest(&self.region.cmd_ring(), &mut entry);
                        self.ok_run.in_slot = false;
                        let waiting = self.heads.len();
                        self.handle_command(&entry, h);
                        // Heads left for this command, a large CMA message from their sender
                        // (`split::together`: never one the express path takes), which it
                        // neither added to nor read with its own.
                        if waiting > 0 && self.heads.len() == waiting {
                            self.read_heads_left();
                        }
                    }
                    handled += 1;
                }
                Pop::Empty => break,
                Pop::Pending => {
                    self.cmd_stall.note(&self.cmd_rx);
                    break;
                }
            }
        }
        // Heads left for a command the budget did not reach: a head is left only for a command
        // already published behind it.
        debug_assert!(handled == PROGRESS_BUDGET || self.heads.is_empty());
        if handled == PROGRESS_BUDGET && !self.heads.is_empty() {
            self.read_heads_left();
        }
        self.cmd_entry = Some(entry);
        handled
    }

    /// On the liveness tick: skip a head slot of either ring that stayed claimed and unpublished
    /// for `stall_timeout` once no live producer's claim record names it (its producer died
    /// between its claim and its publish).
    fn check_stalls(&mut self) {
        let timeout = self.params.stall_timeout;
        let peers = peers::Known { inp: &self.inp, out: &self.out, table: self.region.peer_slots() };
        let skipped =
            u64::from(
                self.cmd_stall.check(&mut self.cmd_rx, &self.region.cmd_ring(), timeout, |head| {
                    peers.command_claimant_lives(head)
                }),
            ) + u64::from(self.resp_stall.check(&mut self.resp_rx, &self.region.resp_ring(), timeout, |head| {
                peers.response_claimant_lives(head)
            }));
        self.stats.skipped_slots += skipped;
        // Words a hostile peer may have scribbled over, put back from what only we know (our
        // heads, the slot stamps, the buffers' in-use marks, our header): a few loads per ring,
        // one walk of each free list, one compare of the header.
        // A stack is rebuilt only once it looked broken in the same way for `stall_timeout`.
        let patience = (timeout.as_nanos() / self.params.liveness_interval.as_nanos().max(1)).max(2) as u32;
        let r = &self.region;
        let [inject, sar] = &mut self.stack_checks;
        let repaired = [
            self.cmd_rx.repair_tail(&r.cmd_ring()),
            self.resp_rx.repair_tail(&r.resp_ring()),
            r.inject_stack().repair(inject, patience, || spare::spoken_for(r, spare::Pool::Inject)),
            r.sar_stack().repair(sar, patience, || spare::spoken_for(r, spare::Pool::Sar)),
            r.repair_header(),
        ];
        self.stats.repaired_words += repaired.iter().filter(|&&b| b).count() as u64;
        self.stats.repaired_registrations += u64::from(self.publisher.repair(r.mr_slots()));
    }

    /// Sleep until a command or response arrives, or `timeout` passes.
    pub fn wait(&self, timeout: Option<Duration>) {
        let ready = || self.cmd_rx.ready(&self.region.cmd_ring()) || self.resp_rx.ready(&self.region.resp_ring());
        crate::wake::wait(self.region.wake_word(), timeout, ready);
    }

    /// A handle to sleep on this endpoint's wake word without holding the endpoint.
    pub fn wait_handle(&self) -> WaitHandle {
        WaitHandle { region: Arc::clone(&self.region) }
    }

    fn new_msg_id(&mut self) -> u64 {
        let id = self.next_msg_id;
        self.next_msg_id += 1;
        id
    }

    fn new_key(&mut self) -> MsgKey {
        let k = self.next_key;
        self.next_key += 1;
        k
    }
}

/// Sleeping on an endpoint from outside its lock. The protocol that loses no wake-up:
/// `let seq = h.arm();` then drain the endpoint (`progress`) and, only if that found nothing,
/// `h.sleep(seq, timeout)`; in every case `h.disarm()` afterwards. A sender that publishes after
/// `arm` bumps the sequence, so `sleep` returns at once; one that published before is seen by
/// the drain.
#[derive(Clone)]
pub struct WaitHandle {
    region: Arc<Region>,
}

impl WaitHandle {
    pub fn arm(&self) -> u32 {
        crate::wake::arm(self.region.wake_word())
    }

    pub fn sleep(&self, seq: u32, timeout: Option<Duration>) {
        crate::wake::sleep(self.region.wake_word(), seq, timeout)
    }

    pub fn disarm(&self) {
        crate::wake::disarm(self.region.wake_word())
    }

    /// The word `arm` returned a sequence of, for `crate::wake::sleep_any`.
    pub fn wait_on(&self, seq: u32) -> crate::wake::WaitOn<'_> {
        crate::wake::WaitOn { word: &self.region.wake_word().seq, expected: seq, private: false }
    }

    /// Whether a sender woke the word since `arm` returned `seq`.
    pub fn woken_since(&self, seq: u32) -> bool {
        self.region.wake_word().seq.load(crate::sync::Ordering::SeqCst) != seq
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        // Senders still writing into receives' buffers: the owner may free those once we are
        // gone, so let them finish first (or die).
        self.wait_for_split_writers();
        self.disconnect_all();
    }
}
