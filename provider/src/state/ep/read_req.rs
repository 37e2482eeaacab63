//! The payload of a read request (READ_REQ), and how the initiator wants its bytes back.
//!
//! A read the target answers in one round trip (op id 0: the initiator keeps no reply record)
//! has a short form, so that the request shares the command's first cache line with its header
//! and the target's copy of the command takes one line from the initiator, not two in a row:
//!
//! | bytes | field                                                                       |
//! |-------|-----------------------------------------------------------------------------|
//! | 0..4  | length (< 2^32)                                                             |
//! | 4..8  | absent: answer with the bytes (up to `ANSWER_DATA_MAX`); or the answer buffer's name |
//! | 8..   | with a name that says so: the SAR buffers the answer continues in (1 to 3 of 2 bytes each, `AnswerBuf::more`) |
//!
//! Every other request has the long form:
//!
//! | bytes          | field                                                              |
//! |----------------|--------------------------------------------------------------------|
//! | 0..8           | op id (the initiator's, echoed in a READ_RESP; not 0)              |
//! | 8..16          | length                                                             |
//! | 16..24         | absent: reply with a READ_RESP message; an answer buffer's name (< 2^32); `PUSHED`; or `WRITE_BACK` |
//! | 24..           | with a name that says so: the SAR buffers the answer continues in, as in the short form |
//! | 24..32         | with `WRITE_BACK`: how many ranges follow (1 ..= `WRITE_BACK_RANGES_MAX`) |
//! | 32..           | with `WRITE_BACK`: (address, length) of each range of the initiator's buffer |
//!
//! Each request has one encoding: a long form whose op id is 0 and that a short form could
//! carry is refused.
//!
//! With `WRITE_BACK` the target copies the bytes straight into the initiator's buffer with
//! CMA (`Endpoint::cma_write`) and then answers: one request, one answer, one system call, all
//! the target's. That is how the C shm serves reads (1.17's `smr_progress_iov`), and it spares
//! the three-entry exchange of a READ_RESP that the initiator pulls: in a stream of reads both
//! ways (fi_rma_bw), each side would otherwise wait for the other's reply while it pulls its own.
//!
//! Everything here is peer-written for the target: `decode` checks the length field against
//! the ranges and the payload's size, and the kernel checks the addresses (a bad one fails the
//! copy with EFAULT, which fails the read).

use smr_core::cmd::RemoteIov;
use smr_core::endpoint::{AnswerBuf, ANSWER_BUFS_MAX};

/// The answer-buffer word's value that asks for a CMA write-back (no buffer name is this large).
const WRITE_BACK: u64 = 1 << 32;
/// The answer-buffer word's value that asks for a READ_RESP pushed through the initiator's SAR
/// buffers (`ReturnBy::Pushed`).
const PUSHED: u64 = 1 << 33;
/// Most ranges of the initiator's buffer a write-back request names (its iov limit).
pub const WRITE_BACK_RANGES_MAX: usize = smr_core::cmd::IOV_MAX;
const HEADER: usize = 16;
/// Bytes of the short form without an answer buffer: the length.
const SHORT: usize = 4;
/// Bytes of the longest short form: the length, the first buffer's name, the others'.
pub const SHORT_MAX: usize = SHORT + 4 + 2 * (ANSWER_BUFS_MAX - 1);
/// Bytes of the longest long form that names answer buffers.
const LONG_NAMED_MAX: usize = HEADER + 8 + 2 * (ANSWER_BUFS_MAX - 1);

