//! The entries that travel through the rings, and their decoding.
//!
//! Entries are written by peers, so decoding is a pure function that checks every field against
//! the receiver's own limits before anything acts on it (and a fuzzer can drive it).

use crate::error::{Error, Result};
use crate::pod::Pod;

/// Size of one inject buffer: the longest message an inject command carries.
pub const INJECT_SIZE: u64 = 4096;

/// Inline payload capacity of a command entry: the whole tail of the 1,088-byte slot (17 cache
/// lines), so that messages up to 1 KiB travel in the ring itself. From 201 B to 1 KiB that
/// saves an inject buffer's round trip through the free stack (a contended line each way) and
/// its own lines: 256 B one-way 0.47 -> 0.41 us, stream +22% (docs/perf/protocols.md). A small
/// entry still costs one line: the ring copies only what is in use (`Pod::wire_len`).
pub const INLINE_MAX: usize = 1024 + 8;
/// At most this many remote iovecs ride in one command.
pub const IOV_MAX: usize = (INLINE_MAX - 8) / 16;
/// Bytes of a command entry before its payload.
pub const HEADER_BYTES: usize = std::mem::offset_of!(CmdEntry, payload);
/// Payload bytes that share the slot's first cache line with its stamp and the header: a command
/// whose payload fits is one line for the receiver to fetch, where a longer one is two, the
/// second asked for only once the first has been seen (docs/perf/where-the-time-goes.md).
pub const FIRST_LINE_PAYLOAD: usize = crate::ring::FIRST_LINE_BYTES - HEADER_BYTES;
/// Where a `proto::COMPACT` command's payload starts: at `data`, the first header field such a
/// message leaves out (it has no CQ data, no `aux`, and wants no answer, so no `msg_id`).
pub const COMPACT_AT: usize = std::mem::offset_of!(CmdEntry, data);
/// The longest payload a `proto::COMPACT` command carries: what its first line holds.
pub const COMPACT_MAX: usize = compact_max(COMPACT_AT);
/// Where a `proto::COMPACT_DATA` command's payload starts: at `aux`, after its CQ data.
pub const COMPACT_DATA_AT: usize = std::mem::offset_of!(CmdEntry, aux);
/// The longest payload a `proto::COMPACT_DATA` command carries.
pub const COMPACT_DATA_MAX: usize = compact_max(COMPACT_DATA_AT);
/// Where a `proto::COMPACT_AUX` command's payload starts: at `msg_id`, which it carries in `data`.
pub const COMPACT_AUX_AT: usize = std::mem::offset_of!(CmdEntry, msg_id);
/// The longest payload a `proto::COMPACT_AUX` command carries.
pub const COMPACT_AUX_MAX: usize = compact_max(COMPACT_AUX_AT);

/// Where a compact command of protocol `proto` starts its payload; None for the others.
#[inline(always)]
pub fn compact_at(proto: u8) -> Option<usize> {
    match proto {
        proto::COMPACT => Some(COMPACT_AT),
        proto::COMPACT_DATA => Some(COMPACT_DATA_AT),
        proto::COMPACT_AUX => Some(COMPACT_AUX_AT),
        _ => None,
    }
}

/// The longest payload a compact command whose payload starts at `at` carries: what the slot's
/// first line holds from there.
#[inline(always)]
const fn compact_max(at: usize) -> usize {
    crate::ring::FIRST_LINE_BYTES - at
}

/// The compact protocol a message with header `hdr` may travel by, if any: with no `aux` and no
/// answer wanted (`ack`), short enough for the first line with its CQ data, if it carries any;
/// otherwise, with no CQ data, `proto::COMPACT_AUX` if that puts it in one line where the usual
/// header would take two (9 to 16 bytes). Up to 8 bytes the usual header's line holds the
/// payload, and keeping that command measured faster in a stream of 8-byte writes
/// (`rshm-fi-bench --tests write_bw`, profile-guided builds alternated: a median of 0.137 us a
/// write against 0.165 with `COMPACT_AUX`; docs/perf/protocols.md, top).
#[inline(always)]
pub fn compact_proto(hdr: &MsgHeader, ack: bool) -> Option<u8> {
    if !ack && hdr.aux == 0 {
        let (proto, max) =
            if hdr.data == 0 { (proto::COMPACT, COMPACT_MAX) } else { (proto::COMPACT_DATA, COMPACT_DATA_MAX) };
        return (hdr.len <= max as u64).then_some(proto);
    }
    let saves_a_line = hdr.len > FIRST_LINE_PAYLOAD as u64 && hdr.len <= COMPACT_AUX_MAX as u64;
    (hdr.data == 0 && saves_a_line).then_some(proto::COMPACT_AUX)
}

/// One command slot's contents (the ring's stamp precedes it, making the slot 1,088 bytes). The
/// fields a small message needs, plus its first 8 payload bytes, share the slot's first line.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CmdEntry {
    pub op: u8,
    pub proto: u8,
    pub flags: u8,
    /// Opaque to the engine: the provider's operation kind.
    pub app: u8,
    /// The sender's index in the receiver's peer table.
    pub src: u32,
    pub len: u64,
    pub tag: u64,
    pub data: u64,
    /// Opaque to the engine: a second word of the provider's (the remote address of RMA).
    pub aux: u64,
    /// The sender's cookie, echoed in responses.
    pub msg_id: u64,
    pub payload: [u8; INLINE_MAX],
}

impl Default for CmdEntry {
    fn default() -> Self {
        CmdEntry {
            op: 0,
            proto: 0,
            flags: 0,
            app: 0,
            src: 0,
            len: 0,
            tag: 0,
            data: 0,
            aux: 0,
            msg_id: 0,
            payload: [0; INLINE_MAX],
        }
    }
}

