//! The wire format of one-sided messages: their kinds in the engine's `app` byte, the packed
//! atomic descriptor (`Desc`), the cookie and context bits that tell their completions apart,
//! and their engine header.

use crate::atomic::apply::{self, Kind};
use rshm_ffi as ffi;
use smr_core::cmd::MsgHeader;

/// Message kinds, in the upper nibble of the engine's `app` byte (the lower one holds
/// APP_TAGGED and APP_DATA).
pub const KIND_MSG: u8 = 0;
pub const KIND_WRITE: u8 = 1;
pub const KIND_READ_REQ: u8 = 2;
pub const KIND_READ_RESP: u8 = 3;
pub const KIND_ATOMIC: u8 = 4;
/// The remote ranges of the operation that follows from the same source (`segments.rs`).
pub const KIND_SEGMENTS: u8 = 5;

/// In the lower nibble of a write, read request or atomic: its remote ranges came just before
/// it in a `KIND_SEGMENTS` command; the header's key and address are unused.
pub const APP_SEGMENTED: u8 = 4;

pub fn kind_of(app: u8) -> u8 {
    app >> 4
}

pub(crate) fn app(kind: u8, low: u8) -> u8 {
    kind << 4 | low
}

/// Context bits of `on_recv_done`: deliveries of replies and of target operations (the rest
/// are receives).
pub const CTX_REPLY: u64 = 1 << 63;
pub const CTX_TARGET: u64 = 1 << 62;
/// Cookie bit of `on_send_done` for replies the target sends.
pub const COOKIE_REPLY: u64 = 1 << 63;
/// Cookie bit of `on_send_done` for an acknowledged inject write or base atomic, which keeps no
/// transmit record (`cookie_of`): all there is to report is in the cookie, and a counter of
/// them (`RmaState::untracked`) holds their place in the transmit queue.
pub const COOKIE_UNTRACKED: u64 = 1 << 62;
/// Cookie of a `KIND_SEGMENTS` command, unanswered and part of the operation after it: a
/// completion the engine reports for it (a batched push) is ignored.
pub const COOKIE_SEGMENTS: u64 = COOKIE_REPLY | COOKIE_UNTRACKED;
/// With `COOKIE_UNTRACKED`: a base atomic (otherwise a write).
pub(super) const UNTRACKED_ATOMIC: u64 = 1;

/// Largest payload of an atomic: its operands always travel inline or through one inject buffer,
/// so the target applies it in the same step in which it arrives.
const ATOMIC_PAYLOAD_MAX: usize = 4096;
/// Reads up to this size are copied out when the request arrives, so a write that follows the
/// read from the same initiator cannot change what it returns (FI_ORDER_WAR).
pub const READ_SNAPSHOT_MAX: usize = 4096;

/// An atomic's operation, packed into the header's `data` word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Desc {
    pub kind: Kind,
    pub op: u32,
    pub datatype: u32,
    pub count: u32,
    /// The request's payload starts with an op id: only for old values that come back in a
    /// reply message (`RmaState::returns`), which names it. Without one, an 8-byte operand
    /// shares the command's first cache line with its header: the target's copy of the
    /// command then takes one line from the initiator, not two, one after the other.
    pub with_op_id: bool,
}

/// The bit of a packed `Desc` that says its payload starts with an op id.
const DESC_OP_ID: u64 = 1 << 24;

impl Desc {
    pub fn pack(self) -> u64 {
        let kind = match self.kind {
            Kind::Write => 0u64,
            Kind::Fetch => 1,
            Kind::Compare => 2,
        };
        let with_op_id = if self.with_op_id { DESC_OP_ID } else { 0 };
        kind | u64::from(self.op as u8) << 8
            | u64::from(self.datatype as u8) << 16
            | with_op_id
            | u64::from(self.count) << 32
    }

    /// Decode a peer's word; None unless it names a valid operation whose operands fit.
    pub fn unpack(v: u64) -> Option<Desc> {
        let kind = match v & 0xff {
            0 => Kind::Write,
            1 => Kind::Fetch,
            2 => Kind::Compare,
            _ => return None,
        };
        let d = Desc {
            kind,
            op: ((v >> 8) & 0xff) as u32,
            datatype: ((v >> 16) & 0xff) as u32,
            count: (v >> 32) as u32,
            with_op_id: v & DESC_OP_ID != 0,
        };
        (apply::valid(d.kind, d.op, d.datatype) && d.count > 0 && fits(kind, d.datatype, d.count as usize)?)
            .then_some(d)
    }

    /// The remote access it needs of a registration: a read only reads, a base atomic writes,
    /// a fetching or compare one does both.
    pub fn access(self) -> u64 {
        (match (self.op, self.kind) {
            (ffi::FI_ATOMIC_READ, _) => ffi::FI_REMOTE_READ,
            (_, Kind::Write) => ffi::FI_REMOTE_WRITE,
            _ => ffi::FI_REMOTE_READ | ffi::FI_REMOTE_WRITE,
        }) as u64
    }

    /// The counter of registration `mr` it moves (fi_mr(3): any atomic that may modify the
    /// memory counts as a write).
    pub fn mr_cntr(self, cntrs: super::segments::MrCntrs) -> Option<usize> {
        if self.op == ffi::FI_ATOMIC_READ {
            cntrs.read
        } else {
            cntrs.write
        }
    }

    /// Bytes of the target memory it touches.
    pub fn bytes(self) -> usize {
        self.count as usize * apply::type_size(self.datatype).unwrap_or(0)
    }

    /// This operation as sent with op id `op_id`: the id leads the payload unless it is 0 (the
    /// initiator keeps no reply record to match).
    pub fn for_op(self, op_id: u64) -> Desc {
        Desc { with_op_id: op_id != 0, ..self }
    }

    /// Bytes of its payload before the operands: the op id, if it carries one.
    pub fn id_bytes(self) -> usize {
        if self.with_op_id {
            8
        } else {
            0
        }
    }

    /// Bytes of its payload: op id (if any), operands (none for FI_ATOMIC_READ), compare values.
    pub fn payload(self) -> usize {
        let operands = if self.op == ffi::FI_ATOMIC_READ { 0 } else { self.bytes() };
        let compares = if self.kind == Kind::Compare { self.bytes() } else { 0 };
        self.id_bytes() + operands + compares
    }
}

/// Most elements one atomic call may carry (what `fi_atomicvalid` reports).
pub fn max_count(kind: Kind, datatype: u32) -> Option<usize> {
    Some((ATOMIC_PAYLOAD_MAX - 8) / element_payload(kind, datatype)?)
}

/// Whether `count` elements are at most `max_count` (asked of every atomic that arrives: a
/// product, where `max_count` divides).
fn fits(kind: Kind, datatype: u32, count: usize) -> Option<bool> {
    Some(count * element_payload(kind, datatype)? <= ATOMIC_PAYLOAD_MAX - 8)
}

/// Payload bytes one element of `datatype` takes: its operand, and its compare value.
fn element_payload(kind: Kind, datatype: u32) -> Option<usize> {
    let size = apply::type_size(datatype)?;
    Some(if kind == Kind::Compare { 2 * size } else { size })
}

/// The engine header of a one-sided message.
pub(crate) fn header(app: u8, tag: u64, aux: u64, data: u64, len: usize) -> MsgHeader {
    MsgHeader { app, tag, data, aux, len: len as u64 }
}