/// How the target returns the bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReturnBy {
    /// A READ_RESP message, which the initiator pulls with CMA when it is large and CMA works:
    /// the target needs no step after the one that sends it.
    Reply,
    /// A READ_RESP message the target pushes through the initiator's SAR buffers while the
    /// initiator copies the segments out: both CPUs copy at once. For a target with time to
    /// spare (`Endpoint::peer_is_free`).
    Pushed,
    /// Placed in the initiator's answer buffers of these names (`Endpoint::answer_into`).
    AnswerBuf(AnswerBuf),
    /// Written into these ranges of the initiator's memory with CMA.
    WriteBack(Vec<RemoteIov>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadReq {
    pub op_id: u64,
    pub len: u64,
    pub by: ReturnBy,
}

/// A request's own payload: on the stack when small.
pub type Bytes = smallvec::SmallVec<[u8; 64]>;

impl ReadReq {
    pub fn encode(&self) -> Bytes {
        if let Some(buf) = self.short_form() {
            let mut out = [0u8; SHORT_MAX];
            let n = Self::encode_answered(self.len, buf, &mut out);
            return Bytes::from_slice(&out[..n]);
        }
        // The fixed words in one array, copied in at once (a read's request is built on every
        // read: appending word by word cost more than the rest of it).
        let word = match &self.by {
            ReturnBy::Reply => None,
            ReturnBy::AnswerBuf(buf) => Some(u64::from(buf.wire())),
            ReturnBy::Pushed => Some(PUSHED),
            ReturnBy::WriteBack(_) => Some(WRITE_BACK),
        };
        let mut head = [0u8; HEADER + 8];
        head[..8].copy_from_slice(&self.op_id.to_le_bytes());
        head[8..HEADER].copy_from_slice(&self.len.to_le_bytes());
        let n = match word {
            Some(w) => {
                head[HEADER..].copy_from_slice(&w.to_le_bytes());
                HEADER + 8
            }
            None => HEADER,
        };
        let mut b = Bytes::from_slice(&head[..n]);
        if let ReturnBy::AnswerBuf(buf) = &self.by {
            let mut more = [0u8; 2 * (ANSWER_BUFS_MAX - 1)];
            let n = put_more(buf, &mut more);
            b.extend_from_slice(&more[..n]);
        }
        if let ReturnBy::WriteBack(ranges) = &self.by {
            b.extend_from_slice(&(ranges.len() as u64).to_le_bytes());
            for r in ranges {
                b.extend_from_slice(&r.addr.to_le_bytes());
                b.extend_from_slice(&r.len.to_le_bytes());
            }
        }
        b
    }

    /// The short form's answer buffer (None: answered with the bytes), if this request has one.
    fn short_form(&self) -> Option<Option<AnswerBuf>> {
        if self.op_id != 0 || self.len > u64::from(u32::MAX) {
            return None;
        }
        match self.by {
            ReturnBy::Reply => Some(None),
            ReturnBy::AnswerBuf(buf) => Some(Some(buf)),
            _ => None,
        }
    }

    /// `encode` of a read answered in one round trip (op id 0: the target answers the request
    /// itself), on the stack, in the short form: `len` (below 2^32: a read answered in one
    /// trip fits its buffers), and the answer buffers' names if it has any
    /// (`ReturnBy::AnswerBuf`; else `ReturnBy::Reply`, which a read of up to `ANSWER_DATA_MAX`
    /// bytes asks, and which its target answers with the bytes). Returns the bytes in use.
    pub fn encode_answered(len: u64, buf: Option<AnswerBuf>, out: &mut [u8; SHORT_MAX]) -> usize {
        debug_assert!(len <= u64::from(u32::MAX));
        out[..SHORT].copy_from_slice(&(len as u32).to_le_bytes());
        let Some(buf) = buf else { return SHORT };
        out[SHORT..SHORT + 4].copy_from_slice(&buf.wire().to_le_bytes());
        SHORT + 4 + put_more(&buf, &mut out[SHORT + 4..])
    }

    /// A peer's payload, checked; None if it is malformed.
    pub fn decode(p: &[u8]) -> Option<ReadReq> {
        let word = |at: usize| Some(u32::from_le_bytes(p.get(at..at + 4)?.try_into().ok()?));
        match p.len() {
            SHORT => return Some(ReadReq { op_id: 0, len: u64::from(word(0)?), by: ReturnBy::Reply }),
            n @ 8..=SHORT_MAX if n % 2 == 0 => {
                let (more, n) = u16s(&p[8..]);
                let buf = AnswerBuf::from_wire(word(SHORT)?, &more[..n])?;
                return Some(ReadReq { op_id: 0, len: u64::from(word(0)?), by: ReturnBy::AnswerBuf(buf) });
            }
            _ => {}
        }
        let (op_id, len) = (u64_at(p, 0)?, u64_at(p, 8)?);
        let by = match p.len() {
            HEADER => ReturnBy::Reply,
            24 => match u64_at(p, 16)? {
                PUSHED => ReturnBy::Pushed,
                name => ReturnBy::AnswerBuf(AnswerBuf::from_wire(u32::try_from(name).ok()?, &[])?),
            },
            n @ 26..=LONG_NAMED_MAX if n % 2 == 0 => {
                let (more, n) = u16s(&p[24..]);
                ReturnBy::AnswerBuf(AnswerBuf::from_wire(u32::try_from(u64_at(p, 16)?).ok()?, &more[..n])?)
            }
            _ => {
                if u64_at(p, 16)? != WRITE_BACK {
                    return None;
                }
                let count = usize::try_from(u64_at(p, 24)?).ok()?;
                if count == 0 || count > WRITE_BACK_RANGES_MAX || p.len() != 32 + 16 * count {
                    return None;
                }
                let ranges: Vec<RemoteIov> = (0..count)
                    .map(|i| RemoteIov {
                        addr: u64_at(p, 32 + 16 * i).unwrap_or(0),
                        len: u64_at(p, 40 + 16 * i).unwrap_or(0),
                    })
                    .collect();
                let total = ranges.iter().try_fold(0u64, |sum, r| sum.checked_add(r.len))?;
                if total != len {
                    return None;
                }
                ReturnBy::WriteBack(ranges)
            }
        };
        let req = ReadReq { op_id, len, by };
        // One encoding per request: this one has a short form.
        req.short_form().is_none().then_some(req)
    }

    /// Whether a message of `len` bytes can be a read request's payload (checked before the
    /// payload is taken; `decode` checks the rest).
    pub fn plausible_len(len: u64) -> bool {
        len == SHORT as u64
            || ((SHORT as u64 + 4..=SHORT_MAX as u64).contains(&len) && len.is_multiple_of(2))
            || len == 16
            || len == 24
            || ((26..=LONG_NAMED_MAX as u64).contains(&len) && len.is_multiple_of(2))
            || (len >= 48 && (len - 32).is_multiple_of(16) && (len - 32) / 16 <= WRITE_BACK_RANGES_MAX as u64)
    }
}

/// Write the further answer buffers' names (`AnswerBuf::more`) at the start of `out`, which has
/// room for them; returns the bytes written.
fn put_more(buf: &AnswerBuf, out: &mut [u8]) -> usize {
    for (at, index) in out.chunks_exact_mut(2).zip(buf.more()) {
        at.copy_from_slice(&index.to_le_bytes());
    }
    2 * buf.more().len()
}

/// The further answer buffers' names at the end of a request, as `AnswerBuf::from_wire` takes
/// them: on the stack, none for the usual request (a `SmallVec` cost every read's decoding about
/// 100 instructions). More than `ANSWER_BUFS_MAX - 1` are cut to that many, which `from_wire`
/// then refuses as not the count the name says.
fn u16s(b: &[u8]) -> ([u16; ANSWER_BUFS_MAX - 1], usize) {
    let mut more = [0u16; ANSWER_BUFS_MAX - 1];
    let mut n = 0;
    for (at, pair) in more.iter_mut().zip(b.chunks_exact(2)) {
        *at = u16::from_le_bytes([pair[0], pair[1]]);
        n += 1;
    }
    (more, n)
}

/// The little-endian word at byte `at` of a peer's payload, if it is there.
pub(crate) fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(req: ReadReq) {
        let bytes = req.encode();
        assert!(ReadReq::plausible_len(bytes.len() as u64), "{req:?}");
        assert_eq!(ReadReq::decode(&bytes), Some(req));
    }

    /// An answer buffer's name as a request carries it: `name`, and the buffers after it.
    fn bufs(name: u32, more: &[u16]) -> ReturnBy {
        ReturnBy::AnswerBuf(AnswerBuf::from_wire(name, more).expect("as many as the name says"))
    }

    /// The name bits that count further buffers (`AnswerBuf`'s `MORE`).
    const MORE: u32 = 3 << 28;

    #[test]
    fn every_form_round_trips() {
        round_trip(ReadReq { op_id: 0, len: 32, by: ReturnBy::Reply });
        round_trip(ReadReq { op_id: 0, len: u64::from(u32::MAX), by: bufs(u32::MAX, &[1, 2, u16::MAX]) });
        round_trip(ReadReq { op_id: 0, len: 1 << 17, by: bufs(1 << 31 | 1 << 28, &[9]) });
        round_trip(ReadReq { op_id: 0, len: 1 << 17, by: bufs(1 << 31 | 2 << 28 | 5, &[0, 7]) });
        round_trip(ReadReq { op_id: 0, len: 1 << 32, by: bufs(3, &[]) });
        round_trip(ReadReq { op_id: 7, len: 100, by: ReturnBy::Reply });
        round_trip(ReadReq { op_id: 7, len: 100, by: bufs(!MORE, &[]) });
        round_trip(ReadReq { op_id: 7, len: 1 << 17, by: bufs(u32::MAX, &[3, 2, 1]) });
        round_trip(ReadReq { op_id: 0, len: 1 << 33, by: bufs(1 << 31 | 1 << 28, &[1]) });
        round_trip(ReadReq { op_id: 7, len: 1 << 20, by: ReturnBy::Pushed });
        let ranges = vec![RemoteIov { addr: 0x1000, len: 60 }, RemoteIov { addr: 0x9000, len: 40 }];
        round_trip(ReadReq { op_id: u64::MAX, len: 100, by: ReturnBy::WriteBack(ranges) });
        let most = vec![RemoteIov { addr: 1, len: 1 }; WRITE_BACK_RANGES_MAX];
        round_trip(ReadReq { op_id: 1, len: WRITE_BACK_RANGES_MAX as u64, by: ReturnBy::WriteBack(most) });
    }

    #[test]
    fn answered_requests_encode_as_the_general_form_in_one_line() {
        let one = |name| AnswerBuf::from_wire(name, &[]);
        let spanning = AnswerBuf::from_wire(1 << 31 | 3 << 28, &[4, 5, 6]);
        for (len, buf) in [(0, None), (8, None), (32, None), (33, one(0)), (16384, one(!MORE)), (1 << 17, spanning)] {
            let mut out = [0xEEu8; SHORT_MAX];
            let n = ReadReq::encode_answered(len, buf, &mut out);
            let by = buf.map_or(ReturnBy::Reply, ReturnBy::AnswerBuf);
            assert_eq!(&out[..n], &ReadReq { op_id: 0, len, by }.encode()[..], "len {len} buf {buf:?}");
            // The command's first line holds its header and 8 payload bytes: every request
            // but one that spans buffers (a read of more than one SAR buffer) fits it.
            if buf.is_none_or(|b| b.more().is_empty()) {
                assert!(n <= smr_core::cmd::FIRST_LINE_PAYLOAD, "{n} bytes");
            }
        }
    }

    #[test]
    fn a_long_form_that_has_a_short_one_is_refused() {
        for by in [ReturnBy::Reply, bufs(5, &[])] {
            let mut long = ReadReq { op_id: 1, len: 100, by }.encode().to_vec();
            assert!(long.len() >= HEADER, "the long form");
            long[..8].copy_from_slice(&0u64.to_le_bytes());
            assert_eq!(ReadReq::decode(&long), None, "op id 0 in the long form");
        }
    }

    #[test]
    fn malformed_requests_are_refused() {
        let good = ReadReq { op_id: 1, len: 100, by: ReturnBy::WriteBack(vec![RemoteIov { addr: 0x1000, len: 100 }]) };
        let bytes = good.encode();
        let mut cases: Vec<Vec<u8>> = Vec::new();
        let mut short = bytes.to_vec();
        short.truncate(40);
        cases.push(short);
        let mut wrong_len = bytes.to_vec();
        wrong_len[8] = 99; // the ranges add up to 100
        cases.push(wrong_len);
        let mut zero = bytes.to_vec();
        zero[24..32].copy_from_slice(&0u64.to_le_bytes());
        cases.push(zero[..32].to_vec());
        let mut too_many = bytes.to_vec();
        too_many[24..32].copy_from_slice(&2u64.to_le_bytes());
        cases.push(too_many);
        let mut marker = bytes.to_vec();
        marker[16..24].copy_from_slice(&5u64.to_le_bytes());
        cases.push(marker);
        let mut overflow = ReadReq {
            op_id: 1,
            len: 1,
            by: ReturnBy::WriteBack(vec![RemoteIov { addr: 0, len: u64::MAX }, RemoteIov { addr: 0, len: 2 }]),
        }
        .encode()
        .to_vec();
        cases.push(overflow.clone());
        overflow.truncate(20);
        cases.push(overflow);
        let mut big_name = ReadReq { op_id: 1, len: 100, by: bufs(0, &[]) }.encode().to_vec();
        big_name[16..24].copy_from_slice(&(1u64 << 34).to_le_bytes());
        cases.push(big_name.clone());
        // A long form whose further buffers are not as many as the name says.
        big_name[16..24].copy_from_slice(&(1u64 << 28).to_le_bytes());
        cases.push(big_name.clone());
        big_name.extend_from_slice(&[1, 0, 2, 0]);
        cases.push(big_name);
        // Short forms whose further buffers are not as many as the name says, or odd bytes.
        let short = |name: u32, more: &[u8]| [&100u32.to_le_bytes()[..], &name.to_le_bytes(), more].concat();
        cases.push(short(1 << 31 | 2 << 28, &[1, 0]));
        cases.push(short(1 << 31 | 1 << 28, &[]));
        cases.push(short(1 << 31, &[1, 0]));
        cases.push(short(1 << 31 | 1 << 28, &[1]));
        cases.push(short(1 << 31 | 2 << 28, &[1, 0, 2, 0, 3, 0]));
        for (i, case) in cases.iter().enumerate() {
            assert_eq!(ReadReq::decode(case), None, "case {i}");
        }
    }

    /// Any bytes a peer may send: decoded or refused, never a panic, and what decodes encodes
    /// back to the same bytes.
    #[test]
    fn arbitrary_payloads_decode_or_are_refused() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut decoded = 0;
        for round in 0..20_000 {
            let len = [4, 8, 10, 12, 14, 16, 24, 26, 30, 48, 64, 224, 232, (next() % 300) as usize][round % 14];
            let mut p: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            if round % 3 == 0 && len >= 32 {
                // Often well-formed headers, so the range checks are reached.
                p[16..24].copy_from_slice(&WRITE_BACK.to_le_bytes());
                p[24..32].copy_from_slice(&(((len as u64).saturating_sub(32)) / 16).to_le_bytes());
            }
            if let Some(req) = ReadReq::decode(&p) {
                decoded += 1;
                assert!(ReadReq::plausible_len(p.len() as u64));
                assert_eq!(req.encode().as_slice(), &p[..]);
            }
        }
        assert!(decoded > 1000, "only {decoded} payloads decoded: the generator misses the valid forms");
    }
}