impl std::fmt::Debug for CmdEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CmdEntry")
            .field("op", &self.op)
            .field("proto", &self.proto)
            .field("src", &self.src)
            .field("len", &self.len)
            .field("msg_id", &self.msg_id)
            .finish_non_exhaustive()
    }
}

// SAFETY: integers and a byte array, no padding (checked below).
unsafe impl Pod for CmdEntry {
    /// The header plus the part of the payload the protocol uses. Computed from fields in the
    /// first 56 bytes (header and the first 8 payload bytes), which the ring copies first.
    #[inline]
    fn wire_len(&self) -> usize {
        if let Some(at) = compact_at(self.proto) {
            return at + (self.len as usize).min(compact_max(at));
        }
        let used = match (self.op, self.proto) {
            (op::CONNECT | op::DISCONNECT, _) => 0,
            (_, proto::INLINE) => (self.len as usize).min(INLINE_MAX),
            (_, proto::INJECT) => 4,
            (_, proto::IOV) => {
                let count = u32::from_le_bytes(self.payload[0..4].try_into().expect("4 bytes")) as usize;
                8 + count.min(IOV_MAX) * 16
            }
            (_, proto::SAR) => SAR_SEG_BYTES,
            _ => INLINE_MAX,
        };
        HEADER_BYTES + used
    }
}

/// A response from a receiver back to a sender, through the sender's response ring. Its slot is
/// two cache lines; all but an answer of more than `FIRST_LINE_DATA` bytes use only the first
/// (`Pod::wire_len`), so that the second crosses between the processes only with such an answer.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RespEntry {
    pub kind: u32,
    pub status: u32,
    pub msg_id: u64,
    pub value: u64,
    /// With `Status::Answered`: the answer's bytes (`value` of them). A small reply (a read of a
    /// few bytes, an atomic's old value) rides here instead of in a message of its own.
    pub data: [u8; ANSWER_DATA_MAX],
}

impl Default for RespEntry {
    fn default() -> Self {
        RespEntry { kind: 0, status: 0, msg_id: 0, value: 0, data: [0; ANSWER_DATA_MAX] }
    }
}

impl RespEntry {
    /// The answer that message `msg_id` is finished, with `status` and its `value`.
    pub fn done(msg_id: u64, status: Status, value: u64) -> RespEntry {
        let mut entry = RespEntry::default();
        entry.set_done(msg_id, status, value);
        entry
    }

    /// Make this entry (a ring slot, written in place) `done`'s header; its data stays as it is.
    #[inline]
    pub fn set_done(&mut self, msg_id: u64, status: Status, value: u64) {
        (self.kind, self.status, self.msg_id, self.value) = (resp::DONE, status as u32, msg_id, value);
    }

    /// The first `placed` bytes of the answer to message `msg_id` are in its buffers
    /// (`resp::PART`).
    pub fn part(msg_id: u64, placed: u64) -> RespEntry {
        RespEntry { kind: resp::PART, status: Status::Ok as u32, msg_id, value: placed, ..Default::default() }
    }

    /// `done` with the receiver's time in the data (0: none): for a large message, its transfer
    /// (`endpoint::measured`); for an answer placed in a buffer named timed, its copy
    /// (`endpoint::read_way`).
    pub fn done_timed(msg_id: u64, status: Status, value: u64, ns: u64) -> RespEntry {
        let mut entry = RespEntry::done(msg_id, status, value);
        entry.set_time(ns);
        entry
    }

    /// Put the receiver's time `ns` into a `done_timed` answer.
    pub fn set_time(&mut self, ns: u64) {
        self.data[..8].copy_from_slice(&ns.to_le_bytes());
    }

    /// One response finishing every message of `ids` (2 ..= `DONE_MANY_MAX` of them) with
    /// `Status::Ok`.
    pub fn done_many(ids: &[u64]) -> RespEntry {
        debug_assert!((2..=DONE_MANY_MAX).contains(&ids.len()));
        let n = ids.len().min(DONE_MANY_MAX);
        let mut entry = RespEntry { kind: resp::DONE_MANY, status: n as u32, ..Default::default() };
        entry.msg_id = ids.first().copied().unwrap_or(0);
        entry.value = ids.get(1).copied().unwrap_or(0);
        for (word, id) in entry.data[..FIRST_LINE_DATA].chunks_exact_mut(8).zip(ids.iter().skip(2)) {
            word.copy_from_slice(&id.to_le_bytes());
        }
        entry
    }

    /// The ids a `done_many` response finishes. Peer-written: the count is clamped to what
    /// the entry holds, and the ids are checked by whoever looks them up.
    #[inline]
    pub fn many_ids(&self) -> impl Iterator<Item = u64> + '_ {
        let n = (self.status as usize).min(DONE_MANY_MAX);
        // By index, not a chain of the three places the ids sit in: the chain cost the initiator
        // of a write stream about 30 instructions per id.
        (0..n).map(move |i| match i {
            0 => self.msg_id,
            1 => self.value,
            _ => {
                let mut word = [0u8; 8];
                word.copy_from_slice(&self.data[(i - 2) * 8..(i - 1) * 8]);
                u64::from_le_bytes(word)
            }
        })
    }

    /// The receiver's time a `done_timed` answer carries (0: none).
    pub fn time(&self) -> u64 {
        let mut ns = [0u8; 8];
        ns.copy_from_slice(&self.data[..8]);
        u64::from_le_bytes(ns)
    }
}

