//! Atomics (fi_atomic(3)): every op x datatype that fi_atomicvalid, fi_fetch_atomicvalid and
//! fi_compare_atomicvalid report valid, with count 1 and count > 1, in both MR modes; the
//! results are computed here (integers, float, double, float/double complex; long double only
//! for READ/WRITE/CSWAP, compared bitwise on its 10 significant bytes) and checked at the target
//! (every slot, including elements past `count` and slots nobody touched) and, for fetch and
//! compare, in the fetched values. The combinations the valid calls reject must be rejected by
//! the calls too. Four processes fetch-add one word of rank 0 (rank 0 too, through its own
//! address): the final value and the set of fetched values are checked. Atomics on 4- and 8-byte
//! integers at odd byte offsets change exactly their bytes and fetch exactly their old values.

use super::rma_util::{
    self as u, dt_size, must, payload, AKind, MrInfo, Peer, Spec, Target, ATOMIC, BASIC, MSG, REMOTE_READ,
    REMOTE_WRITE, SCALABLE,
};
use super::{scn, seed, Scenario};
use crate::fabric::{self, ffi};
use crate::harness::{Rank, TResult, TestErr};
use crate::{bail, ensure};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

pub fn scenarios() -> Vec<Scenario> {
    vec![
        scn(
            "atomic/scalable/matrix",
            2,
            60,
            matrix::<SCALABLE>,
            "every valid op x datatype (base, fetch, compare), count 1 and > 1: target values and fetched values",
        ),
        scn(
            "atomic/basic/matrix",
            2,
            60,
            matrix::<BASIC>,
            "every valid op x datatype (base, fetch, compare), count 1 and > 1: target values and fetched values",
        ),
        scn(
            "atomic/invalid_rejected",
            2,
            40,
            invalid_rejected,
            "op x datatype combinations the valid calls reject are rejected by the calls (-FI_EOPNOTSUPP/-FI_EINVAL)",
        ),
        scn(
            "atomic/fetch_completion_levels",
            2,
            40,
            fetch_completion_levels,
            "fi_fetch_atomicmsg(FI_SUM) of 1, 4 and 16 u64 with FI_TRANSMIT_COMPLETE, FI_INJECT_COMPLETE or neither: complete only with the old values in the result",
        ),
        scn(
            "atomic/scalable/unaligned",
            2,
            40,
            unaligned::<SCALABLE>,
            "fetch, compare and base atomics on 4- and 8-byte integers at odd byte offsets: fetched values, target bytes (neighbours untouched)",
        ),
        scn(
            "atomic/basic/unaligned",
            2,
            40,
            unaligned::<BASIC>,
            "fetch, compare and base atomics on 4- and 8-byte integers at odd byte offsets: fetched values, target bytes (neighbours untouched)",
        ),
        scn(
            "atomic/fetch_add_4procs",
            4,
            60,
            fetch_add_concurrent,
            "4 processes (rank 0 on itself) fetch-add one u64 of rank 0: final value, fetched values distinct and complete",
        ),
    ]
}

const TARGET: usize = 1;
const NDT: usize = 16;
const NOP: usize = 19;
/// Elements per slot; count > 1 uses min(valid count, ELEMS).
const ELEMS: usize = 4;
/// Bytes per slot (ELEMS of the largest datatype, 32 B).
const SLOT: usize = ELEMS * 32;
const KINDS: [AKind; 3] = [AKind::Base, AKind::Fetch, AKind::Compare];
const NSLOTS: usize = KINDS.len() * NDT * NOP * 2;

const DT_NAMES: [&str; NDT] = [
    "INT8",
    "UINT8",
    "INT16",
    "UINT16",
    "INT32",
    "UINT32",
    "INT64",
    "UINT64",
    "FLOAT",
    "DOUBLE",
    "FLOAT_COMPLEX",
    "DOUBLE_COMPLEX",
    "LONG_DOUBLE",
    "LONG_DOUBLE_COMPLEX",
    "INT128",
    "UINT128",
];
const OP_NAMES: [&str; NOP] = [
    "MIN",
    "MAX",
    "SUM",
    "PROD",
    "LOR",
    "LAND",
    "BOR",
    "BAND",
    "LXOR",
    "BXOR",
    "ATOMIC_READ",
    "ATOMIC_WRITE",
    "CSWAP",
    "CSWAP_NE",
    "CSWAP_LE",
    "CSWAP_LT",
    "CSWAP_GE",
    "CSWAP_GT",
    "MSWAP",
];

fn slot(kind: usize, dt: usize, op: usize, multi: bool) -> usize {
    ((kind * NDT + dt) * NOP + op) * 2 + multi as usize
}

fn case_name(kind: AKind, dt: usize, op: usize, count: usize) -> String {
    format!("{}({}, {}, count {count})", kind.call(), DT_NAMES[dt], OP_NAMES[op])
}

// ---------------------------------------------------------------------------------------------
// Values and the expected results

#[derive(Clone, Copy, Debug, PartialEq)]
enum Class {
    Int {
        bytes: usize,
        signed: bool,
    },
    F32,
    F64,
    C32,
    C64,
    /// x87 80-bit long double (in 16 bytes), alone or as a complex pair.
    Ld,
    Ldc,
}