/// The first SAR segment's length: segments double from it up to a whole bounce buffer (the
/// sender's `segment_len`); a receiver timing a SAR message knows the sender copied this much
/// before it saw anything (`endpoint::measured`).
pub const SAR_FIRST_SEGMENT: u64 = 16 * 1024;

/// Bytes an answer carries in its response entry: the entry then fills its slot's two cache
/// lines. An answer of up to 96 bytes (a read of 33-96 B, the usual 64 B get among them) then
/// crosses between the processes in the entry's two lines, where in an answer buffer it took
/// the response's line and then the buffer's, one after the other (docs/perf/where-the-time-goes.md).
pub const ANSWER_DATA_MAX: usize = 96;
/// Data bytes that share the slot's first cache line with its stamp and the entry's header:
/// what every response but a longer answer uses (`done_timed`, `done_many`, a split's offer).
pub const FIRST_LINE_DATA: usize = crate::ring::FIRST_LINE_BYTES - RESP_HEADER_BYTES;
/// Bytes of a response entry before its data.
const RESP_HEADER_BYTES: usize = std::mem::offset_of!(RespEntry, data);

// SAFETY: integers only, no padding.
unsafe impl Pod for RespEntry {
    /// The first line, and the second only for an answer that needs it. Peer-written `value`:
    /// clamped to the entry.
    #[inline]
    fn wire_len(&self) -> usize {
        let answered = self.kind == resp::DONE && self.status == Status::Answered as u32;
        let data =
            if answered { (self.value as usize).clamp(FIRST_LINE_DATA, ANSWER_DATA_MAX) } else { FIRST_LINE_DATA };
        RESP_HEADER_BYTES + data
    }
}

const _: () = {
    assert!(std::mem::size_of::<CmdEntry>() + 8 == 17 * 64);
    assert!(std::mem::offset_of!(CmdEntry, payload) == 48);
    // No padding: every byte of an entry is a field's (`CmdEntry::as_bytes`).
    assert!(std::mem::size_of::<CmdEntry>() == 48 + INLINE_MAX);
    assert!(COMPACT_AT == 24 && COMPACT_MAX == 32 && COMPACT_DATA_AT == 32 && COMPACT_DATA_MAX == 24);
    assert!(COMPACT_AUX_AT == 40 && COMPACT_AUX_MAX == 16);
    assert!(std::mem::size_of::<RespEntry>() == RESP_HEADER_BYTES + ANSWER_DATA_MAX);
    assert!(FIRST_LINE_DATA == 32 && 8 + RESP_HEADER_BYTES + ANSWER_DATA_MAX == 2 * 64);
    // An IOV command's count word and as many 16-byte ranges as the payload holds (the
    // provider's `iov_limit`): all of them fit, one more would not.
    assert!(8 + IOV_MAX * 16 <= INLINE_MAX && 8 + (IOV_MAX + 1) * 16 > INLINE_MAX);
};

pub mod op {
    pub const CONNECT: u8 = 1;
    pub const MSG: u8 = 2;
    pub const SAR_SEG: u8 = 3;
    pub const DISCONNECT: u8 = 4;
}

pub mod proto {
    pub const INLINE: u8 = 1;
    pub const INJECT: u8 = 2;
    pub const IOV: u8 = 3;
    pub const SAR: u8 = 4;
    /// Inline, for a message of at most `COMPACT_MAX` bytes with no CQ data, no `aux` and no
    /// answer wanted: its payload starts at `COMPACT_AT`, in the fields it leaves out, so that
    /// up to 32 bytes travel in the slot's first cache line (the usual header leaves room for 8).
    pub const COMPACT: u8 = 5;
    /// `COMPACT` for a message with CQ data (MPI's, which names the sender there): the data in
    /// its field, the payload from `COMPACT_DATA_AT`, up to 24 bytes.
    pub const COMPACT_DATA: u8 = 6;
    /// `COMPACT` for a message of 9 to 16 bytes with no CQ data that carries `aux` or wants an
    /// answer (an RMA write, which names its address in `aux` and, delivery complete, wants an
    /// answer; a read request naming its answer buffer): its `msg_id` in the `data` word, the
    /// payload from `COMPACT_AUX_AT`.
    pub const COMPACT_AUX: u8 = 7;
}

/// Command flag: the sender wants a response once the data is delivered.
pub const FLAG_ACK: u8 = 1;
/// Command flag of a CMA message or of a SAR message's first segment: the sender learns from
/// this one's time (`measured.rs`), so the receiver times its read or its copies out and
/// reports the time in the answer. Untimed, a CMA read spares the receiver two clock reads
/// (about 140 instructions of a CMA message's arrival).
pub const FLAG_TIMED: u8 = 2;
/// Command flag of a CMA message: its receiver asked for it to be copied in halves by the two
/// processes from half of `split_min` (`endpoint::split`), whatever else the receiver waits for:
/// the reply to a read it chose to have pushed (`Endpoint::choose_busy_read`).
pub const FLAG_SPLIT_EARLY: u8 = 4;

pub mod resp {
    /// `value` = the peer-table index that the receiver accepted.
    pub const CONN_ACK: u32 = 1;
    /// The message identified by `msg_id` is finished; `status` says how.
    pub const DONE: u32 = 2;
    /// The receiver offers the sender the tail of message `msg_id`'s copy from byte `value`,
    /// to be written to the address and length in `data` (`endpoint::split`).
    pub const SPLIT: u32 = 3;
    /// Messages `msg_id`, `value` and the ids in `data` (`status` of them, 2 ..=
    /// `DONE_MANY_MAX`) all finished with `Status::Ok`: the answers to a run of acknowledged
    /// messages from one sender, handled in one pass of the receiver's (`RespEntry::done_many`).
    pub const DONE_MANY: u32 = 4;
    /// The answer to message `msg_id` is placed in the buffers its request named up to byte
    /// `value`; more bytes and the `DONE` follow (`endpoint::answer`). A hint: the `DONE` names
    /// the whole answer, so a sender that ignores it loses nothing but time.
    pub const PART: u32 = 5;
}

/// The most messages one `resp::DONE_MANY` response finishes.
pub const DONE_MANY_MAX: usize = 2 + FIRST_LINE_DATA / 8;

/// How a message ended at the receiver, as reported in a `DONE` response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Status {
    Ok = 0,
    /// Delivered in part; `value` holds how many bytes.
    Truncated = 1,
    /// The receiver could not read our memory with CMA: resend another way.
    CmaFailed = 2,
    /// The receiver dropped it (discarded or canceled): the send completes.
    Dropped = 3,
    /// The receiver refused it (the handler said why), or could not read it (a CMA read that
    /// failed other than by policy: `recv::unread`): `value` holds a positive errno, and the
    /// send fails.
    Refused = 4,
    /// The handler answered it with data: `value` bytes in the entry's `data`.
    Answered = 5,
    /// The handler answered it with data placed in the buffer of the sender's own region that
    /// the request named (`endpoint::AnswerBuf`): `value` bytes.
    Placed = 6,
}

impl Status {
    pub fn decode(v: u32) -> Result<Status> {
        Ok(match v {
            0 => Status::Ok,
            1 => Status::Truncated,
            2 => Status::CmaFailed,
            3 => Status::Dropped,
            4 => Status::Refused,
            5 => Status::Answered,
            6 => Status::Placed,
            _ => return Err(Error::Corrupt("unknown response status")),
        })
    }
}

/// Limits a receiver checks every command against.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_peers: u64,
    pub inject_count: u64,
    pub sar_count: u64,
    pub sar_size: u64,
    pub max_msg_size: u64,
}

/// Application-visible header of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MsgHeader {
    pub app: u8,
    pub tag: u64,
    pub data: u64,
    /// A third word for the provider (RMA: the target address).
    pub aux: u64,
    pub len: u64,
}

/// A memory range in the sender's address space.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RemoteIov {
    pub addr: u64,
    pub len: u64,
}

/// The payload bytes of a SAR segment command (`CmdEntry::set_sar`).
const SAR_SEG_BYTES: usize = 24;

/// One SAR segment: which bounce buffer, where in the message, how long, and its place among
/// every segment its sender pushed (`seq`: from 1, growing by segment in push order, across
/// messages and receivers), by which a receiver tells whether it handled the segment a dead
/// sender's record names (`held`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SarSeg {
    pub buf: u32,
    pub len: u32,
    pub offset: u64,
    pub seq: u64,
}

/// Where a message's bytes are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    /// The payload is the first `len` bytes of the entry's inline bytes
    /// (`CmdEntry::inline_bytes`: its `payload`, or from `COMPACT_AT` in a compact command).
    Inline {
        len: usize,
    },
    Inject {
        buf: u32,
    },
    /// `count` ranges of the sender's memory, in the entry's payload (see `CmdEntry::iov`);
    /// `timed`: the sender wants the read's time (`FLAG_TIMED`); `split_early`: the receiver
    /// asked for halves from half of `split_min` (`FLAG_SPLIT_EARLY`).
    Iov {
        count: usize,
        timed: bool,
        split_early: bool,
    },
    Sar(SarSeg),
}

/// A validated command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// A sender's first command in our ring, re-sent until answered: `incarnation` is its
    /// region's, as in its entry of our peer table.
    Connect {
        src: u32,
        incarnation: u64,
    },
    Disconnect {
        src: u32,
    },
    Msg {
        src: u32,
        msg_id: u64,
        ack: bool,
        hdr: MsgHeader,
        body: Body,
    },
    SarSeg {
        src: u32,
        msg_id: u64,
        seg: SarSeg,
    },
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn decode_sar(entry: &CmdEntry, limits: &Limits) -> Result<SarSeg> {
    let p = &entry.payload;
    let seg = SarSeg { buf: u32_at(p, 0), len: u32_at(p, 4), offset: u64_at(p, 8), seq: u64_at(p, 16) };
    if u64::from(seg.buf) >= limits.sar_count {
        return Err(Error::Corrupt("SAR buffer index out of range"));
    }
    if u64::from(seg.len) > limits.sar_size {
        return Err(Error::Corrupt("SAR segment longer than a buffer"));
    }
    match seg.offset.checked_add(u64::from(seg.len)) {
        Some(end) if end <= entry.len => Ok(seg),
        _ => Err(Error::Corrupt("SAR segment beyond message end")),
    }
}