fn class(dt: usize) -> Class {
    let int = |bytes, signed| Class::Int { bytes, signed };
    match dt as u32 {
        ffi::FI_INT8 => int(1, true),
        ffi::FI_UINT8 => int(1, false),
        ffi::FI_INT16 => int(2, true),
        ffi::FI_UINT16 => int(2, false),
        ffi::FI_INT32 => int(4, true),
        ffi::FI_UINT32 => int(4, false),
        ffi::FI_INT64 => int(8, true),
        ffi::FI_UINT64 => int(8, false),
        ffi::FI_FLOAT => Class::F32,
        ffi::FI_DOUBLE => Class::F64,
        ffi::FI_FLOAT_COMPLEX => Class::C32,
        ffi::FI_DOUBLE_COMPLEX => Class::C64,
        ffi::FI_LONG_DOUBLE => Class::Ld,
        ffi::FI_LONG_DOUBLE_COMPLEX => Class::Ldc,
        ffi::FI_INT128 => int(16, true),
        _ => int(16, false),
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Num {
    I(i128),
    R(f64),
    C(f64, f64),
    /// Long double (complex) bytes.
    Raw([u8; 32]),
}

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A small integer in -5..=5 for (slot, element, role).
fn small(s: usize, i: usize, role: u64) -> i64 {
    (mix(seed(s as u64, i as u64, role)) % 11) as i64 - 5
}

/// x87 extended precision of an integer, little endian, padded to 16 bytes.
fn ld_bytes(v: i64) -> [u8; 16] {
    let mut b = [0u8; 16];
    if v == 0 {
        return b;
    }
    let m = v.unsigned_abs();
    let e = 63 - m.leading_zeros();
    let mant = m << (63 - e);
    let exp = (16383 + e) as u16 | if v < 0 { 0x8000 } else { 0 };
    b[..8].copy_from_slice(&mant.to_le_bytes());
    b[8..10].copy_from_slice(&exp.to_le_bytes());
    b
}

fn num(dt: usize, re: i64, im: i64) -> Num {
    match class(dt) {
        Class::Int { signed, .. } => Num::I(if signed { re } else { re + 6 } as i128),
        Class::F32 | Class::F64 => Num::R(re as f64 / 2.0),
        Class::C32 | Class::C64 => Num::C(re as f64 / 2.0, im as f64 / 2.0),
        Class::Ld => {
            let mut b = [0u8; 32];
            b[..16].copy_from_slice(&ld_bytes(re));
            Num::Raw(b)
        }
        Class::Ldc => {
            let mut b = [0u8; 32];
            b[..16].copy_from_slice(&ld_bytes(re));
            b[16..].copy_from_slice(&ld_bytes(im));
            Num::Raw(b)
        }
    }
}

fn zero(dt: usize) -> Num {
    match class(dt) {
        Class::Int { .. } => Num::I(0),
        Class::F32 | Class::F64 => Num::R(0.0),
        Class::C32 | Class::C64 => Num::C(0.0, 0.0),
        _ => Num::Raw([0; 32]),
    }
}

fn is_logical(op: usize) -> bool {
    matches!(op as u32, ffi::FI_LOR | ffi::FI_LAND | ffi::FI_LXOR)
}

/// Initial target value, operand and compare value of element `i` of slot `s`.
fn values(dt: usize, op: usize, s: usize, i: usize) -> (Num, Num, Num) {
    let (t, b) = (small(s, i, 1), small(s, i, 2));
    let (ti, bi) = (small(s, i, 3), small(s, i, 4));
    // Compare: equal to, below or above the target value.
    let delta = [0, -1, 1][(s + i) % 3];
    let c = if op as u32 == ffi::FI_MSWAP { num(dt, small(s, i, 5), 0) } else { num(dt, t + delta, ti) };
    let (mut tv, mut bv) = (num(dt, t, ti), num(dt, b, bi));
    if is_logical(op) {
        // Logical ops need zeros on either side.
        let z = (s + i) % 4;
        if z < 2 {
            tv = zero(dt);
        }
        if z.is_multiple_of(2) {
            bv = zero(dt);
        }
    }
    (tv, bv, c)
}

fn encode(dt: usize, v: Num) -> Vec<u8> {
    let size = dt_size(dt as u32);
    match (class(dt), v) {
        (Class::Int { bytes, .. }, Num::I(x)) => x.to_le_bytes()[..bytes].to_vec(),
        (Class::F32, Num::R(x)) => (x as f32).to_le_bytes().to_vec(),
        (Class::F64, Num::R(x)) => x.to_le_bytes().to_vec(),
        (Class::C32, Num::C(a, b)) => [(a as f32).to_le_bytes(), (b as f32).to_le_bytes()].concat(),
        (Class::C64, Num::C(a, b)) => [a.to_le_bytes(), b.to_le_bytes()].concat(),
        (_, Num::Raw(b)) => b[..size].to_vec(),
        (c, v) => panic!("encode {c:?} {v:?}"),
    }
}

fn decode(dt: usize, b: &[u8]) -> Num {
    match class(dt) {
        Class::Int { bytes, signed } => {
            let fill = if signed && b[bytes - 1] & 0x80 != 0 { 0xFF } else { 0 };
            let mut x = [fill; 16];
            x[..bytes].copy_from_slice(&b[..bytes]);
            Num::I(i128::from_le_bytes(x))
        }
        Class::F32 => Num::R(f32::from_le_bytes(b[..4].try_into().expect("4")) as f64),
        Class::F64 => Num::R(f64::from_le_bytes(b[..8].try_into().expect("8"))),
        Class::C32 => Num::C(
            f32::from_le_bytes(b[..4].try_into().expect("4")) as f64,
            f32::from_le_bytes(b[4..8].try_into().expect("4")) as f64,
        ),
        Class::C64 => Num::C(
            f64::from_le_bytes(b[..8].try_into().expect("8")),
            f64::from_le_bytes(b[8..16].try_into().expect("8")),
        ),
        Class::Ld | Class::Ldc => {
            let mut x = [0u8; 32];
            x[..b.len().min(32)].copy_from_slice(&b[..b.len().min(32)]);
            Num::Raw(x)
        }
    }
}

/// Are two encoded elements equal (long double: its 10 significant bytes per part)?
fn same(dt: usize, a: &[u8], b: &[u8]) -> bool {
    match class(dt) {
        Class::Ld => a[..10] == b[..10],
        Class::Ldc => a[..10] == b[..10] && a[16..26] == b[16..26],
        _ => a == b,
    }
}

/// The new target value of one element, `None` where this suite does not model the op.
fn apply(dt: usize, op: usize, t: Num, b: Num, c: Num) -> Option<Num> {
    let op = op as u32;
    match (t, b, c) {
        (Num::I(t), Num::I(b), Num::I(c)) => {
            let r = match op {
                ffi::FI_MIN => t.min(b),
                ffi::FI_MAX => t.max(b),
                ffi::FI_SUM => t.wrapping_add(b),
                ffi::FI_PROD => t.wrapping_mul(b),
                ffi::FI_LOR => ((t != 0) || (b != 0)) as i128,
                ffi::FI_LAND => ((t != 0) && (b != 0)) as i128,
                ffi::FI_LXOR => ((t != 0) != (b != 0)) as i128,
                ffi::FI_BOR => t | b,
                ffi::FI_BAND => t & b,
                ffi::FI_BXOR => t ^ b,
                ffi::FI_ATOMIC_READ => t,
                ffi::FI_ATOMIC_WRITE => b,
                ffi::FI_MSWAP => (b & c) | (t & !c),
                _ => swap(op, c.partial_cmp(&t)?, t, b)?,
            };
            // Wrap to the datatype's width.
            let bytes = dt_size(dt as u32);
            Some(decode(dt, &r.to_le_bytes()[..bytes]))
        }
        (Num::R(t), Num::R(b), Num::R(c)) => Some(Num::R(match op {
            ffi::FI_MIN => {
                if b < t {
                    b
                } else {
                    t
                }
            }
            ffi::FI_MAX => {
                if b > t {
                    b
                } else {
                    t
                }
            }
            ffi::FI_SUM => t + b,
            ffi::FI_PROD => t * b,
            ffi::FI_LOR => ((t != 0.0) || (b != 0.0)) as i32 as f64,
            ffi::FI_LAND => ((t != 0.0) && (b != 0.0)) as i32 as f64,
            ffi::FI_LXOR => ((t != 0.0) != (b != 0.0)) as i32 as f64,
            ffi::FI_ATOMIC_READ => t,
            ffi::FI_ATOMIC_WRITE => b,
            ffi::FI_CSWAP..=ffi::FI_CSWAP_GT => swap(op, c.partial_cmp(&t)?, t, b)?,
            _ => return None,
        })),
        (Num::C(tr, ti), Num::C(br, bi), Num::C(cr, ci)) => {
            let nz = |r: f64, i: f64| r != 0.0 || i != 0.0;
            let flag = |x: bool| Num::C(x as i32 as f64, 0.0);
            Some(match op {
                ffi::FI_SUM => Num::C(tr + br, ti + bi),
                ffi::FI_PROD => Num::C(tr * br - ti * bi, tr * bi + ti * br),
                ffi::FI_LOR => flag(nz(tr, ti) || nz(br, bi)),
                ffi::FI_LAND => flag(nz(tr, ti) && nz(br, bi)),
                ffi::FI_LXOR => flag(nz(tr, ti) != nz(br, bi)),
                ffi::FI_ATOMIC_READ => t,
                ffi::FI_ATOMIC_WRITE => b,
                ffi::FI_CSWAP => {
                    if (cr, ci) == (tr, ti) {
                        b
                    } else {
                        t
                    }
                }
                ffi::FI_CSWAP_NE => {
                    if (cr, ci) != (tr, ti) {
                        b
                    } else {
                        t
                    }
                }
                _ => return None,
            })
        }
        (Num::Raw(tb), Num::Raw(_), Num::Raw(cb)) if cfg!(target_arch = "x86_64") => match op {
            ffi::FI_ATOMIC_READ => Some(t),
            ffi::FI_ATOMIC_WRITE => Some(b),
            ffi::FI_CSWAP => {
                let n = dt_size(dt as u32);
                Some(if same(dt, &cb[..n], &tb[..n]) { b } else { t })
            }
            _ => None,
        },
        _ => None,
    }
}

/// Compare-and-swap family: `compare OP target` decides whether the operand replaces it.
fn swap<T>(op: u32, ord: std::cmp::Ordering, t: T, b: T) -> Option<T> {
    use std::cmp::Ordering::*;
    let hit = match op {
        ffi::FI_CSWAP => ord == Equal,
        ffi::FI_CSWAP_NE => ord != Equal,
        ffi::FI_CSWAP_LE => ord != Greater,
        ffi::FI_CSWAP_LT => ord == Less,
        ffi::FI_CSWAP_GE => ord != Less,
        ffi::FI_CSWAP_GT => ord == Greater,
        _ => return None,
    };
    Some(if hit { b } else { t })
}

/// Initial content of slot `s` (ELEMS elements of `dt`, the rest zero).
fn slot_init(kind: usize, dt: usize, op: usize, multi: bool) -> Vec<u8> {
    let s = slot(kind, dt, op, multi);
    let mut v = Vec::with_capacity(SLOT);
    for i in 0..ELEMS {
        v.extend(encode(dt, values(dt, op, s, i).0));
    }
    v.resize(SLOT, 0);
    v
}

// ---------------------------------------------------------------------------------------------

fn open(r: &mut Rank, mode: u8) -> TResult<Peer> {
    let mut p = Peer::open(r, &Spec::new(MSG | ATOMIC, mode))?;
    r.pmi.step(&format!("note: {} mode, getinfo mr_mode {:#x}", u::mode_name(mode), p.mr_mode));
    p.exchange(r)?;
    Ok(p)
}

fn report(what: &str, bad: &[String]) -> TResult {
    if bad.is_empty() {
        return Ok(());
    }
    let shown: Vec<&str> = bad.iter().take(8).map(String::as_str).collect();
    bail!("{what}: {} failures: {}{}", bad.len(), shown.join("; "), if bad.len() > 8 { "; ..." } else { "" })
}

fn matrix<const M: u8>(r: &mut Rank) -> TResult {
    let mut p = open(r, M)?;
    let access = REMOTE_READ | REMOTE_WRITE;
    if r.rank == TARGET {
        let reg = p.alloc(NSLOTS * SLOT);
        for ki in 0..KINDS.len() {
            for dt in 0..NDT {
                for op in 0..NOP {
                    for multi in [false, true] {
                        p.region(reg).write(slot(ki, dt, op, multi) * SLOT, &slot_init(ki, dt, op, multi));
                    }
                }
            }
        }
        let (_, mi) = p.reg(reg, 0, NSLOTS * SLOT, access, 0xA70, 0)?;
        let rid = p.recv(NSLOTS)?;
        p.share_mrs(r, &[mi])?;
        // The initiator sends the count it used per slot once every atomic has completed; the
        // target's receive completion makes their results visible (fi_atomic(3) Completions).
        let d = p.wait_ok(rid)?;
        ensure!(d.len == NSLOTS, "the initiator's summary has {} bytes, expected {NSLOTS}", d.len);
        let counts = d.bufs[0][..NSLOTS].to_vec();
        let mem = p.region(reg).read(0, NSLOTS * SLOT);
        let mut bad = Vec::new();
        let mut unmodeled = 0;
        for (ki, &kind) in KINDS.iter().enumerate() {
            for dt in 0..NDT {
                let size = dt_size(dt as u32);
                for op in 0..NOP {
                    for multi in [false, true] {
                        let s = slot(ki, dt, op, multi);
                        let n = counts[s] as usize;
                        let got = &mem[s * SLOT..(s + 1) * SLOT];
                        let init = slot_init(ki, dt, op, multi);
                        let name = case_name(kind, dt, op, n);
                        for i in 0..ELEMS {
                            let e = i * size..(i + 1) * size;
                            let want = if i < n {
                                let (t, b, c) = values(dt, op, s, i);
                                match apply(dt, op, t, b, c) {
                                    Some(v) => encode(dt, v),
                                    None => {
                                        unmodeled += 1;
                                        continue;
                                    }
                                }
                            } else {
                                init[e.clone()].to_vec()
                            };
                            if !same(dt, &got[e.clone()], &want) {
                                let who = if i < n { "element" } else { "untouched element" };
                                bad.push(format!(
                                    "{name}: target {who} {i} is {:02x?}, want {:02x?}",
                                    &got[e.clone()],
                                    want
                                ));
                            }
                        }
                        if got[ELEMS * size..] != init[ELEMS * size..] {
                            bad.push(format!("{name}: bytes past the slot's elements changed"));
                        }
                    }
                }
            }
        }
        r.pmi.step(&format!("note: {unmodeled} target elements not checked (ops not modelled for the datatype)"));
        report("target memory after the atomics", &bad)?;
        p.barrier(r)?;
    } else {
        let all = p.share_mrs(r, &[])?;
        let m: MrInfo = *all[TARGET].first().ok_or_else(|| TestErr::Fail("no MR from the target".into()))?;
        let t = Target { dest: p.addrs[TARGET], addr: m.addr, key: m.key };
        let mut counts = vec![0u8; NSLOTS];
        let mut bad = Vec::new();
        let (mut valid, mut ops) = (0, 0);
        for (ki, &kind) in KINDS.iter().enumerate() {
            for dt in 0..NDT {
                let size = dt_size(dt as u32);
                for op in 0..NOP {
                    let (ret, cnt) = kind.valid(p.ep(), dt as u32, op as u32);
                    if ret != 0 {
                        continue;
                    }
                    valid += 1;
                    if cnt == 0 {
                        bad.push(format!("{}: the valid query gave count 0", case_name(kind, dt, op, 0)));
                        continue;
                    }
                    for multi in [false, true] {
                        let n = if multi { cnt.min(ELEMS) } else { 1 };
                        if multi && n < 2 {
                            continue;
                        }
                        let s = slot(ki, dt, op, multi);
                        let name = case_name(kind, dt, op, n);
                        let (mut operand, mut compare) = (Vec::new(), Vec::new());
                        for i in 0..n {
                            let (_, b, c) = values(dt, op, s, i);
                            operand.extend(encode(dt, b));
                            compare.extend(encode(dt, c));
                        }
                        let res = p.atomic(&name, kind, dt as u32, op as u32, n, operand, compare, t.at(s * SLOT))?;
                        let id = match res {
                            Ok(id) => id,
                            Err(code) => {
                                bad.push(format!(
                                    "{name}: returned {} though the valid call accepts it",
                                    fabric::errname(code)
                                ));
                                continue;
                            }
                        };
                        ops += 1;
                        let d = match p.wait(id)?.ok() {
                            Ok(d) => d,
                            Err(TestErr::Fail(m)) => {
                                bad.push(m);
                                continue;
                            }
                            Err(e) => return Err(e),
                        };
                        counts[s] = n as u8;
                        if let Err(TestErr::Fail(m)) = d.flags_have(ATOMIC, "FI_ATOMIC") {
                            bad.push(m);
                        }
                        if kind != AKind::Base {
                            let fetched = payload(&name, &d.bufs[2], n * size)?;
                            for i in 0..n {
                                let want = encode(dt, values(dt, op, s, i).0);
                                let got = &fetched[i * size..(i + 1) * size];
                                if !same(dt, got, &want) {
                                    bad.push(format!("{name}: fetched element {i} is {got:02x?}, want {want:02x?}"));
                                }
                            }
                        }
                    }
                }
            }
        }
        r.pmi.step(&format!("note: {valid} valid (call, datatype, op) combinations, {ops} atomics"));
        for kind in KINDS {
            let per_dt: Vec<String> = (0..NDT)
                .map(|dt| {
                    let mask = (0..NOP).filter(|&op| kind.valid(p.ep(), dt as u32, op as u32).0 == 0);
                    format!("{}:{:#x}", DT_NAMES[dt], mask.fold(0u32, |m, op| m | 1 << op))
                })
                .collect();
            r.pmi.step(&format!("note: {} valid op bits by datatype: {}", kind.call(), per_dt.join(" ")));
        }
        ensure!(valid > 0, "no atomic operation is valid");
        let id = p.send(counts, p.addrs[TARGET])?;
        p.wait_ok(id)?;
        report("atomics at the initiator", &bad)?;
        p.barrier(r)?;
    }
    p.barrier(r)
}

fn invalid_rejected(r: &mut Rank) -> TResult {
    let mut p = open(r, BASIC)?;
    if r.rank == TARGET {
        let reg = p.alloc(NSLOTS * SLOT);
        let (_, mi) = p.reg(reg, 0, NSLOTS * SLOT, REMOTE_READ | REMOTE_WRITE, 0xA71, 0)?;
        p.share_mrs(r, &[mi])?;
        p.barrier(r)?;
        p.progress_for(Duration::from_millis(50))?;
        let mem = p.region(reg).read(0, NSLOTS * SLOT);
        if let Some(i) = mem.iter().position(|&b| b != 0) {
            bail!("a rejected atomic changed the target (slot {}, byte {})", i / SLOT, i % SLOT);
        }
    } else {
        let all = p.share_mrs(r, &[])?;
        let m = *all[TARGET].first().ok_or_else(|| TestErr::Fail("no MR from the target".into()))?;
        let t = Target { dest: p.addrs[TARGET], addr: m.addr, key: m.key };
        let (eop, einval, enosys) = (fabric::EOPNOTSUPP, -(ffi::FI_EINVAL as i32), fabric::ENOSYS);
        let mut bad = Vec::new();
        let mut accepted = Vec::new();
        let mut tried = 0;
        'all: for (ki, &kind) in KINDS.iter().enumerate() {
            for dt in 0..NDT {
                for op in 0..NOP {
                    let (ret, _) = kind.valid(p.ep(), dt as u32, op as u32);
                    if ret == 0 {
                        continue;
                    }
                    let name = case_name(kind, dt, op, 1);
                    let size = dt_size(dt as u32);
                    tried += 1;
                    let s = slot(ki, dt, op, false);
                    let res =
                        p.atomic(&name, kind, dt as u32, op as u32, 1, vec![0; size], vec![0; size], t.at(s * SLOT))?;
                    match res {
                        Err(c) if c == eop || c == einval || (c == enosys && ret == enosys) => {}
                        Err(c) => bad.push(format!("{name}: returned {}", fabric::errname(c))),
                        Ok(id) => {
                            accepted.push((name, id));
                            // An accepted invalid op may take the target down: stop early.
                            if accepted.len() >= 3 {
                                break 'all;
                            }
                        }
                    }
                }
            }
        }
        r.pmi.step(&format!("note: {tried} rejected combinations tried"));
        for (name, id) in accepted {
            let fate = match p.wait_for(id, Duration::from_secs(1))? {
                Some(d) if d.err != 0 => format!("error completion {}", fabric::errname(-d.err)),
                Some(_) => "completed successfully".into(),
                None => "no completion within 1 s".into(),
            };
            bad.push(format!(
                "{name}: accepted though the valid call rejects it (fi_atomic(3): -FI_EOPNOTSUPP), then {fate}"
            ));
        }
        report("invalid atomics", &bad)?;
        p.barrier(r)?;
    }
    p.barrier(r)
}

/// A fetching atomic completes when its old values are in the result buffer, whatever
/// completion level it asks for (a level says when a write's buffer may be reused; a fetch has
/// nothing to report before its answer). Counts of 1 and 4 u64 fit rshm's answer entry, 16 take
/// a reply. Every call adds to its own slot, whose values the initiator knows, so each fetched
/// element is checked exactly; the target checks the sums.
fn fetch_completion_levels(r: &mut Rank) -> TResult {
    const COUNTS: [usize; 3] = [1, 4, 16];
    const LEVELS: [u64; 3] = [u::COMPLETION, u::COMPLETION | u::TRANSMIT_COMPLETE, u::COMPLETION | u::INJECT_COMPLETE];
    const WORDS: usize = 16;
    let slots = COUNTS.len() * LEVELS.len();
    let init = |s: usize, i: usize| (s * 1000 + i * 7 + 1) as u64;
    let add = |s: usize, i: usize| (s * 100 + i + 3) as u64;
    let mut p = open(r, BASIC)?;
    if r.rank == TARGET {
        let reg = p.alloc(slots * WORDS * 8);
        let words: Vec<u8> = (0..slots).flat_map(|s| (0..WORDS).flat_map(move |i| init(s, i).to_ne_bytes())).collect();
        p.region(reg).write(0, &words);
        let (_, mi) = p.reg(reg, 0, slots * WORDS * 8, REMOTE_READ | REMOTE_WRITE, 0xFE7C, 0)?;
        p.share_mrs(r, &[mi])?;
        p.barrier(r)?;
        let mem = p.region(reg).read(0, slots * WORDS * 8);
        let mut bad = Vec::new();
        for s in 0..slots {
            let n = COUNTS[s % COUNTS.len()];
            for i in 0..WORDS {
                let got = u64::from_ne_bytes(mem[(s * WORDS + i) * 8..][..8].try_into().expect("8 bytes"));
                let want = if i < n { init(s, i) + add(s, i) } else { init(s, i) };
                if got != want {
                    bad.push(format!("slot {s} word {i} is {got}, want {want}"));
                }
            }
        }
        report("target memory after the fetch-adds", &bad)?;
    } else {
        let all = p.share_mrs(r, &[])?;
        let m = *all[TARGET].first().ok_or_else(|| TestErr::Fail("no MR from the target".into()))?;
        let mut bad = Vec::new();
        for s in 0..slots {
            let (n, level) = (COUNTS[s % COUNTS.len()], LEVELS[s / COUNTS.len()]);
            let what = format!("fi_fetch_atomicmsg(UINT64, SUM, count {n}, flags {level:#x})");
            r.pmi.step(&what);
            let t = Target { dest: p.addrs[TARGET], addr: m.addr + (s * WORDS * 8) as u64, key: m.key };
            let operand: Vec<u8> = (0..n).flat_map(|i| add(s, i).to_ne_bytes()).collect();
            let id = must(&what, p.atomicmsg(&what, AKind::Fetch, ffi::FI_UINT64, ffi::FI_SUM, n, operand, t, level)?)?;
            let d = p.wait_ok(id)?;
            let old = payload(&what, &d.bufs[1], n * 8)?;
            for i in 0..n {
                let got = u64::from_ne_bytes(old[i * 8..][..8].try_into().expect("8 bytes"));
                if got != init(s, i) {
                    bad.push(format!("{what}: fetched element {i} is {got}, want {}", init(s, i)));
                }
            }
        }
        p.barrier(r)?;
        report("fetched values", &bad)?;
    }
    p.barrier(r)
}

/// One atomic of `unaligned`: on the element at byte `off` of the target's buffer.
struct Unaligned {
    kind: AKind,
    dt: ffi::fi_datatype,
    op: ffi::fi_op,
    off: usize,
    operand: u64,
    compare: u64,
}

/// Elements at odd offsets, none overlapping but the last, which reads back the first; the
/// bytes between them (0, 9-12, 17-20, 29, 34, 39-42, 51-63) must stay as they were.
const UNALIGNED: [Unaligned; 7] = [
    Unaligned {
        kind: AKind::Fetch,
        dt: ffi::FI_UINT64,
        op: ffi::FI_SUM,
        off: 1,
        operand: 0x0102_0304_0506_0708,
        compare: 0,
    },
    Unaligned { kind: AKind::Fetch, dt: ffi::FI_UINT32, op: ffi::FI_SUM, off: 13, operand: 0xF0F0_0001, compare: 0 },
    // Compares with the element's old value (`OLD_VALUE`), so it swaps.
    Unaligned {
        kind: AKind::Compare,
        dt: ffi::FI_UINT64,
        op: ffi::FI_CSWAP,
        off: 21,
        operand: 0x1122_3344_5566_7788,
        compare: OLD_VALUE,
    },
    Unaligned { kind: AKind::Compare, dt: ffi::FI_INT32, op: ffi::FI_CSWAP, off: 30, operand: 0x7777_7777, compare: 0 },
    Unaligned { kind: AKind::Base, dt: ffi::FI_INT32, op: ffi::FI_BXOR, off: 35, operand: 0x5A5A_5A5A, compare: 0 },
    Unaligned {
        kind: AKind::Fetch,
        dt: ffi::FI_INT64,
        op: ffi::FI_ATOMIC_WRITE,
        off: 43,
        operand: 0x0F0E_0D0C_0B0A_0908,
        compare: 0,
    },
    Unaligned { kind: AKind::Fetch, dt: ffi::FI_UINT64, op: ffi::FI_ATOMIC_READ, off: 1, operand: 0, compare: 0 },
];
const UNALIGNED_LEN: usize = 64;
/// An `Unaligned::compare` that stands for the element's value before the atomic.
const OLD_VALUE: u64 = u64::MAX;

/// The target's buffer before `UNALIGNED`.
fn unaligned_init() -> Vec<u8> {
    (0..UNALIGNED_LEN).map(|i| (i * 37 + 11) as u8).collect()
}

/// What `UNALIGNED` does, one after the other, to the target's initial bytes: the operands as
/// sent (the swapping compare filled in), the values each returns, and the bytes at the end.
fn unaligned_model() -> (Vec<(u64, u64)>, Vec<u64>, Vec<u8>) {
    let mut mem = unaligned_init();
    let (mut sent, mut old_values) = (Vec::new(), Vec::new());
    for s in &UNALIGNED {
        let w = dt_size(s.dt);
        let mut le = [0u8; 8];
        le[..w].copy_from_slice(&mem[s.off..s.off + w]);
        let old = u64::from_le_bytes(le);
        let mask = if w == 8 { u64::MAX } else { (1u64 << (8 * w)) - 1 };
        let compare = if s.compare == OLD_VALUE { old } else { s.compare & mask };
        let operand = s.operand & mask;
        let new = match s.op {
            ffi::FI_SUM => old.wrapping_add(operand) & mask,
            ffi::FI_BXOR => old ^ operand,
            ffi::FI_CSWAP if compare == old => operand,
            ffi::FI_CSWAP | ffi::FI_ATOMIC_READ => old,
            ffi::FI_ATOMIC_WRITE => operand,
            other => unreachable!("op {other} not in UNALIGNED"),
        };
        mem[s.off..s.off + w].copy_from_slice(&new.to_le_bytes()[..w]);
        sent.push((operand, compare));
        old_values.push(old);
    }
    (sent, old_values, mem)
}

/// Atomics on elements at odd byte offsets (fi_atomic(3) asks no alignment of the target
/// address): each fetched value, and every byte of the target's buffer afterwards. Little-endian
/// layouts (x86_64, aarch64), as the provider's own tests assume.
fn unaligned<const M: u8>(r: &mut Rank) -> TResult {
    let (sent, old_values, want) = unaligned_model();
    let mut p = open(r, M)?;
    if r.rank == TARGET {
        let reg = p.alloc(UNALIGNED_LEN);
        let init = unaligned_init();
        p.region(reg).write(0, &init);
        let (_, mi) = p.reg(reg, 0, UNALIGNED_LEN, REMOTE_READ | REMOTE_WRITE, 0x0DD, 0)?;
        p.share_mrs(r, &[mi])?;
        p.barrier(r)?;
        let got = p.region(reg).read(0, UNALIGNED_LEN);
        let bad: Vec<String> = (0..UNALIGNED_LEN)
            .filter(|&i| got[i] != want[i])
            .map(|i| format!("byte {i} is {:#04x}, want {:#04x} (was {:#04x})", got[i], want[i], init[i]))
            .collect();
        report("target bytes after the unaligned atomics", &bad)?;
    } else {
        let all = p.share_mrs(r, &[])?;
        let m = *all[TARGET].first().ok_or_else(|| TestErr::Fail("no MR from the target".into()))?;
        let mut bad = Vec::new();
        for (k, s) in UNALIGNED.iter().enumerate() {
            let w = dt_size(s.dt);
            let what = format!("{}(datatype {}, op {}) at byte {}", s.kind.call(), s.dt, s.op, s.off);
            r.pmi.step(&what);
            let t = Target { dest: p.addrs[TARGET], addr: m.addr + s.off as u64, key: m.key };
            let (operand, compare) = sent[k];
            let bytes = |v: u64| v.to_le_bytes()[..w].to_vec();
            let id = must(&what, p.atomic(&what, s.kind, s.dt, s.op, 1, bytes(operand), bytes(compare), t)?)?;
            let d = p.wait_ok(id)?;
            if s.kind != AKind::Base {
                let got = payload(&what, &d.bufs[2], w)?;
                if got != bytes(old_values[k]).as_slice() {
                    bad.push(format!("{what}: fetched {got:02x?}, want {:02x?}", bytes(old_values[k])));
                }
            }
        }
        p.barrier(r)?;
        report("fetched values of the unaligned atomics", &bad)?;
    }
    p.barrier(r)
}

fn fetch_add_concurrent(r: &mut Rank) -> TResult {
    const N: usize = 250;
    const WINDOW: usize = 8;
    let mut p = open(r, BASIC)?;
    let total = (N * r.nprocs) as u64;
    // Rank 0's word, between two guard words.
    let guard = 0xDEAD_BEEF_0BAD_F00D_u64;
    let mut reg = None;
    let mine = if r.rank == 0 {
        let g = p.alloc(24);
        p.region(g).write(0, &[guard.to_ne_bytes(), 0u64.to_ne_bytes(), guard.to_ne_bytes()].concat());
        let (_, mi) = p.reg(g, 8, 8, REMOTE_READ | REMOTE_WRITE, 0xADD, 0)?;
        reg = Some(g);
        vec![mi]
    } else {
        vec![]
    };
    let all = p.share_mrs(r, &mine)?;
    let m = *all[0].first().ok_or_else(|| TestErr::Fail("no MR from rank 0".into()))?;
    let t = Target { dest: p.addrs[0], addr: m.addr, key: m.key };
    p.barrier(r)?;
    let mut inflight = VecDeque::new();
    let mut fetched = Vec::with_capacity(N);
    let mut issued = 0;
    let deadline = Instant::now() + p.timeout * 2;
    while fetched.len() < N {
        while issued < N && inflight.len() < WINDOW {
            let what = format!("fi_fetch_atomic(UINT64, SUM 1) #{issued}");
            let res =
                p.atomic(&what, AKind::Fetch, ffi::FI_UINT64, ffi::FI_SUM, 1, 1u64.to_ne_bytes().to_vec(), vec![], t)?;
            inflight.push_back(must(&what, res)?);
            issued += 1;
        }
        let id = *inflight.front().expect("in flight");
        match p.wait_for(id, Duration::from_millis(1))? {
            Some(d) => {
                let d = d.ok()?;
                inflight.pop_front();
                let v = payload(&d.what, &d.bufs[2], 8)?;
                fetched.push(u64::from_ne_bytes(v.try_into().expect("8 bytes")));
            }
            None => ensure!(Instant::now() < deadline, "{} of {N} fetch-adds done before the deadline", fetched.len()),
        }
    }
    let mut sorted = fetched.clone();
    sorted.sort_unstable();
    sorted.dedup();
    ensure!(sorted.len() == N, "rank {} fetched {} distinct values in {N} fetch-adds", r.rank, sorted.len());
    ensure!(sorted.iter().all(|&v| v < total), "rank {} fetched a value >= {total}: {:?}", r.rank, sorted.last());
    let list = fetched.iter().map(|v| format!("{v:x}")).collect::<Vec<_>>().join(".");
    let lists = r.pmi.allgather_with(&list, Some(&mut || p.progress().map(|_| ())))?;
    if let Some(g) = reg {
        let mut every = Vec::new();
        for (k, l) in lists.iter().enumerate() {
            for x in l.split('.') {
                every.push(u64::from_str_radix(x, 16).map_err(|_| TestErr::Fail(format!("bad list from rank {k}")))?);
            }
        }
        every.sort_unstable();
        let want: Vec<u64> = (0..total).collect();
        if every != want {
            let dup = every.windows(2).find(|w| w[0] == w[1]).map(|w| w[0]);
            bail!("the {} fetched values are not 0..{total} each once (first duplicate: {dup:?})", every.len());
        }
        let mem = p.region(g).read(0, 24);
        let word = |i: usize| u64::from_ne_bytes(mem[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        ensure!(word(1) == total, "rank 0's word is {} after {total} fetch-adds of 1", word(1));
        ensure!(word(0) == guard && word(2) == guard, "the words around the target changed");
        r.pmi.step(&format!("note: {total} fetch-adds from {} processes", r.nprocs));
    }
    p.barrier(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_double_encoding() {
        // 1.0L: integer bit set, biased exponent 0x3fff; -2.0L: 0xc000; 3.0L: mantissa 0xc000...
        let one = ld_bytes(1);
        assert_eq!(u64::from_le_bytes(one[..8].try_into().unwrap()), 1 << 63);
        assert_eq!(u16::from_le_bytes(one[8..10].try_into().unwrap()), 0x3fff);
        let m2 = ld_bytes(-2);
        assert_eq!(u16::from_le_bytes(m2[8..10].try_into().unwrap()), 0xc000);
        let three = ld_bytes(3);
        assert_eq!(u64::from_le_bytes(three[..8].try_into().unwrap()), 0xC000_0000_0000_0000);
        assert_eq!(ld_bytes(0), [0; 16]);
    }

    #[test]
    fn integer_ops_wrap_and_compare_by_type() {
        let i8t = ffi::FI_INT8 as usize;
        let u8t = ffi::FI_UINT8 as usize;
        let sum = ffi::FI_SUM as usize;
        assert_eq!(apply(i8t, sum, Num::I(127), Num::I(1), Num::I(0)), Some(Num::I(-128)));
        assert_eq!(apply(u8t, sum, Num::I(255), Num::I(2), Num::I(0)), Some(Num::I(1)));
        let min = ffi::FI_MIN as usize;
        assert_eq!(apply(i8t, min, Num::I(3), Num::I(-4), Num::I(0)), Some(Num::I(-4)));
        // CSWAP_LT: compare < target swaps.
        let lt = ffi::FI_CSWAP_LT as usize;
        assert_eq!(apply(i8t, lt, Num::I(5), Num::I(9), Num::I(4)), Some(Num::I(9)));
        assert_eq!(apply(i8t, lt, Num::I(5), Num::I(9), Num::I(5)), Some(Num::I(5)));
        let mswap = ffi::FI_MSWAP as usize;
        assert_eq!(apply(u8t, mswap, Num::I(0b1010), Num::I(0b0101), Num::I(0b0011)), Some(Num::I(0b1001)));
        assert_eq!(decode(i8t, &encode(i8t, Num::I(-3))), Num::I(-3));
    }

    #[test]
    fn complex_ops() {
        let c = ffi::FI_DOUBLE_COMPLEX as usize;
        let prod = ffi::FI_PROD as usize;
        // (1+2i)(3-1i) = 5+5i
        assert_eq!(apply(c, prod, Num::C(1.0, 2.0), Num::C(3.0, -1.0), Num::C(0.0, 0.0)), Some(Num::C(5.0, 5.0)));
        let lor = ffi::FI_LOR as usize;
        assert_eq!(apply(c, lor, Num::C(0.0, 0.5), Num::C(0.0, 0.0), Num::C(0.0, 0.0)), Some(Num::C(1.0, 0.0)));
        assert_eq!(apply(c, ffi::FI_MIN as usize, Num::C(0.0, 0.0), Num::C(1.0, 0.0), Num::C(0.0, 0.0)), None);
    }

    #[test]
    fn slots_are_distinct() {
        let mut seen = std::collections::HashSet::new();
        for k in 0..KINDS.len() {
            for dt in 0..NDT {
                for op in 0..NOP {
                    for m in [false, true] {
                        assert!(seen.insert(slot(k, dt, op, m)));
                    }
                }
            }
        }
        assert_eq!(seen.len(), NSLOTS);
        assert!(seen.iter().all(|&s| s < NSLOTS));
    }
}