/// Check a peer-written entry and turn it into a `Command`.
#[inline]
pub fn decode(entry: &CmdEntry, limits: &Limits) -> Result<Command> {
    let src = entry.src;
    if u64::from(src) >= limits.max_peers {
        return Err(Error::Corrupt("source index out of range"));
    }
    match entry.op {
        op::CONNECT => return Ok(Command::Connect { src, incarnation: entry.tag }),
        op::DISCONNECT => return Ok(Command::Disconnect { src }),
        op::MSG | op::SAR_SEG => {}
        _ => return Err(Error::Corrupt("unknown command op")),
    }
    if entry.len > limits.max_msg_size {
        return Err(Error::Corrupt("message longer than max_msg_size"));
    }
    if entry.op == op::SAR_SEG {
        if entry.proto != proto::SAR {
            return Err(Error::Corrupt("SAR segment with another protocol"));
        }
        return Ok(Command::SarSeg { src, msg_id: entry.msg_id, seg: decode_sar(entry, limits)? });
    }
    let len = entry.len;
    let body = match entry.proto {
        proto::INLINE => {
            if len > INLINE_MAX as u64 {
                return Err(Error::Corrupt("inline message too long"));
            }
            Body::Inline { len: len as usize }
        }
        proto::COMPACT | proto::COMPACT_DATA | proto::COMPACT_AUX => {
            let hdr = entry.compact_header().ok_or(Error::Corrupt("compact message too long"))?;
            let ack = entry.flags & FLAG_ACK != 0;
            if ack && entry.proto != proto::COMPACT_AUX {
                return Err(Error::Corrupt("compact message asking for an answer"));
            }
            let msg_id = entry.compact_msg_id();
            return Ok(Command::Msg { src, msg_id, ack, hdr, body: Body::Inline { len: len as usize } });
        }
        proto::INJECT => {
            let buf = entry.inject_buf();
            if u64::from(buf) >= limits.inject_count {
                return Err(Error::Corrupt("inject buffer index out of range"));
            }
            if len > INJECT_SIZE {
                return Err(Error::Corrupt("inject message too long"));
            }
            Body::Inject { buf }
        }
        proto::IOV => {
            let count = u32_at(&entry.payload, 0) as usize;
            if count == 0 || count > IOV_MAX {
                return Err(Error::Corrupt("iov count out of range"));
            }
            let mut total: u64 = 0;
            for i in 0..count {
                total = total.checked_add(entry.iov(i).len).ok_or(Error::Corrupt("iov lengths overflow"))?;
            }
            if total != len {
                return Err(Error::Corrupt("iov lengths do not add up to the message length"));
            }
            Body::Iov { count, timed: entry.flags & FLAG_TIMED != 0, split_early: entry.flags & FLAG_SPLIT_EARLY != 0 }
        }
        proto::SAR => Body::Sar(decode_sar(entry, limits)?),
        _ => return Err(Error::Corrupt("unknown protocol")),
    };
    let hdr = MsgHeader { app: entry.app, tag: entry.tag, data: entry.data, aux: entry.aux, len };
    Ok(Command::Msg { src, msg_id: entry.msg_id, ack: entry.flags & FLAG_ACK != 0, hdr, body })
}

/// Encoders used by senders: the inverse of `decode`.
impl CmdEntry {
    pub fn message(src: u32, msg_id: u64, hdr: &MsgHeader, ack: bool) -> CmdEntry {
        let mut entry = CmdEntry::default();
        entry.set_message(src, msg_id, hdr, ack);
        entry
    }

    /// Make this entry (a ring slot written in place, say) a message command: every header
    /// field is set, proto to none; the payload is left for the protocol to fill.
    pub fn set_message(&mut self, src: u32, msg_id: u64, hdr: &MsgHeader, ack: bool) {
        self.op = op::MSG;
        self.proto = 0;
        self.flags = if ack { FLAG_ACK } else { 0 };
        self.app = hdr.app;
        self.src = src;
        self.len = hdr.len;
        self.tag = hdr.tag;
        self.data = hdr.data;
        self.aux = hdr.aux;
        self.msg_id = msg_id;
    }

    /// Make this entry a compact message command of protocol `proto` (`compact_proto` of its
    /// `hdr` and `ack`: the caller asked it) and return where its payload goes: `hdr.len` bytes
    /// from where that protocol starts it.
    pub fn set_compact(&mut self, proto: u8, src: u32, msg_id: u64, ack: bool, hdr: &MsgHeader) -> &mut [u8] {
        debug_assert_eq!(compact_proto(hdr, ack), Some(proto));
        let at = compact_at(proto).unwrap_or(COMPACT_AT);
        self.op = op::MSG;
        self.proto = proto;
        self.flags = if ack { FLAG_ACK } else { 0 };
        self.app = hdr.app;
        self.src = src;
        self.len = hdr.len;
        self.tag = hdr.tag;
        if proto == proto::COMPACT_AUX {
            self.data = msg_id;
            self.aux = hdr.aux;
        } else {
            self.data = hdr.data; // overwritten by the payload of a `proto::COMPACT` one
        }
        let len = (hdr.len as usize).min(compact_max(at));
        &mut self.as_bytes_mut()[at..at + len]
    }

    /// The header a compact command stands for (0 in the words it leaves out), or None if it
    /// is longer than its first line holds (or not a compact command).
    #[inline(always)]
    pub fn compact_header(&self) -> Option<MsgHeader> {
        let at = compact_at(self.proto)?;
        let data = if self.proto == proto::COMPACT_DATA { self.data } else { 0 };
        let aux = if self.proto == proto::COMPACT_AUX { self.aux } else { 0 };
        (self.len <= compact_max(at) as u64).then_some(MsgHeader {
            app: self.app,
            tag: self.tag,
            data,
            aux,
            len: self.len,
        })
    }

    /// The `msg_id` a compact command carries: a `proto::COMPACT_AUX` one's, in its `data` word;
    /// 0 for the others, which want no answer.
    #[inline(always)]
    pub fn compact_msg_id(&self) -> u64 {
        if self.proto == proto::COMPACT_AUX {
            self.data
        } else {
            0
        }
    }

    /// Where an inline message's bytes start in the entry: `payload`, or where a compact
    /// command starts them (`compact_at`).
    #[inline(always)]
    pub fn inline_at(&self) -> usize {
        compact_at(self.proto).unwrap_or(HEADER_BYTES)
    }

    /// The entry's bytes from where an inline message's start (`inline_at`) to its end.
    #[inline(always)]
    pub fn inline_bytes(&self) -> &[u8] {
        &self.as_bytes()[self.inline_at()..]
    }

    fn as_bytes(&self) -> &[u8] {
        // SAFETY: `CmdEntry` is `repr(C)`, integers and a byte array with no padding (checked at
        // the end of this module), so all its bytes are initialised; the slice borrows `self`.
        unsafe { std::slice::from_raw_parts((self as *const CmdEntry).cast::<u8>(), size_of::<CmdEntry>()) }
    }

    fn as_bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as `as_bytes`; any bytes written are a valid `CmdEntry` (`Pod`).
        unsafe { std::slice::from_raw_parts_mut((self as *mut CmdEntry).cast::<u8>(), size_of::<CmdEntry>()) }
    }

    pub fn control(op: u8, src: u32) -> CmdEntry {
        CmdEntry { op, src, ..CmdEntry::default() }
    }

    /// The connection request of the sender of `incarnation` in entry `src` (`Command::Connect`).
    pub fn connect(src: u32, incarnation: u64) -> CmdEntry {
        CmdEntry { tag: incarnation, ..CmdEntry::control(op::CONNECT, src) }
    }

    /// The inject buffer an INJECT command names (`set_inject`), unchecked.
    pub fn inject_buf(&self) -> u32 {
        u32_at(&self.payload, 0)
    }

    pub fn set_inject(&mut self, buf: u32) {
        self.proto = proto::INJECT;
        self.payload[0..4].copy_from_slice(&buf.to_le_bytes());
    }

    pub fn set_iovs(&mut self, iovs: &[RemoteIov]) {
        debug_assert!(!iovs.is_empty() && iovs.len() <= IOV_MAX);
        self.proto = proto::IOV;
        self.payload[0..4].copy_from_slice(&(iovs.len() as u32).to_le_bytes());
        for (i, iov) in iovs.iter().enumerate() {
            let at = 8 + i * 16;
            self.payload[at..at + 8].copy_from_slice(&iov.addr.to_le_bytes());
            self.payload[at + 8..at + 16].copy_from_slice(&iov.len.to_le_bytes());
        }
    }

    /// The `i`-th remote range of an IOV command (`i < IOV_MAX`).
    pub fn iov(&self, i: usize) -> RemoteIov {
        let at = 8 + i * 16;
        RemoteIov { addr: u64_at(&self.payload, at), len: u64_at(&self.payload, at + 8) }
    }

    pub fn set_sar(&mut self, seg: SarSeg) {
        self.proto = proto::SAR;
        self.payload[0..4].copy_from_slice(&seg.buf.to_le_bytes());
        self.payload[4..8].copy_from_slice(&seg.len.to_le_bytes());
        self.payload[8..16].copy_from_slice(&seg.offset.to_le_bytes());
        self.payload[16..24].copy_from_slice(&seg.seq.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits =
        Limits { max_peers: 8, inject_count: 4, sar_count: 2, sar_size: 65536, max_msg_size: 1 << 30 };

    fn hdr(len: u64) -> MsgHeader {
        MsgHeader { app: 3, tag: 0xfeed, data: 42, aux: 0x7000, len }
    }

    /// A segment command (from peer 1, message 2) of a message of `len` bytes.
    fn sar_segment(len: u64, seg: SarSeg) -> CmdEntry {
        let mut e = CmdEntry::message(1, 2, &hdr(len), false);
        e.op = op::SAR_SEG;
        e.set_sar(seg);
        e
    }

    /// Only an answer of more than `FIRST_LINE_DATA` bytes makes the ring copy the slot's second
    /// line (so only it takes that line across), whatever a peer wrote in `value`; a run of
    /// answers whose count reads as `Status::Answered` stays in the first.
    #[test]
    fn a_response_uses_its_second_line_only_for_a_long_answer() {
        let line = crate::ring::FIRST_LINE_BYTES;
        let whole = std::mem::size_of::<RespEntry>();
        assert_eq!(RespEntry::done(1, Status::Ok, u64::MAX).wire_len(), line);
        assert_eq!(RespEntry::done_timed(1, Status::Placed, 1 << 20, 99).wire_len(), line);
        let run = RespEntry::done_many(&[100, 200, 300, 400, 500]);
        assert_eq!((run.status, run.wire_len()), (Status::Answered as u32, line));
        for (value, len) in [(0, line), (8, line), (32, line), (33, line + 1), (64, line + 32), (96, whole)] {
            assert_eq!(RespEntry::done(1, Status::Answered, value).wire_len(), len, "{value} B answer");
        }
        for value in [97, 1 << 32, u64::MAX] {
            assert_eq!(RespEntry::done(1, Status::Answered, value).wire_len(), whole, "a peer's {value} is clamped");
        }
    }

    #[test]
    fn done_many_carries_its_ids_and_clamps_a_peers_count() {
        for n in 2..=DONE_MANY_MAX {
            let ids: Vec<u64> = (0..n as u64).map(|i| 1000 + i * 7).collect();
            let entry = RespEntry::done_many(&ids);
            assert_eq!(entry.kind, resp::DONE_MANY);
            assert_eq!(entry.many_ids().collect::<Vec<_>>(), ids);
        }
        let mut entry = RespEntry::done_many(&[1, 2, 3]);
        entry.status = u32::MAX;
        assert_eq!(entry.many_ids().count(), DONE_MANY_MAX, "a peer's count is clamped");
        entry.status = 0;
        assert_eq!(entry.many_ids().count(), 0);
    }

    #[test]
    fn encodings_round_trip() {
        let mut e = CmdEntry::message(5, 77, &hdr(10), true);
        e.proto = proto::INLINE;
        e.payload[..10].copy_from_slice(b"0123456789");
        match decode(&e, &LIMITS).unwrap() {
            Command::Msg { src: 5, msg_id: 77, ack: true, hdr: h, body: Body::Inline { len: 10 } } => {
                assert_eq!(h, hdr(10));
                assert_eq!(&e.payload[..10], b"0123456789");
            }
            other => panic!("{other:?}"),
        }
        let mut e = CmdEntry::message(1, 2, &hdr(300), false);
        e.set_iovs(&[RemoteIov { addr: 0x1000, len: 100 }, RemoteIov { addr: 0x9000, len: 200 }]);
        for (flags, timed, split_early) in
            [(0, false, false), (FLAG_TIMED, true, false), (FLAG_SPLIT_EARLY, false, true), (FLAG_ACK, false, false)]
        {
            e.flags = flags;
            let body = Body::Iov { count: 2, timed, split_early };
            assert!(matches!(decode(&e, &LIMITS).unwrap(), Command::Msg { body: b, .. } if b == body), "{flags:#x}");
        }
        let e = sar_segment(100_000, SarSeg { buf: 1, len: 65536, offset: 0, seq: u64::MAX - 1 });
        assert_eq!(
            decode(&e, &LIMITS).unwrap(),
            Command::SarSeg { src: 1, msg_id: 2, seg: SarSeg { buf: 1, len: 65536, offset: 0, seq: u64::MAX - 1 } }
        );
    }

    /// A compact message of every length it carries, with CQ data and without, and with `aux`
    /// and an answer wanted, decodes as the inline message it stands for, its bytes in the
    /// slot's first line; a compact command that is too long, or asks for an answer where its
    /// protocol carries no `msg_id`, is refused.
    #[test]
    fn compact_messages_travel_in_the_first_line() {
        // (protocol, its shortest and longest payload, CQ data, aux, answer wanted)
        let kinds = [
            (proto::COMPACT, 0, COMPACT_MAX, 0, 0, false),
            (proto::COMPACT_DATA, 0, COMPACT_DATA_MAX, 0xda7a, 0, false),
            (proto::COMPACT_AUX, 9, COMPACT_AUX_MAX, 0, 0xadd0, true),
            (proto::COMPACT_AUX, 9, COMPACT_AUX_MAX, 0, 0xadd0, false),
            (proto::COMPACT_AUX, 9, COMPACT_AUX_MAX, 0, 0, true),
        ];
        for (proto, min, max, data, aux, ack) in kinds {
            let short = |len| MsgHeader { app: 3, tag: 0xfeed, data, aux, len };
            let msg_id = if proto == proto::COMPACT_AUX { 0x1d_0001 } else { 0 };
            assert_eq!(compact_proto(&short(max as u64), ack), Some(proto));
            assert_eq!(compact_proto(&short(max as u64 + 1), ack), None, "too long");
            if min > 0 {
                assert_eq!(compact_proto(&short(min as u64 - 1), ack), None, "in the usual header's line");
            }
            for len in min..=max {
                let bytes: Vec<u8> = (0..len as u8).map(|b| b ^ 0x5a).collect();
                // Over an entry an earlier command left behind: every field it carries is rewritten.
                let mut e = CmdEntry::message(6, 99, &MsgHeader { aux: 0x0bad, ..hdr(500) }, !ack);
                e.proto = proto::IOV;
                e.set_compact(proto, 5, msg_id, ack, &short(len as u64)).copy_from_slice(&bytes);
                assert!(e.wire_len() <= crate::ring::FIRST_LINE_BYTES, "{len} B: {} bytes", e.wire_len());
                match decode(&e, &LIMITS).unwrap() {
                    Command::Msg { src: 5, msg_id: id, ack: a, hdr: h, body: Body::Inline { len: n } } => {
                        assert_eq!((h, n, id, a), (short(len as u64), len, msg_id, ack), "{len} B");
                        assert_eq!(&e.inline_bytes()[..n], &bytes[..], "{len} B");
                    }
                    other => panic!("{len} B: {other:?}"),
                }
            }
            let mut e = CmdEntry::default();
            e.set_compact(proto, 1, msg_id, ack, &short(max as u64)).fill(7);
            let mut long = e;
            long.len = max as u64 + 1;
            assert_eq!(decode(&long, &LIMITS), Err(Error::Corrupt("compact message too long")));
            // A peer's length is clamped for the ring's copy as well.
            long.len = u64::MAX;
            assert_eq!(long.wire_len(), crate::ring::FIRST_LINE_BYTES);
            let mut acked = e;
            acked.flags = FLAG_ACK;
            if proto == proto::COMPACT_AUX {
                assert!(matches!(decode(&acked, &LIMITS), Ok(Command::Msg { ack: true, .. })));
            } else {
                assert_eq!(decode(&acked, &LIMITS), Err(Error::Corrupt("compact message asking for an answer")));
            }
        }
        // What the first two leave out goes by the third; what has CQ data and wants an answer
        // or carries `aux` is not compact.
        let plain = |data, aux| MsgHeader { app: 3, tag: 0xfeed, data, aux, len: 16 };
        assert_eq!(compact_proto(&plain(0, 0), true), Some(proto::COMPACT_AUX), "answer wanted");
        assert_eq!(compact_proto(&plain(0, 1), false), Some(proto::COMPACT_AUX), "aux");
        assert_eq!(compact_proto(&plain(1, 1), false), None, "aux and CQ data");
        assert_eq!(compact_proto(&plain(1, 0), true), None, "answer wanted and CQ data");
    }

    /// The ring copies a command's header and the part of its payload its protocol uses, and
    /// no more (`wire_len`): pushed through a ring into an entry full of other bytes, each kind
    /// of command decodes as it was sent, with every range (as many as an IOV command holds) and
    /// every segment field, while a small one costs only the bytes it needs.
    #[test]
    fn a_command_crosses_the_ring_with_the_bytes_it_uses_and_no_more() {
        let ranges: Vec<RemoteIov> = (1..=IOV_MAX as u64).map(|i| RemoteIov { addr: i << 12, len: i }).collect();
        let mut inline = CmdEntry::message(1, 2, &hdr(10), true);
        inline.proto = proto::INLINE;
        inline.payload[..10].copy_from_slice(b"0123456789");
        let mut inject = CmdEntry::message(1, 2, &hdr(100), false);
        inject.set_inject(3);
        let mut iov = CmdEntry::message(1, 2, &hdr(ranges.iter().map(|r| r.len).sum()), false);
        iov.set_iovs(&ranges);
        let sar = sar_segment(100_000, SarSeg { buf: 1, len: 65536, offset: 4096, seq: 7 });
        // (the command, the payload bytes it uses)
        let sent = [(CmdEntry::connect(1, 0xc0ffee), 0), (inline, 10), (inject, 4), (iov, 8 + IOV_MAX * 16), (sar, 24)];
        let ctl = crate::ring::RingCtl::new();
        let slots: Vec<crate::ring::Slot<CmdEntry>> = (0..2).map(crate::ring::Slot::new).collect();
        let ring = crate::ring::Ring::new(&ctl, &slots);
        let mut rx = crate::ring::Consumer::new();
        for (i, (entry, used)) in sent.into_iter().enumerate() {
            assert_eq!(entry.wire_len(), HEADER_BYTES + used, "command {i}");
            ring.push(&entry).unwrap();
            let mut got = CmdEntry::default();
            got.payload.fill(0xee);
            assert_eq!(rx.pop_into(&ring, &mut got), crate::ring::Pop::Item(()), "command {i}");
            let command = decode(&got, &LIMITS);
            assert_eq!(command, decode(&entry, &LIMITS), "command {i}");
            match command.unwrap() {
                Command::Msg { body: Body::Inline { len }, .. } => {
                    assert_eq!(&got.inline_bytes()[..len], b"0123456789")
                }
                Command::Msg { body: Body::Iov { count, .. }, .. } => {
                    assert_eq!((0..count).map(|k| got.iov(k)).collect::<Vec<_>>(), ranges, "every range")
                }
                _ => {}
            }
        }
    }

    #[test]
    fn every_bad_field_is_caught() {
        let good = {
            let mut e = CmdEntry::message(1, 2, &hdr(100), false);
            e.set_inject(3);
            e
        };
        assert!(decode(&good, &LIMITS).is_ok());
        let cases: &[fn(&mut CmdEntry)] = &[
            |e| e.src = 8,
            |e| e.op = 99,
            |e| e.proto = 0,
            |e| e.set_inject(4),
            |e| e.len = 4097,
            |e| e.len = 1 << 31,
            |e| {
                e.proto = proto::INLINE;
                e.len = INLINE_MAX as u64 + 1
            },
            |e| e.set_iovs(&[RemoteIov { addr: 0, len: 99 }]),
            |e| e.set_iovs(&[RemoteIov { addr: 0, len: u64::MAX }, RemoteIov { addr: 0, len: 101 }]),
            |e| {
                e.proto = proto::IOV;
                e.payload[0..4].copy_from_slice(&13u32.to_le_bytes())
            },
            // No range, for a message of no bytes.
            |e| {
                e.len = 0;
                e.set_iovs(&[RemoteIov { addr: 0, len: 0 }]);
                e.payload[0..4].copy_from_slice(&0u32.to_le_bytes())
            },
            // One range more than a command holds (the ones it holds add up to the length).
            |e| {
                e.len = IOV_MAX as u64;
                e.set_iovs(&[RemoteIov { addr: 0x1000, len: 1 }; IOV_MAX]);
                e.payload[0..4].copy_from_slice(&(IOV_MAX as u32 + 1).to_le_bytes())
            },
            |e| e.set_sar(SarSeg { buf: 2, len: 10, offset: 0, seq: 1 }),
            |e| e.set_sar(SarSeg { buf: 0, len: 65537, offset: 0, seq: 1 }),
            |e| e.set_sar(SarSeg { buf: 0, len: 10, offset: 95, seq: 1 }),
            |e| e.set_sar(SarSeg { buf: 0, len: 10, offset: u64::MAX - 5, seq: 1 }),
        ];
        for (i, break_it) in cases.iter().enumerate() {
            let mut e = good;
            break_it(&mut e);
            assert!(matches!(decode(&e, &LIMITS), Err(Error::Corrupt(_))), "case {i}");
        }
        // A segment of a message of `max_msg_size` bytes is taken, of one byte more is not
        // (nothing else about a segment bounds its message's length).
        let mut seg = sar_segment(LIMITS.max_msg_size, SarSeg { buf: 0, len: 10, offset: 0, seq: 1 });
        assert!(decode(&seg, &LIMITS).is_ok());
        seg.len += 1;
        assert_eq!(decode(&seg, &LIMITS), Err(Error::Corrupt("message longer than max_msg_size")));
    }
}
