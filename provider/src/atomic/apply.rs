//! The target side of `fi_atomic`, `fi_fetch_atomic` and `fi_compare_atomic`: what one atomic
//! command does to the target's memory, with libfabric's numbering of operations and datatypes.
//!
//! Pure and safe: the caller hands in byte slices (target memory, operand, compare, result) and
//! provides atomicity itself (all atomics go through one path on the target). Elements are in
//! the native byte order and may be unaligned. Every length is checked, since peer-written
//! values end up here: a wrong length is an error, never a panic.
//!
//! Semantics follow fi_atomic(3) and libfabric's software atomics (prov/util/src/util_atomic.c,
//! as the C shm provider uses them), with the datatypes of its open-coded tables: all of them,
//! FI_INT128/FI_UINT128 included (libfabric's builds with compiler atomics drop
//! FI_DOUBLE_COMPLEX and the long double types; we keep them). Valid combinations:
//! - fi_atomic: MIN..BXOR and ATOMIC_WRITE; fi_fetch_atomic: those and ATOMIC_READ;
//!   fi_compare_atomic: CSWAP..MSWAP.
//! - BOR, BAND, BXOR, MSWAP: integers only. MIN, MAX, CSWAP_LE/LT/GE/GT: not complex. The rest
//!   (SUM, PROD, LOR, LAND, LXOR, READ, WRITE, CSWAP, CSWAP_NE): every datatype.
//!
//! What each does:
//! - MIN: `if (dst > operand) dst = operand`; MAX: `if (dst < operand) dst = operand` (so a NaN
//!   on either side leaves `dst` unchanged). Integer SUM and PROD wrap.
//! - LOR, LAND, LXOR: C truth (`x != 0`; a complex number is true when either part is), and the
//!   result is `1` or `0` of the datatype.
//! - CSWAP family: `if (compare OP dst) dst = operand` with `==`, `!=`, `<=`, `<`, `>=`, `>`
//!   as value comparisons (+0 == -0, NaN equals nothing). MSWAP:
//!   `dst = (operand & compare) | (dst & ~compare)`.
//! - Fetch and compare kinds return the old `dst` in `result`; fetch FI_ATOMIC_READ only reads,
//!   fetch FI_ATOMIC_WRITE swaps.
//! - Complex numbers are `{ re, im }` pairs; their product follows C (C11 Annex G, as gcc's
//!   `__mul?c3` does, recovering infinities that the plain formula computes as NaN).
//! - FI_LONG_DOUBLE is x86_64's `long double`: 16 bytes holding the 80-bit x87 extended format.
//!   Rust has no such type, so `F80` implements it in software, rounding as the x87 does with
//!   its default control word (64-bit significand, round to nearest even, no flush to zero) and
//!   with the x87's NaN rules; encodings the x87 rejects (unnormals, pseudo-NaN, pseudo-infinity)
//!   compare unordered and make arithmetic return the default NaN. Computed values write the
//!   10 value bytes and leave the 6 padding bytes alone; plain copies copy all 16. Other targets
//!   lay `long double` out differently, so there [`valid`] refuses the long double types.

use crate::error::FiError;
use rshm_ffi as ffi;
use std::cmp::Ordering;
use std::fmt;
use std::ops::{BitAnd, BitOr, BitXor, Not};

/// Which call the operation came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// `fi_atomic`: `dst = op(dst, operand)`, nothing returned.
    Write,
    /// `fi_fetch_atomic`: `result = dst`, then `dst = op(dst, operand)`.
    Fetch,
    /// `fi_compare_atomic`: `result = dst`, then the CSWAP family or MSWAP with `compare`.
    Compare,
}

impl Kind {
    /// The kind `fi_query_atomic` flags ask about: neither flag is [`Kind::Write`],
    /// `FI_FETCH_ATOMIC` is [`Kind::Fetch`], `FI_COMPARE_ATOMIC` is [`Kind::Compare`]; both
    /// at once is `None`. Other bits are ignored (the caller decides about them).
    pub fn from_flags(flags: u64) -> Option<Kind> {
        match (flags & ffi::FI_FETCH_ATOMIC != 0, flags & ffi::FI_COMPARE_ATOMIC != 0) {
            (false, false) => Some(Kind::Write),
            (true, false) => Some(Kind::Fetch),
            (false, true) => Some(Kind::Compare),
            (true, true) => None,
        }
    }
}

/// Why [`apply`] refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApplyError {
    /// `(kind, op, datatype)` is not a combination [`valid`] accepts (`-FI_EOPNOTSUPP`).
    Unsupported,
    /// A buffer has the wrong length (`-FI_EINVAL`). `buffer` names it; for `dst`, `len` is not a
    /// multiple of the element size `expected`.
    BadLength { buffer: &'static str, len: usize, expected: usize },
}

impl fmt::Display for ApplyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ApplyError::Unsupported => write!(f, "atomic operation/datatype combination not supported"),
            ApplyError::BadLength { buffer: "dst", len, expected } => {
                write!(f, "atomic target length {len} is not a multiple of the element size {expected}")
            }
            ApplyError::BadLength { buffer, len, expected } => {
                write!(f, "atomic {buffer} buffer has {len} bytes, expected {expected}")
            }
        }
    }
}

impl std::error::Error for ApplyError {}

impl From<ApplyError> for FiError {
    fn from(e: ApplyError) -> FiError {
        match e {
            ApplyError::Unsupported => FiError::OPNOTSUPP,
            ApplyError::BadLength { .. } => FiError::INVAL,
        }
    }
}

/// Which operations a datatype admits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    Integer,
    Real,
    Complex,
}

const fn family(datatype: u32) -> Option<Family> {
    match datatype {
        ffi::FI_INT8
        | ffi::FI_UINT8
        | ffi::FI_INT16
        | ffi::FI_UINT16
        | ffi::FI_INT32
        | ffi::FI_UINT32
        | ffi::FI_INT64
        | ffi::FI_UINT64
        | ffi::FI_INT128
        | ffi::FI_UINT128 => Some(Family::Integer),
        ffi::FI_FLOAT | ffi::FI_DOUBLE | ffi::FI_LONG_DOUBLE => Some(Family::Real),
        ffi::FI_FLOAT_COMPLEX | ffi::FI_DOUBLE_COMPLEX | ffi::FI_LONG_DOUBLE_COMPLEX => Some(Family::Complex),
        _ => None,
    }
}

/// Calls `$int::<T>`, `$real::<T>` or `$complex::<T>` with the Rust type `T` of `$datatype`, or
/// evaluates `$none` for an unknown datatype.
macro_rules! dispatch {
    ($datatype:expr, $int:ident, $real:ident, $complex:ident, ($($arg:expr),*), $none:expr) => {
        match $datatype {
            ffi::FI_INT8 => $int::<i8>($($arg),*),
            ffi::FI_UINT8 => $int::<u8>($($arg),*),
            ffi::FI_INT16 => $int::<i16>($($arg),*),
            ffi::FI_UINT16 => $int::<u16>($($arg),*),
            ffi::FI_INT32 => $int::<i32>($($arg),*),
            ffi::FI_UINT32 => $int::<u32>($($arg),*),
            ffi::FI_INT64 => $int::<i64>($($arg),*),
            ffi::FI_UINT64 => $int::<u64>($($arg),*),
            ffi::FI_INT128 => $int::<i128>($($arg),*),
            ffi::FI_UINT128 => $int::<u128>($($arg),*),
            ffi::FI_FLOAT => $real::<f32>($($arg),*),
            ffi::FI_DOUBLE => $real::<f64>($($arg),*),
            ffi::FI_LONG_DOUBLE => $real::<F80>($($arg),*),
            ffi::FI_FLOAT_COMPLEX => $complex::<Complex<f32>>($($arg),*),
            ffi::FI_DOUBLE_COMPLEX => $complex::<Complex<f64>>($($arg),*),
            ffi::FI_LONG_DOUBLE_COMPLEX => $complex::<Complex<F80>>($($arg),*),
            _ => $none,
        }
    };
}

#[cfg(test)]
fn elem_size<T: Elem>() -> Option<usize> {
    Some(T::SIZE)
}

/// Datatypes and operations are small numbers (libfabric's enums), and `valid` and `type_size`
/// are asked on every atomic at both ends (the call, the target's decode, `apply`): their
/// answers come from tables built at compile time, one load each, instead of a walk through
/// the matches below.
const DATATYPES: usize = 16;

/// Bytes of one element of `datatype`, or `None` if the datatype is unknown.
pub fn type_size(datatype: u32) -> Option<usize> {
    match TYPE_SIZES.get(datatype as usize) {
        Some(&n) if n > 0 => Some(n as usize),
        _ => None,
    }
}

/// `type_size` by datatype (0: unknown); the sizes are the element types' (checked against
/// them by a test).
const TYPE_SIZES: [u8; DATATYPES] = [1, 1, 2, 2, 4, 4, 8, 8, 4, 8, 8, 16, 16, 32, 16, 16];

const _: () = {
    let mut i = 0;
    while i < DATATYPES {
        assert!(TYPE_SIZES[i].is_power_of_two(), "`apply` checks lengths with a mask");
        i += 1;
    }
};

/// Bytes of one element of `datatype`, from the element types themselves.
#[cfg(test)]
fn type_size_of_elem(datatype: u32) -> Option<usize> {
    dispatch!(datatype, elem_size, elem_size, elem_size, (), None)
}

/// `valid` by kind and datatype: bit `op` set where the combination is implemented.
const VALID: [[u32; DATATYPES]; 3] = {
    let kinds = [Kind::Write, Kind::Fetch, Kind::Compare];
    let mut table = [[0u32; DATATYPES]; 3];
    let mut k = 0;
    while k < kinds.len() {
        let mut datatype = 0;
        while datatype < DATATYPES {
            let mut op = 0;
            while op < 32 {
                if valid_rule(kinds[k], op, datatype as u32) {
                    table[k][datatype] |= 1 << op;
                }
                op += 1;
            }
            datatype += 1;
        }
        k += 1;
    }
    table
};

/// Whether `(kind, op, datatype)` is implemented; `fi_atomicvalid` and friends answer from this.
pub fn valid(kind: Kind, op: u32, datatype: u32) -> bool {
    let Some(ops) = VALID[kind as usize].get(datatype as usize) else { return false };
    op < 32 && ops >> op & 1 != 0
}

/// The rule `VALID` is built from.
const fn valid_rule(kind: Kind, op: u32, datatype: u32) -> bool {
    let Some(family) = family(datatype) else { return false };
    if !cfg!(target_arch = "x86_64") && matches!(datatype, ffi::FI_LONG_DOUBLE | ffi::FI_LONG_DOUBLE_COMPLEX) {
        return false;
    }
    let kind_ok = match kind {
        Kind::Write => op <= ffi::FI_ATOMIC_WRITE && op != ffi::FI_ATOMIC_READ,
        Kind::Fetch => op <= ffi::FI_ATOMIC_WRITE,
        Kind::Compare => op >= ffi::FI_CSWAP && op <= ffi::FI_MSWAP,
    };
    kind_ok
        && match op {
            ffi::FI_BOR | ffi::FI_BAND | ffi::FI_BXOR | ffi::FI_MSWAP => matches!(family, Family::Integer),
            ffi::FI_MIN | ffi::FI_MAX | ffi::FI_CSWAP_LE | ffi::FI_CSWAP_LT | ffi::FI_CSWAP_GE | ffi::FI_CSWAP_GT => {
                !matches!(family, Family::Complex)
            }
            _ => true,
        }
}

/// Applies one atomic command to `dst.len() / type_size(datatype)` elements.
///
/// `dst` is the target memory. `operand` has the same length (it may be empty for
/// FI_ATOMIC_READ). `compare` has the same length for [`Kind::Compare`] and is empty otherwise.
/// `result` has the same length for [`Kind::Fetch`] and [`Kind::Compare`] and receives the old
/// values of `dst`; it is empty for [`Kind::Write`]. On error nothing has been written.
pub fn apply(
    kind: Kind,
    op: u32,
    datatype: u32,
    dst: &mut [u8],
    operand: &[u8],
    compare: &[u8],
    result: &mut [u8],
) -> Result<(), ApplyError> {
    if !valid(kind, op, datatype) {
        return Err(ApplyError::Unsupported);
    }
    let size = type_size(datatype).ok_or(ApplyError::Unsupported)?;
    let len = dst.len();
    // Element sizes are powers of two (checked where `TYPE_SIZES` is defined): a mask, not a
    // division, on every atomic a target applies.
    if len & (size - 1) != 0 {
        return Err(ApplyError::BadLength { buffer: "dst", len, expected: size });
    }
    let check = |buffer: &'static str, got: usize, expected: usize| {
        if got == expected {
            Ok(())
        } else {
            Err(ApplyError::BadLength { buffer, len: got, expected })
        }
    };
    if !(op == ffi::FI_ATOMIC_READ && operand.is_empty()) {
        check("operand", operand.len(), len)?;
    }
    check("compare", compare.len(), if kind == Kind::Compare { len } else { 0 })?;
    check("result", result.len(), if kind == Kind::Write { 0 } else { len })?;

    // One int or long under an operation whose bits do not depend on its sign: nearly every
    // atomic OpenSHMEM and MPI send, computed on a machine word instead of through the tables
    // (a target's fetching add: 380 -> 348 instructions, the copies around it included).
    if len == size {
        let old = word_of(dst);
        if let Some(new) = word(op, datatype, size, old, word_of(operand), word_of(compare)) {
            if kind != Kind::Write {
                store_word(old, result);
            }
            if op != ffi::FI_ATOMIC_READ {
                store_word(new, dst);
            }
            return Ok(());
        }
    }
    elements(kind, op, datatype, dst, operand, compare, result)
}

/// `apply` through the element tables, its arguments checked.
fn elements(
    kind: Kind,
    op: u32,
    datatype: u32,
    dst: &mut [u8],
    operand: &[u8],
    compare: &[u8],
    result: &mut [u8],
) -> Result<(), ApplyError> {
    if kind != Kind::Write {
        result.copy_from_slice(dst);
    }
    match op {
        ffi::FI_ATOMIC_READ => Ok(()),
        ffi::FI_ATOMIC_WRITE => {
            dst.copy_from_slice(operand);
            Ok(())
        }
        _ => dispatch!(
            datatype,
            integer_op,
            ordered_op,
            any_op,
            (op, dst, operand, compare),
            Err(ApplyError::Unsupported)
        ),
    }
}

/// One element of a 4- or 8-byte integer (`bytes` long, the element's width) under an
/// operation whose result bits do not depend on the type's sign: the new value of `dst`, from
/// `dst`, `operand` and `compare` zero-extended to 64 bits (the caller keeps the low `bytes`).
/// None for any other operation, datatype or width: `elements` takes those. The caller checked
/// `(kind, op, datatype)` with [`valid`]; FI_ATOMIC_READ returns `dst` (write nothing back).
#[inline(always)]
pub(crate) fn word(op: u32, datatype: u32, bytes: usize, dst: u64, operand: u64, compare: u64) -> Option<u64> {
    let width = match datatype {
        ffi::FI_INT32 | ffi::FI_UINT32 => 4,
        ffi::FI_INT64 | ffi::FI_UINT64 => 8,
        _ => return None,
    };
    if bytes != width {
        return None;
    }
    Some(match op {
        ffi::FI_SUM => dst.wrapping_add(operand),
        ffi::FI_PROD => dst.wrapping_mul(operand),
        ffi::FI_BOR => dst | operand,
        ffi::FI_BAND => dst & operand,
        ffi::FI_BXOR => dst ^ operand,
        ffi::FI_ATOMIC_READ => dst,
        ffi::FI_ATOMIC_WRITE => operand,
        ffi::FI_CSWAP if compare == dst => operand,
        ffi::FI_CSWAP_NE if compare != dst => operand,
        ffi::FI_CSWAP | ffi::FI_CSWAP_NE => dst,
        ffi::FI_MSWAP => (operand & compare) | (dst & !compare),
        _ => return None,
    })
}

/// A 4- or 8-byte element, zero-extended (0 for no bytes: an absent operand or compare).
#[inline(always)]
pub(crate) fn word_of(b: &[u8]) -> u64 {
    if let Ok(b4) = <[u8; 4]>::try_from(b) {
        u32::from_ne_bytes(b4).into()
    } else if let Ok(b8) = <[u8; 8]>::try_from(b) {
        u64::from_ne_bytes(b8)
    } else {
        0
    }
}

/// The low `dst.len()` (4 or 8) bytes of `v` into `dst`.
#[inline(always)]
pub(crate) fn store_word(v: u64, dst: &mut [u8]) {
    if let Ok(d4) = <&mut [u8; 4]>::try_from(&mut *dst) {
        *d4 = (v as u32).to_ne_bytes();
    } else if let Ok(d8) = <&mut [u8; 8]>::try_from(dst) {
        *d8 = v.to_ne_bytes();
    }
}

/// `dst[i] = f(dst[i], operand[i])` where `f` returns `Some`.
fn update<T: Elem>(dst: &mut [u8], operand: &[u8], f: impl Fn(T, T) -> Option<T>) {
    for (d, s) in dst.chunks_exact_mut(T::SIZE).zip(operand.chunks_exact(T::SIZE)) {
        if let Some(v) = f(T::load(d), T::load(s)) {
            v.store(d);
        }
    }
}

/// `if cond(compare[i], dst[i]) dst[i] = operand[i]`, copying the operand's bytes.
fn swap_if<T: Elem>(dst: &mut [u8], operand: &[u8], compare: &[u8], cond: impl Fn(T, T) -> bool) {
    let elems = dst.chunks_exact_mut(T::SIZE).zip(operand.chunks_exact(T::SIZE)).zip(compare.chunks_exact(T::SIZE));
    for ((d, s), c) in elems {
        if cond(T::load(c), T::load(d)) {
            d.copy_from_slice(s);
        }
    }
}

/// Bitwise operations and MSWAP, else [`ordered_op`].
fn integer_op<T: Integer>(op: u32, dst: &mut [u8], operand: &[u8], compare: &[u8]) -> Result<(), ApplyError> {
    match op {
        ffi::FI_BOR => update::<T>(dst, operand, |d, s| Some(d | s)),
        ffi::FI_BAND => update::<T>(dst, operand, |d, s| Some(d & s)),
        ffi::FI_BXOR => update::<T>(dst, operand, |d, s| Some(d ^ s)),
        ffi::FI_MSWAP => {
            let elems =
                dst.chunks_exact_mut(T::SIZE).zip(operand.chunks_exact(T::SIZE)).zip(compare.chunks_exact(T::SIZE));
            for ((d, s), c) in elems {
                let (mask, old) = (T::load(c), T::load(d));
                ((T::load(s) & mask) | (old & !mask)).store(d);
            }
        }
        _ => return ordered_op::<T>(op, dst, operand, compare),
    }
    Ok(())
}

/// MIN, MAX and the ordered compare-swaps, else [`any_op`].
fn ordered_op<T: Elem + PartialOrd>(op: u32, dst: &mut [u8], operand: &[u8], compare: &[u8]) -> Result<(), ApplyError> {
    match op {
        ffi::FI_MIN => update::<T>(dst, operand, |d, s| (d > s).then_some(s)),
        ffi::FI_MAX => update::<T>(dst, operand, |d, s| (d < s).then_some(s)),
        ffi::FI_CSWAP_LE => swap_if::<T>(dst, operand, compare, |c, d| c <= d),
        ffi::FI_CSWAP_LT => swap_if::<T>(dst, operand, compare, |c, d| c < d),
        ffi::FI_CSWAP_GE => swap_if::<T>(dst, operand, compare, |c, d| c >= d),
        ffi::FI_CSWAP_GT => swap_if::<T>(dst, operand, compare, |c, d| c > d),
        _ => return any_op::<T>(op, dst, operand, compare),
    }
    Ok(())
}

/// The operations every datatype has (besides READ and WRITE, which [`apply`] does bytewise).
fn any_op<T: Elem>(op: u32, dst: &mut [u8], operand: &[u8], compare: &[u8]) -> Result<(), ApplyError> {
    match op {
        ffi::FI_SUM => update::<T>(dst, operand, |d, s| Some(d.add(s))),
        ffi::FI_PROD => update::<T>(dst, operand, |d, s| Some(d.mul(s))),
        ffi::FI_LOR => update::<T>(dst, operand, |d, s| Some(T::from_bool(d.truthy() || s.truthy()))),
        ffi::FI_LAND => update::<T>(dst, operand, |d, s| Some(T::from_bool(d.truthy() && s.truthy()))),
        ffi::FI_LXOR => update::<T>(dst, operand, |d, s| Some(T::from_bool(d.truthy() != s.truthy()))),
        ffi::FI_CSWAP => swap_if::<T>(dst, operand, compare, |c, d| c == d),
        ffi::FI_CSWAP_NE => swap_if::<T>(dst, operand, compare, |c, d| c != d),
        _ => return Err(ApplyError::Unsupported),
    }
    Ok(())
}

/// `b` as an array, zero-padded or cut to `N` bytes (callers pass exactly `N`).
fn array<const N: usize>(b: &[u8]) -> [u8; N] {
    let mut a = [0; N];
    for (x, y) in a.iter_mut().zip(b) {
        *x = *y;
    }
    a
}

fn put(bytes: &[u8], b: &mut [u8]) {
    for (x, y) in b.iter_mut().zip(bytes) {
        *x = *y;
    }
}

/// One element of a datatype; `==` is C's `==`.
trait Elem: Copy + PartialEq {
    const SIZE: usize;
    /// Reads an element from exactly `SIZE` bytes.
    fn load(b: &[u8]) -> Self;
    /// Writes the element into exactly `SIZE` bytes.
    fn store(self, b: &mut [u8]);
    /// C's `+` and `*` (wrapping for integers).
    fn add(self, other: Self) -> Self;
    fn mul(self, other: Self) -> Self;
    /// C's `x != 0`.
    fn truthy(self) -> bool;
    /// C's conversion of `0`/`1` to the type.
    fn from_bool(b: bool) -> Self;
}

trait Integer:
    Elem + PartialOrd + BitAnd<Output = Self> + BitOr<Output = Self> + BitXor<Output = Self> + Not<Output = Self>
{
}

macro_rules! integer {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            fn load(b: &[u8]) -> Self {
                <$t>::from_ne_bytes(array(b))
            }
            fn store(self, b: &mut [u8]) {
                put(&self.to_ne_bytes(), b)
            }
            fn add(self, other: Self) -> Self {
                self.wrapping_add(other)
            }
            fn mul(self, other: Self) -> Self {
                self.wrapping_mul(other)
            }
            fn truthy(self) -> bool {
                self != 0
            }
            fn from_bool(b: bool) -> Self {
                b.into()
            }
        }
        impl Integer for $t {}
    )*};
}
integer!(i8, u8, i16, u16, i32, u32, i64, u64, i128, u128);

/// A real floating-point type, with what complex multiplication needs.
trait Real: Elem + PartialOrd {
    const ZERO: Self;
    const ONE: Self;
    const INFINITY: Self;
    fn sub(self, other: Self) -> Self;
    fn is_nan(self) -> bool;
    fn is_infinite(self) -> bool;
    fn copysign(self, sign: Self) -> Self;
}

macro_rules! float {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            fn load(b: &[u8]) -> Self {
                <$t>::from_ne_bytes(array(b))
            }
            fn store(self, b: &mut [u8]) {
                put(&self.to_ne_bytes(), b)
            }
            fn add(self, other: Self) -> Self {
                self + other
            }
            fn mul(self, other: Self) -> Self {
                self * other
            }
            fn truthy(self) -> bool {
                self != 0.0
            }
            fn from_bool(b: bool) -> Self {
                if b { 1.0 } else { 0.0 }
            }
        }
        impl Real for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            const INFINITY: Self = <$t>::INFINITY;
            fn sub(self, other: Self) -> Self {
                self - other
            }
            fn is_nan(self) -> bool {
                <$t>::is_nan(self)
            }
            fn is_infinite(self) -> bool {
                <$t>::is_infinite(self)
            }
            fn copysign(self, sign: Self) -> Self {
                <$t>::copysign(self, sign)
            }
        }
    )*};
}
float!(f32, f64);

/// C's `_Complex T`: real part, then imaginary part. `==` compares both parts.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Complex<T> {
    re: T,
    im: T,
}

impl<T: Real> Elem for Complex<T> {
    const SIZE: usize = 2 * T::SIZE;
    fn load(b: &[u8]) -> Self {
        let (re, im) = b.split_at(T::SIZE.min(b.len()));
        Complex { re: T::load(re), im: T::load(im) }
    }
    fn store(self, b: &mut [u8]) {
        let (re, im) = b.split_at_mut(T::SIZE.min(b.len()));
        self.re.store(re);
        self.im.store(im);
    }
    fn add(self, o: Self) -> Self {
        Complex { re: self.re.add(o.re), im: self.im.add(o.im) }
    }
    /// `(a + ib)(c + id)` as gcc computes it: the plain formula, and when both parts come out
    /// NaN, C11 Annex G's recovery of infinite results (`__mulsc3`/`__muldc3`/`__mulxc3`).
    fn mul(self, o: Self) -> Self {
        let (mut a, mut b, mut c, mut d) = (self.re, self.im, o.re, o.im);
        let (ac, bd, ad, bc) = (a.mul(c), b.mul(d), a.mul(d), b.mul(c));
        let (x, y) = (ac.sub(bd), ad.add(bc));
        if !(x.is_nan() && y.is_nan()) {
            return Complex { re: x, im: y };
        }
        let boxed = |v: T| if v.is_infinite() { T::ONE } else { T::ZERO }.copysign(v);
        let unnan = |v: T| if v.is_nan() { T::ZERO.copysign(v) } else { v };
        let mut recalc = false;
        if a.is_infinite() || b.is_infinite() {
            (a, b, c, d) = (boxed(a), boxed(b), unnan(c), unnan(d));
            recalc = true;
        }
        if c.is_infinite() || d.is_infinite() {
            (a, b, c, d) = (unnan(a), unnan(b), boxed(c), boxed(d));
            recalc = true;
        }
        if !recalc && (ac.is_infinite() || bd.is_infinite() || ad.is_infinite() || bc.is_infinite()) {
            (a, b, c, d) = (unnan(a), unnan(b), unnan(c), unnan(d));
            recalc = true;
        }
        if !recalc {
            return Complex { re: x, im: y };
        }
        Complex { re: T::INFINITY.mul(a.mul(c).sub(b.mul(d))), im: T::INFINITY.mul(a.mul(d).add(b.mul(c))) }
    }
    fn truthy(self) -> bool {
        self.re.truthy() || self.im.truthy()
    }
    fn from_bool(b: bool) -> Self {
        Complex { re: T::from_bool(b), im: T::ZERO }
    }
}

/// x86_64 `long double`: the x87 80-bit extended format (explicit integer bit) in 16 bytes.
///
/// `==` and `<` are the x87's value comparisons: +0 equals -0, a pseudo-denormal equals the
/// normal number with its value, and NaN as well as the encodings the x87 rejects compare
/// unordered.
#[derive(Debug, Clone, Copy)]
struct F80 {
    /// Significand, bit 63 the explicit integer bit.
    mant: u64,
    /// Sign (bit 15) and biased exponent (bits 0..15).
    se: u16,
}

/// An [`F80`] decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum F80Class {
    Zero,
    /// `mant * 2^(exp - 63)` with `mant`'s bit 63 set (denormals normalized).
    Finite {
        exp: i32,
        mant: u64,
    },
    Infinite,
    Nan {
        quiet: bool,
    },
    /// Unnormal, pseudo-NaN or pseudo-infinity: the x87 raises invalid-operation on these.
    Unsupported,
}

const F80_BIAS: i32 = 16383;
const F80_EXP_MAX: u16 = 0x7fff;
const F80_INT_BIT: u64 = 1 << 63;
const F80_QUIET_BIT: u64 = 1 << 62;

impl F80 {
    /// The x87's default NaN ("real indefinite"), the result of an invalid operation.
    const INDEFINITE: F80 = F80 { mant: F80_INT_BIT | F80_QUIET_BIT, se: 0xffff };

    fn negative(self) -> bool {
        self.se >> 15 == 1
    }

    fn signed(neg: bool, mant: u64, exp: u16) -> F80 {
        F80 { mant, se: (u16::from(neg) << 15) | exp }
    }

    fn class(self) -> F80Class {
        let exp = self.se & F80_EXP_MAX;
        let int_bit = self.mant & F80_INT_BIT != 0;
        match exp {
            F80_EXP_MAX if !int_bit => F80Class::Unsupported,
            F80_EXP_MAX if self.mant == F80_INT_BIT => F80Class::Infinite,
            F80_EXP_MAX => F80Class::Nan { quiet: self.mant & F80_QUIET_BIT != 0 },
            0 if self.mant == 0 => F80Class::Zero,
            // Denormal or pseudo-denormal: exponent field 0 means 1 - bias.
            0 => {
                let shift = self.mant.leading_zeros();
                F80Class::Finite { exp: 1 - F80_BIAS - shift as i32, mant: self.mant << shift }
            }
            _ if !int_bit => F80Class::Unsupported,
            _ => F80Class::Finite { exp: i32::from(exp) - F80_BIAS, mant: self.mant },
        }
    }

    /// Rounds `sig * 2^(exp - 127)` (`sig` normalized: bit 127 set; bit 0 may hold a sticky bit)
    /// to nearest even, producing a denormal, zero or infinity where the range ends.
    fn round(neg: bool, exp: i32, sig: u128) -> F80 {
        let mut biased = exp + F80_BIAS;
        let mut sig = sig;
        if biased < 1 {
            sig = shift_right_jam(sig, (1 - biased).unsigned_abs());
            biased = 0;
        }
        let mut mant = (sig >> 64) as u64;
        let rest = sig as u64;
        let half = 1 << 63;
        if rest > half || (rest == half && mant & 1 == 1) {
            mant = mant.wrapping_add(1);
            if mant == 0 {
                mant = F80_INT_BIT;
                biased += 1;
            } else if biased == 0 && mant & F80_INT_BIT != 0 {
                // A denormal rounded up to the smallest normal.
                biased = 1;
            }
        }
        if biased >= i32::from(F80_EXP_MAX) {
            return F80::signed(neg, F80_INT_BIT, F80_EXP_MAX);
        }
        F80::signed(neg, mant, biased as u16)
    }

    /// The NaN an arithmetic operation on `a` and `b` returns, if any (Intel SDM vol. 1,
    /// table 4-7): the default NaN for rejected encodings, else the NaN operand made quiet; of a
    /// quiet and a signaling NaN the quiet one, of two alike the one with the larger significand.
    fn nan_operands(a: F80, b: F80) -> Option<F80> {
        let quiet = |x: F80| F80 { mant: x.mant | F80_QUIET_BIT, se: x.se };
        match (a.class(), b.class()) {
            (F80Class::Unsupported, _) | (_, F80Class::Unsupported) => Some(F80::INDEFINITE),
            (F80Class::Nan { quiet: true }, F80Class::Nan { quiet: false }) => Some(a),
            (F80Class::Nan { quiet: false }, F80Class::Nan { quiet: true }) => Some(b),
            (F80Class::Nan { .. }, F80Class::Nan { .. }) => {
                let (qa, qb) = (quiet(a), quiet(b));
                Some(match qa.mant.cmp(&qb.mant) {
                    Ordering::Greater => qa,
                    Ordering::Less => qb,
                    // Equal significands: the x87 returns the positive one.
                    Ordering::Equal if qa.negative() => qb,
                    Ordering::Equal => qa,
                })
            }
            (F80Class::Nan { .. }, _) => Some(quiet(a)),
            (_, F80Class::Nan { .. }) => Some(quiet(b)),
            _ => None,
        }
    }

    fn sum(self, o: F80) -> F80 {
        if let Some(nan) = F80::nan_operands(self, o) {
            return nan;
        }
        let (na, nb) = (self.negative(), o.negative());
        match (self.class(), o.class()) {
            (F80Class::Infinite, F80Class::Infinite) if na != nb => F80::INDEFINITE,
            (F80Class::Infinite, _) => F80::signed(na, F80_INT_BIT, F80_EXP_MAX),
            (_, F80Class::Infinite) => F80::signed(nb, F80_INT_BIT, F80_EXP_MAX),
            (F80Class::Zero, F80Class::Zero) => F80::signed(na && nb, 0, 0),
            (F80Class::Zero, F80Class::Finite { exp, mant }) => F80::round(nb, exp, u128::from(mant) << 64),
            (F80Class::Finite { exp, mant }, F80Class::Zero) => F80::round(na, exp, u128::from(mant) << 64),
            (F80Class::Finite { exp: ea, mant: ma }, F80Class::Finite { exp: eb, mant: mb }) => {
                // Order by magnitude; 62 guard bits below the significands, and a sticky bit.
                let ((nbig, ebig, mbig), (nsmall, esmall, msmall)) =
                    if (ea, ma) >= (eb, mb) { ((na, ea, ma), (nb, eb, mb)) } else { ((nb, eb, mb), (na, ea, ma)) };
                let big = u128::from(mbig) << 62;
                let small = shift_right_jam(u128::from(msmall) << 62, (ebig - esmall).unsigned_abs());
                let sig = if nbig == nsmall { big + small } else { big - small };
                if sig == 0 {
                    return F80::signed(false, 0, 0);
                }
                let shift = sig.leading_zeros();
                F80::round(nbig, ebig + 2 - shift as i32, sig << shift)
            }
            // NaN and rejected encodings are handled above.
            _ => F80::INDEFINITE,
        }
    }

    fn product(self, o: F80) -> F80 {
        if let Some(nan) = F80::nan_operands(self, o) {
            return nan;
        }
        let neg = self.negative() != o.negative();
        match (self.class(), o.class()) {
            (F80Class::Infinite, F80Class::Zero) | (F80Class::Zero, F80Class::Infinite) => F80::INDEFINITE,
            (F80Class::Infinite, _) | (_, F80Class::Infinite) => F80::signed(neg, F80_INT_BIT, F80_EXP_MAX),
            (F80Class::Zero, _) | (_, F80Class::Zero) => F80::signed(neg, 0, 0),
            (F80Class::Finite { exp: ea, mant: ma }, F80Class::Finite { exp: eb, mant: mb }) => {
                let sig = u128::from(ma) * u128::from(mb);
                let shift = sig.leading_zeros();
                F80::round(neg, ea + eb + 1 - shift as i32, sig << shift)
            }
            _ => F80::INDEFINITE,
        }
    }

    /// Sign (-1, 0 for zero, 1) and magnitude, or `None` for NaN and rejected encodings.
    fn ordering_key(self) -> Option<(i8, (u8, i32, u64))> {
        let sign = if self.negative() { -1 } else { 1 };
        match self.class() {
            F80Class::Zero => Some((0, (0, 0, 0))),
            F80Class::Finite { exp, mant } => Some((sign, (1, exp, mant))),
            F80Class::Infinite => Some((sign, (2, 0, 0))),
            F80Class::Nan { .. } | F80Class::Unsupported => None,
        }
    }
}

/// `x >> shift`, with bit 0 set if any bit shifted out was set.
fn shift_right_jam(x: u128, shift: u32) -> u128 {
    match shift {
        0 => x,
        1..=127 => (x >> shift) | u128::from(x << (128 - shift) != 0),
        _ => u128::from(x != 0),
    }
}

impl PartialEq for F80 {
    fn eq(&self, other: &F80) -> bool {
        self.partial_cmp(other) == Some(Ordering::Equal)
    }
}

impl PartialOrd for F80 {
    fn partial_cmp(&self, other: &F80) -> Option<Ordering> {
        let (sa, ma) = self.ordering_key()?;
        let (sb, mb) = other.ordering_key()?;
        Some(match sa.cmp(&sb) {
            Ordering::Equal if sa < 0 => mb.cmp(&ma),
            Ordering::Equal => ma.cmp(&mb),
            unequal => unequal,
        })
    }
}

impl Elem for F80 {
    const SIZE: usize = 16;
    fn load(b: &[u8]) -> Self {
        let b: [u8; 10] = array(b);
        F80 { mant: u64::from_ne_bytes(array(&b[..8])), se: u16::from_ne_bytes(array(&b[8..])) }
    }
    /// Writes the 10 value bytes; the padding keeps whatever it held.
    fn store(self, b: &mut [u8]) {
        put(&self.mant.to_ne_bytes(), b);
        put(&self.se.to_ne_bytes(), b.get_mut(8..).unwrap_or_default());
    }
    fn add(self, other: Self) -> Self {
        self.sum(other)
    }
    fn mul(self, other: Self) -> Self {
        self.product(other)
    }
    fn truthy(self) -> bool {
        self.class() != F80Class::Zero
    }
    fn from_bool(b: bool) -> Self {
        if b {
            F80::ONE
        } else {
            F80::ZERO
        }
    }
}

impl Real for F80 {
    const ZERO: F80 = F80 { mant: 0, se: 0 };
    const ONE: F80 = F80 { mant: F80_INT_BIT, se: F80_BIAS as u16 };
    const INFINITY: F80 = F80 { mant: F80_INT_BIT, se: F80_EXP_MAX };
    fn sub(self, other: Self) -> Self {
        // x87 subtraction returns a NaN operand as it is, not negated.
        F80::nan_operands(self, other).unwrap_or_else(|| self.sum(F80 { mant: other.mant, se: other.se ^ 0x8000 }))
    }
    fn is_nan(self) -> bool {
        matches!(self.class(), F80Class::Nan { .. } | F80Class::Unsupported)
    }
    fn is_infinite(self) -> bool {
        self.class() == F80Class::Infinite
    }
    fn copysign(self, sign: Self) -> Self {
        F80 { mant: self.mant, se: (self.se & F80_EXP_MAX) | (sign.se & 0x8000) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ffi::*;

    const KINDS: [Kind; 3] = [Kind::Write, Kind::Fetch, Kind::Compare];
    const INTEGERS: [u32; 10] =
        [FI_INT8, FI_UINT8, FI_INT16, FI_UINT16, FI_INT32, FI_UINT32, FI_INT64, FI_UINT64, FI_INT128, FI_UINT128];
    const REALS: [u32; 3] = [FI_FLOAT, FI_DOUBLE, FI_LONG_DOUBLE];
    const COMPLEXES: [u32; 3] = [FI_FLOAT_COMPLEX, FI_DOUBLE_COMPLEX, FI_LONG_DOUBLE_COMPLEX];

    fn datatypes() -> impl Iterator<Item = u32> {
        INTEGERS.into_iter().chain(REALS).chain(COMPLEXES)
    }

    /// The compile-time tables say what the element types and the rule say, for every
    /// datatype and operation number a peer could send (and some beyond).
    #[test]
    fn the_tables_agree_with_the_types_and_the_rule() {
        for datatype in 0..300u32 {
            assert_eq!(type_size(datatype), type_size_of_elem(datatype), "datatype {datatype}");
            for kind in KINDS {
                for op in 0..100u32 {
                    assert_eq!(
                        valid(kind, op, datatype),
                        valid_rule(kind, op, datatype),
                        "{kind:?} op {op} datatype {datatype}"
                    );
                }
            }
        }
        assert_eq!(type_size(u32::MAX), None);
        assert!(!valid(Kind::Fetch, u32::MAX, FI_UINT64) && !valid(Kind::Fetch, FI_SUM, u32::MAX));
    }

    /// Op numbers to probe: every libfabric op and a few beyond.
    fn ops() -> impl Iterator<Item = u32> {
        (0..=FI_ATOMIC_OP_LAST + 2).chain([FI_NOOP, u32::MAX])
    }

    fn run(
        kind: Kind,
        op: u32,
        dt: u32,
        dst: &mut [u8],
        operand: &[u8],
        compare: &[u8],
    ) -> Result<Vec<u8>, ApplyError> {
        let mut result = vec![0xa5; if kind == Kind::Write { 0 } else { dst.len() }];
        apply(kind, op, dt, dst, operand, compare, &mut result).map(|()| result)
    }

    fn enc<T: Elem>(v: &[T]) -> Vec<u8> {
        let mut b = vec![0; v.len() * T::SIZE];
        for (x, c) in v.iter().zip(b.chunks_exact_mut(T::SIZE)) {
            x.store(c);
        }
        b
    }

    fn dec<T: Elem>(b: &[u8]) -> Vec<T> {
        b.chunks_exact(T::SIZE).map(T::load).collect()
    }

    /// Runs one op on typed values; returns the new dst and the result.
    fn typed<T: Elem>(kind: Kind, op: u32, dt: u32, d: &[T], s: &[T], c: &[T]) -> (Vec<T>, Vec<T>) {
        let mut dst = enc(d);
        let result = run(kind, op, dt, &mut dst, &enc(s), &enc(c)).unwrap();
        (dec(&dst), dec(&result))
    }

    /// `op(d, s)` for fi_atomic, checked against fi_fetch_atomic (same dst, result = old dst).
    fn write_op<T: Elem + fmt::Debug>(op: u32, dt: u32, d: &[T], s: &[T]) -> Vec<T> {
        let (new, _) = typed(Kind::Write, op, dt, d, s, &[]);
        let (fetched, old) = typed(Kind::Fetch, op, dt, d, s, &[]);
        assert_eq!(enc(&new), enc(&fetched));
        assert_eq!(enc(&old), enc(d));
        new
    }

    /// fi_compare_atomic; checks that result holds the old dst.
    fn compare_op<T: Elem>(op: u32, dt: u32, d: &[T], s: &[T], c: &[T]) -> Vec<T> {
        let (new, old) = typed(Kind::Compare, op, dt, d, s, c);
        assert_eq!(enc(&old), enc(d));
        new
    }

    fn f80(hex: &str) -> F80 {
        let v = u128::from_str_radix(hex, 16).unwrap();
        F80 { se: (v >> 64) as u16, mant: v as u64 }
    }

    fn bits(x: F80) -> String {
        format!("{:04x}{:016x}", x.se, x.mant)
    }

    /// Exact for every finite `f64` (and infinities, zeros; NaN becomes the default NaN).
    fn f80_from(x: f64) -> F80 {
        let neg = x.is_sign_negative();
        if x.is_nan() {
            return F80::INDEFINITE;
        }
        if x.is_infinite() {
            return F80::signed(neg, F80_INT_BIT, F80_EXP_MAX);
        }
        if x == 0.0 {
            return F80::signed(neg, 0, 0);
        }
        let raw = x.to_bits();
        let (exp, frac) = ((raw >> 52 & 0x7ff) as i32, raw & ((1 << 52) - 1));
        let (exp, sig) = if exp == 0 { (-1022, frac) } else { (exp - 1023, frac | 1 << 52) };
        let shift = sig.leading_zeros() as i32 - 11;
        F80::signed(neg, sig << (11 + shift), (exp - shift + F80_BIAS) as u16)
    }

    /// Exact for the values tests use.
    fn f64_from(x: F80) -> f64 {
        let sign = if x.negative() { -1.0 } else { 1.0 };
        match x.class() {
            F80Class::Zero => sign * 0.0,
            F80Class::Finite { exp, mant } => sign * mant as f64 * 2f64.powi(exp - 63),
            F80Class::Infinite => sign * f64::INFINITY,
            _ => f64::NAN,
        }
    }

    /// A value of any datatype, for the reference model.
    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Model {
        Int(i128),
        Real(f64),
        Cplx(f64, f64),
    }

    fn encode(dt: u32, v: Model) -> Vec<u8> {
        match v {
            Model::Int(x) => match dt {
                FI_INT8 => (x as i8).to_ne_bytes().to_vec(),
                FI_UINT8 => (x as u8).to_ne_bytes().to_vec(),
                FI_INT16 => (x as i16).to_ne_bytes().to_vec(),
                FI_UINT16 => (x as u16).to_ne_bytes().to_vec(),
                FI_INT32 => (x as i32).to_ne_bytes().to_vec(),
                FI_UINT32 => (x as u32).to_ne_bytes().to_vec(),
                FI_INT64 => (x as i64).to_ne_bytes().to_vec(),
                FI_UINT64 => (x as u64).to_ne_bytes().to_vec(),
                FI_INT128 => x.to_ne_bytes().to_vec(),
                FI_UINT128 => (x as u128).to_ne_bytes().to_vec(),
                _ => unreachable!(),
            },
            Model::Real(x) => match dt {
                FI_FLOAT | FI_FLOAT_COMPLEX => (x as f32).to_ne_bytes().to_vec(),
                FI_DOUBLE | FI_DOUBLE_COMPLEX => x.to_ne_bytes().to_vec(),
                FI_LONG_DOUBLE | FI_LONG_DOUBLE_COMPLEX => enc(&[f80_from(x)]),
                _ => unreachable!(),
            },
            Model::Cplx(re, im) => [encode(dt, Model::Real(re)), encode(dt, Model::Real(im))].concat(),
        }
    }

    fn decode(dt: u32, b: &[u8]) -> Model {
        let real = |b: &[u8]| match dt {
            FI_FLOAT | FI_FLOAT_COMPLEX => f32::load(b) as f64,
            FI_DOUBLE | FI_DOUBLE_COMPLEX => f64::load(b),
            _ => f64_from(F80::load(b)),
        };
        match family(dt).unwrap() {
            Family::Integer => Model::Int(match dt {
                FI_INT8 => i8::load(b).into(),
                FI_UINT8 => u8::load(b).into(),
                FI_INT16 => i16::load(b).into(),
                FI_UINT16 => u16::load(b).into(),
                FI_INT32 => i32::load(b).into(),
                FI_UINT32 => u32::load(b).into(),
                FI_INT64 => i64::load(b).into(),
                FI_UINT64 => u64::load(b).into(),
                FI_INT128 => i128::load(b),
                _ => u128::load(b) as i128,
            }),
            Family::Real => Model::Real(real(b)),
            Family::Complex => {
                let half = b.len() / 2;
                Model::Cplx(real(&b[..half]), real(&b[half..]))
            }
        }
    }

    fn truth(v: Model) -> bool {
        match v {
            Model::Int(x) => x != 0,
            Model::Real(x) => x != 0.0,
            Model::Cplx(re, im) => re != 0.0 || im != 0.0,
        }
    }

    fn model_cmp(a: Model, b: Model) -> Option<Ordering> {
        match (a, b) {
            (Model::Int(x), Model::Int(y)) => Some(x.cmp(&y)),
            (Model::Real(x), Model::Real(y)) => x.partial_cmp(&y),
            (Model::Cplx(..), Model::Cplx(..)) if a == b => Some(Ordering::Equal),
            _ => None,
        }
    }

    /// The new dst that fi_atomic(3) prescribes, written from the man page.
    fn model(op: u32, d: Model, s: Model, c: Model) -> Model {
        use Model::*;
        let boolean = |b: bool| match d {
            Int(_) => Int(b.into()),
            Real(_) => Real(b.into()),
            Cplx(..) => Cplx(b.into(), 0.0),
        };
        let swap_if = |b: bool| if b { s } else { d };
        let cmp = model_cmp(c, d);
        match (op, d, s, c) {
            (FI_MIN, ..) => swap_if(model_cmp(d, s) == Some(Ordering::Greater)),
            (FI_MAX, ..) => swap_if(model_cmp(d, s) == Some(Ordering::Less)),
            (FI_SUM, Int(x), Int(y), _) => Int(x.wrapping_add(y)),
            (FI_SUM, Real(x), Real(y), _) => Real(x + y),
            (FI_SUM, Cplx(a, b), Cplx(c, d), _) => Cplx(a + c, b + d),
            (FI_PROD, Int(x), Int(y), _) => Int(x.wrapping_mul(y)),
            (FI_PROD, Real(x), Real(y), _) => Real(x * y),
            (FI_PROD, Cplx(a, b), Cplx(c, d), _) => Cplx(a * c - b * d, a * d + b * c),
            (FI_LOR, ..) => boolean(truth(d) || truth(s)),
            (FI_LAND, ..) => boolean(truth(d) && truth(s)),
            (FI_LXOR, ..) => boolean(truth(d) != truth(s)),
            (FI_BOR, Int(x), Int(y), _) => Int(x | y),
            (FI_BAND, Int(x), Int(y), _) => Int(x & y),
            (FI_BXOR, Int(x), Int(y), _) => Int(x ^ y),
            (FI_ATOMIC_READ, ..) => d,
            (FI_ATOMIC_WRITE, ..) => s,
            (FI_CSWAP, ..) => swap_if(cmp == Some(Ordering::Equal)),
            (FI_CSWAP_NE, ..) => swap_if(cmp != Some(Ordering::Equal)),
            (FI_CSWAP_LE, ..) => swap_if(matches!(cmp, Some(Ordering::Less | Ordering::Equal))),
            (FI_CSWAP_LT, ..) => swap_if(cmp == Some(Ordering::Less)),
            (FI_CSWAP_GE, ..) => swap_if(matches!(cmp, Some(Ordering::Greater | Ordering::Equal))),
            (FI_CSWAP_GT, ..) => swap_if(cmp == Some(Ordering::Greater)),
            (FI_MSWAP, Int(x), Int(y), Int(m)) => Int((y & m) | (x & !m)),
            _ => panic!("no model for op {op} on {d:?}"),
        }
    }

    /// (dst, operand, compare) samples: equal, compare below and above dst, zeros for the
    /// logical operations, both MIN/MAX branches. Results are exact in every real type.
    fn samples(dt: u32) -> [Vec<Model>; 3] {
        use Model::*;
        let ints = |v: [i128; 5]| v.map(Int).to_vec();
        let reals = |v: [f64; 5]| v.map(Real).to_vec();
        let cplx = |v: [(f64, f64); 5]| v.map(|(re, im)| Cplx(re, im)).to_vec();
        match (family(dt).unwrap(), dt) {
            (Family::Integer, FI_UINT8 | FI_UINT16 | FI_UINT32 | FI_UINT64 | FI_UINT128) => {
                [ints([3, 9, 0, 6, 0]), ints([5, 4, 1, 0, 0]), ints([3, 2, 7, 6, 1])]
            }
            (Family::Integer, _) => [ints([3, -2, 0, 6, 0]), ints([5, 4, -1, 0, 0]), ints([3, -6, 2, 6, 1])],
            (Family::Real, _) => [
                reals([3.5, -2.25, 0.0, 6.0, 0.0]),
                reals([5.0, 4.5, -1.0, 0.0, -0.0]),
                reals([3.5, -6.0, 2.0, 6.0, -0.0]),
            ],
            (Family::Complex, _) => [
                cplx([(3.5, -2.0), (0.0, 1.0), (0.0, 0.0), (6.0, 0.5), (-1.5, 0.0)]),
                cplx([(5.0, 4.5), (-1.0, 0.0), (0.0, 0.0), (0.0, -0.0), (2.0, 3.0)]),
                cplx([(3.5, -2.0), (0.0, -1.0), (1.0, 0.0), (6.0, 0.5), (-1.5, -0.0)]),
            ],
        }
    }

    /// Every valid (kind, op, datatype) against the model, 5 elements, in unaligned buffers.
    #[test]
    fn every_valid_combination_matches_the_model() {
        let mut tested = 0;
        for kind in KINDS {
            for op in ops() {
                for dt in datatypes() {
                    if !valid(kind, op, dt) {
                        continue;
                    }
                    tested += 1;
                    let [d, s, c] = samples(dt);
                    let bytes = |v: &[Model]| v.iter().flat_map(|&x| encode(dt, x)).collect::<Vec<u8>>();
                    let old = bytes(&d);
                    let mut dst_buf = [vec![0], old.clone()].concat();
                    let operand = [vec![0], bytes(&s)].concat();
                    let compare = if kind == Kind::Compare { [vec![0], bytes(&c)].concat() } else { vec![0] };
                    let mut result_buf = vec![0x5a; if kind == Kind::Write { 1 } else { old.len() + 1 }];
                    let r = apply(kind, op, dt, &mut dst_buf[1..], &operand[1..], &compare[1..], &mut result_buf[1..]);
                    assert_eq!(r, Ok(()), "{kind:?} op {op} dt {dt}");
                    let expected: Vec<Model> = (0..5).map(|i| model(op, d[i], s[i], c[i])).collect();
                    assert_eq!(dst_buf[1..], bytes(&expected), "{kind:?} op {op} dt {dt}: {expected:?}");
                    if kind != Kind::Write {
                        assert_eq!(result_buf[1..], old, "{kind:?} op {op} dt {dt}: result");
                    }
                }
            }
        }
        // Write 152 (10 ops), fetch 168 (adds READ), compare 94.
        assert_eq!(tested, 414);
    }

    /// libfabric 1.17 prov/util/src/util_atomic.c, the open-coded tables, transcribed (with
    /// INT128/UINT128 as its builds with 128-bit support have them): which datatypes each op
    /// has, and ofi_atomic.h's op ranges per kind.
    #[test]
    fn valid_matches_libfabric_util_tables() {
        #[derive(PartialEq)]
        enum Types {
            All,
            RealNoComplex,
            Int,
        }
        let table = [
            (FI_MIN, Types::RealNoComplex),
            (FI_MAX, Types::RealNoComplex),
            (FI_SUM, Types::All),
            (FI_PROD, Types::All),
            (FI_LOR, Types::All),
            (FI_LAND, Types::All),
            (FI_BOR, Types::Int),
            (FI_BAND, Types::Int),
            (FI_LXOR, Types::All),
            (FI_BXOR, Types::Int),
            (FI_ATOMIC_READ, Types::All),
            (FI_ATOMIC_WRITE, Types::All),
            (FI_CSWAP, Types::All),
            (FI_CSWAP_NE, Types::All),
            (FI_CSWAP_LE, Types::RealNoComplex),
            (FI_CSWAP_LT, Types::RealNoComplex),
            (FI_CSWAP_GE, Types::RealNoComplex),
            (FI_CSWAP_GT, Types::RealNoComplex),
            (FI_MSWAP, Types::Int),
        ];
        for kind in KINDS {
            for op in ops() {
                for dt in (0..=FI_UINT128 + 2).chain([FI_VOID, u32::MAX]) {
                    let kind_has_op = match kind {
                        Kind::Write => op <= FI_ATOMIC_WRITE && op != FI_ATOMIC_READ,
                        Kind::Fetch => op <= FI_ATOMIC_WRITE,
                        Kind::Compare => (FI_CSWAP..=FI_MSWAP).contains(&op),
                    };
                    let type_ok = table.iter().any(|(o, types)| {
                        *o == op
                            && match types {
                                Types::All => dt <= FI_UINT128,
                                Types::RealNoComplex => dt <= FI_UINT128 && !COMPLEXES.contains(&dt),
                                Types::Int => INTEGERS.contains(&dt),
                            }
                    });
                    assert_eq!(valid(kind, op, dt), kind_has_op && type_ok, "{kind:?} op {op} dt {dt}");
                }
            }
        }
    }

    #[test]
    fn valid_covers_what_openshmem_needs() {
        let ints = [FI_INT32, FI_INT64, FI_UINT32, FI_UINT64];
        for dt in ints {
            for op in [FI_SUM, FI_ATOMIC_WRITE, FI_BAND, FI_BOR, FI_BXOR] {
                assert!(valid(Kind::Write, op, dt) && valid(Kind::Fetch, op, dt), "op {op} dt {dt}");
            }
            assert!(valid(Kind::Fetch, FI_ATOMIC_READ, dt));
            assert!(valid(Kind::Compare, FI_CSWAP, dt) && valid(Kind::Compare, FI_MSWAP, dt));
        }
        for dt in [FI_FLOAT, FI_DOUBLE, FI_LONG_DOUBLE] {
            assert!(valid(Kind::Write, FI_ATOMIC_WRITE, dt) && valid(Kind::Fetch, FI_ATOMIC_WRITE, dt));
            assert!(valid(Kind::Fetch, FI_ATOMIC_READ, dt));
            assert!(valid(Kind::Compare, FI_CSWAP, dt));
        }
        for dt in [FI_FLOAT, FI_DOUBLE, FI_LONG_DOUBLE, FI_INT16, FI_INT32, FI_INT64] {
            for op in [FI_MIN, FI_MAX, FI_SUM, FI_PROD] {
                assert!(valid(Kind::Write, op, dt) && valid(Kind::Fetch, op, dt), "op {op} dt {dt}");
            }
        }
        for dt in COMPLEXES {
            assert!(valid(Kind::Write, FI_SUM, dt) && valid(Kind::Write, FI_PROD, dt));
        }
    }

    #[test]
    fn type_sizes() {
        let sizes = [1, 1, 2, 2, 4, 4, 8, 8, 4, 8, 8, 16, 16, 32, 16, 16];
        for (dt, size) in (0..).zip(sizes) {
            assert_eq!(type_size(dt), Some(size), "dt {dt}");
        }
        for dt in [FI_UINT128 + 1, 100, FI_VOID, u32::MAX] {
            assert_eq!(type_size(dt), None);
            assert!(KINDS.iter().all(|&k| ops().all(|op| !valid(k, op, dt))));
        }
    }

    macro_rules! integer_boundaries {
        ($($t:ty => $dt:expr),*) => {$({
            const MIN: $t = <$t>::MIN;
            const MAX: $t = <$t>::MAX;
            let signed = MIN != 0;
            // SUM wraps both ways; PROD wraps (MAX * 2 == !1 in two's complement).
            assert_eq!(write_op::<$t>(FI_SUM, $dt, &[MAX, MIN, MAX], &[1, MIN, MAX]),
                [MIN, MIN.wrapping_mul(2), !1], "{}", stringify!($t));
            assert_eq!(write_op::<$t>(FI_PROD, $dt, &[MAX, MIN, 3], &[2, !0, 5]), [!1, MIN.wrapping_neg(), 15]);
            // MIN/MAX compare as the type: !0 is -1 when signed, MAX when not.
            let (lo, hi) = if signed { (!0, 0) } else { (0, !0) };
            assert_eq!(write_op::<$t>(FI_MIN, $dt, &[0, MAX, MIN], &[!0, MIN, MAX]), [lo, MIN, MIN]);
            assert_eq!(write_op::<$t>(FI_MAX, $dt, &[0, MAX, MIN], &[!0, MIN, MAX]), [hi, MAX, MAX]);
            assert_eq!(write_op::<$t>(FI_BOR, $dt, &[0b1100, MIN], &[0b1010, MAX]), [0b1110, !0]);
            assert_eq!(write_op::<$t>(FI_BAND, $dt, &[0b1100, !0], &[0b1010, MIN]), [0b1000, MIN]);
            assert_eq!(write_op::<$t>(FI_BXOR, $dt, &[0b1100, !0], &[0b1010, MAX]), [0b0110, MIN]);
            assert_eq!(write_op::<$t>(FI_LOR, $dt, &[0, 0, MIN, 7], &[0, MAX, 0, !0]), [0, 1, <$t>::from(signed), 1]);
            assert_eq!(write_op::<$t>(FI_LAND, $dt, &[0, 0, MAX, 7], &[0, MAX, 0, !0]), [0, 0, 0, 1]);
            assert_eq!(write_op::<$t>(FI_LXOR, $dt, &[0, 0, MAX, 7], &[0, MAX, 0, !0]), [0, 1, 1, 0]);
            // Fetch WRITE swaps, READ reads.
            let (new, old) = typed::<$t>(Kind::Fetch, FI_ATOMIC_WRITE, $dt, &[MIN, MAX], &[MAX, 1], &[]);
            assert_eq!((new, old), (vec![MAX, 1], vec![MIN, MAX]));
            let (new, old) = typed::<$t>(Kind::Fetch, FI_ATOMIC_READ, $dt, &[MIN, MAX], &[], &[]);
            assert_eq!((new, old), (vec![MIN, MAX], vec![MIN, MAX]));
            // The CSWAP family compares `compare OP dst`, as the type orders.
            let d = [5, 5, 5, MAX, 0];
            let c = [5, 4, 6, MIN, !0];
            let s = [1, 2, 3, 4, 9];
            assert_eq!(compare_op::<$t>(FI_CSWAP, $dt, &d, &s, &c), [1, 5, 5, MAX, 0]);
            assert_eq!(compare_op::<$t>(FI_CSWAP_NE, $dt, &d, &s, &c), [5, 2, 3, 4, 9]);
            let below = if signed { 9 } else { 0 };
            let above = if signed { 0 } else { 9 };
            assert_eq!(compare_op::<$t>(FI_CSWAP_LE, $dt, &d, &s, &c), [1, 2, 5, 4, below]);
            assert_eq!(compare_op::<$t>(FI_CSWAP_LT, $dt, &d, &s, &c), [5, 2, 5, 4, below]);
            assert_eq!(compare_op::<$t>(FI_CSWAP_GE, $dt, &d, &s, &c), [1, 5, 3, MAX, above]);
            assert_eq!(compare_op::<$t>(FI_CSWAP_GT, $dt, &d, &s, &c), [5, 5, 3, MAX, above]);
            // MSWAP takes the operand's bits where compare has ones.
            assert_eq!(compare_op::<$t>(FI_MSWAP, $dt, &[0b1100, MAX, 0, 0x55], &[0b1010, 0, !0, 0x2a], &[0b0110, !0, 0, 0x0f]),
                [0b1010, 0, 0, 0x5a]);
        })*};
    }

    #[test]
    fn integers_at_their_boundaries() {
        integer_boundaries!(i8 => FI_INT8, u8 => FI_UINT8, i16 => FI_INT16, u16 => FI_UINT16, i32 => FI_INT32,
            u32 => FI_UINT32, i64 => FI_INT64, u64 => FI_UINT64, i128 => FI_INT128, u128 => FI_UINT128);
    }

    fn same_f64(a: &[f64], b: &[f64]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()))
    }

    /// Float semantics, checked on f32, f64 and long double (through exact conversions).
    #[test]
    fn real_semantics() {
        const NAN: f64 = f64::NAN;
        const INF: f64 = f64::INFINITY;
        fn check(op: u32, d: &[f64], s: &[f64], c: Option<&[f64]>, want: &[f64]) {
            for dt in REALS {
                let conv = |v: &[f64]| v.iter().flat_map(|&x| encode(dt, Model::Real(x))).collect::<Vec<u8>>();
                let kind = if c.is_some() { Kind::Compare } else { Kind::Write };
                let mut dst = conv(d);
                run(kind, op, dt, &mut dst, &conv(s), &c.map(conv).unwrap_or_default()).unwrap();
                let got: Vec<f64> = dst
                    .chunks_exact(type_size(dt).unwrap())
                    .map(|b| match decode(dt, b) {
                        Model::Real(x) => x,
                        _ => unreachable!(),
                    })
                    .collect();
                assert!(same_f64(&got, want), "op {op} dt {dt}: {got:?} != {want:?}");
            }
        }
        // MIN/MAX: `if (dst > operand)`: NaN on either side and equal zeros leave dst alone.
        check(
            FI_MIN,
            &[1.0, NAN, 1.0, 0.0, -0.0, -INF, 2.5],
            &[-1.0, 1.0, NAN, -0.0, 0.0, 0.0, INF],
            None,
            &[-1.0, NAN, 1.0, 0.0, -0.0, -INF, 2.5],
        );
        check(
            FI_MAX,
            &[1.0, NAN, 1.0, 0.0, -0.0, -INF, 2.5],
            &[-1.0, 1.0, NAN, -0.0, 0.0, 0.0, INF],
            None,
            &[1.0, NAN, 1.0, 0.0, -0.0, 0.0, INF],
        );
        check(
            FI_SUM,
            &[1.5, INF, INF, 0.0, -0.0, NAN, 1e30],
            &[-0.25, -INF, 1.0, -0.0, -0.0, 1.0, -1e30],
            None,
            &[1.25, NAN, INF, 0.0, -0.0, NAN, 0.0],
        );
        check(
            FI_PROD,
            &[1.5, INF, -INF, 0.0, -3.0, NAN],
            &[-0.25, 0.0, -2.0, -5.0, 0.5, 1.0],
            None,
            &[-0.375, NAN, INF, -0.0, -1.5, NAN],
        );
        // Logical ops: NaN is true, -0 is false; the result is 1.0 or 0.0.
        check(FI_LOR, &[0.0, -0.0, NAN, 0.0, 2.0], &[-0.0, 0.0, 0.0, 0.5, 3.0], None, &[0.0, 0.0, 1.0, 1.0, 1.0]);
        check(FI_LAND, &[0.0, -0.0, NAN, 0.0, 2.0], &[-0.0, 1.0, NAN, 0.5, -INF], None, &[0.0, 0.0, 1.0, 0.0, 1.0]);
        check(FI_LXOR, &[0.0, -0.0, NAN, 0.0, 2.0], &[-0.0, 1.0, NAN, 0.5, -INF], None, &[0.0, 1.0, 0.0, 1.0, 0.0]);
        // CSWAP: value equality (+0 == -0, NaN equals nothing), ordered compares false on NaN.
        let d = [0.0, NAN, 1.0, 2.0, 2.0, NAN];
        let c = [-0.0, NAN, 1.0, 1.0, 3.0, 1.0];
        let s = [7.0, 7.0, 7.0, 7.0, 7.0, 7.0];
        check(FI_CSWAP, &d, &s, Some(&c), &[7.0, NAN, 7.0, 2.0, 2.0, NAN]);
        check(FI_CSWAP_NE, &d, &s, Some(&c), &[0.0, 7.0, 1.0, 7.0, 7.0, 7.0]);
        check(FI_CSWAP_LE, &d, &s, Some(&c), &[7.0, NAN, 7.0, 7.0, 2.0, NAN]);
        check(FI_CSWAP_LT, &d, &s, Some(&c), &[0.0, NAN, 1.0, 7.0, 2.0, NAN]);
        check(FI_CSWAP_GE, &d, &s, Some(&c), &[7.0, NAN, 7.0, 2.0, 7.0, NAN]);
        check(FI_CSWAP_GT, &d, &s, Some(&c), &[0.0, NAN, 1.0, 2.0, 7.0, NAN]);
        // Plain copies keep NaN payloads bit for bit.
        for dt in REALS {
            let size = type_size(dt).unwrap();
            let payload: Vec<u8> = (1..=size as u8).map(|b| b | 0x80).collect();
            let mut dst = vec![0; size];
            run(Kind::Write, FI_ATOMIC_WRITE, dt, &mut dst, &payload, &[]).unwrap();
            assert_eq!(dst, payload);
        }
    }

    #[test]
    fn complex_sum_product_and_logic() {
        type C32 = Complex<f32>;
        type C64 = Complex<f64>;
        let c32 = |re, im| C32 { re, im };
        let c64 = |re, im| C64 { re, im };
        assert_eq!(
            write_op(FI_SUM, FI_FLOAT_COMPLEX, &[c32(1.0, 2.0), c32(-0.5, 0.0)], &[c32(3.0, -4.0), c32(0.5, 1.0)]),
            [c32(4.0, -2.0), c32(0.0, 1.0)]
        );
        // (1 + 2i)(3 - 4i) = 11 + 2i; i * i = -1.
        assert_eq!(
            write_op(FI_PROD, FI_DOUBLE_COMPLEX, &[c64(1.0, 2.0), c64(0.0, 1.0)], &[c64(3.0, -4.0), c64(0.0, 1.0)]),
            [c64(11.0, 2.0), c64(-1.0, 0.0)]
        );
        let l = |v: f64| f80_from(v);
        let cl = |re, im| Complex { re: l(re), im: l(im) };
        let got =
            write_op(FI_PROD, FI_LONG_DOUBLE_COMPLEX, &[cl(1.0, 2.0), cl(0.5, -0.5)], &[cl(3.0, -4.0), cl(2.0, 2.0)]);
        assert_eq!(got.iter().map(|z| (f64_from(z.re), f64_from(z.im))).collect::<Vec<_>>(), [(11.0, 2.0), (2.0, 0.0)]);
        // An infinite factor times a finite non-zero one is infinite (C11 Annex G), though the
        // plain formula gives NaN + iNaN.
        let [z] = write_op(FI_PROD, FI_DOUBLE_COMPLEX, &[c64(f64::INFINITY, f64::NAN)], &[c64(1.0, 0.0)])[..] else {
            unreachable!()
        };
        assert!(z.re.is_infinite() || z.im.is_infinite(), "{z:?}");
        // A complex value is true when either part is non-zero; results are 1 + 0i or 0 + 0i.
        let d = [c32(0.0, 1.0), c32(0.0, -0.0), c32(f32::NAN, 0.0), c32(2.0, 0.0)];
        let s = [c32(0.0, 0.0), c32(0.0, 0.0), c32(0.0, 0.0), c32(0.0, 3.0)];
        assert_eq!(
            write_op(FI_LOR, FI_FLOAT_COMPLEX, &d, &s),
            [c32(1.0, 0.0), c32(0.0, 0.0), c32(1.0, 0.0), c32(1.0, 0.0)]
        );
        assert_eq!(
            write_op(FI_LAND, FI_FLOAT_COMPLEX, &d, &s),
            [c32(0.0, 0.0), c32(0.0, 0.0), c32(0.0, 0.0), c32(1.0, 0.0)]
        );
        assert_eq!(
            write_op(FI_LXOR, FI_FLOAT_COMPLEX, &d, &s),
            [c32(1.0, 0.0), c32(0.0, 0.0), c32(1.0, 0.0), c32(0.0, 0.0)]
        );
        // CSWAP compares both parts.
        let d = [c64(1.0, 2.0), c64(1.0, 2.0), c64(0.0, 0.0)];
        let c = [c64(1.0, 2.0), c64(1.0, -2.0), c64(-0.0, -0.0)];
        let s = [c64(9.0, 9.0); 3];
        assert_eq!(compare_op(FI_CSWAP, FI_DOUBLE_COMPLEX, &d, &s, &c), [s[0], d[1], s[2]]);
        assert_eq!(compare_op(FI_CSWAP_NE, FI_DOUBLE_COMPLEX, &d, &s, &c), [d[0], s[1], d[2]]);
    }

    /// Complex products from gcc 12 on x86_64 (`float/double _Complex` `*`, inputs then real
    /// and imaginary result, as bits), including Annex G's recovery of infinities.
    #[test]
    fn complex_products_match_gcc() {
        let f32_cases = [
            "805ca3b8 3cd8c02b 3cd0a990 bb7bd5a1 38d5394a 3a30abb4",
            "3c945c06 800a5145 01d27ff2 007ca0d2 000f3fb4 000241ce",
            "c91aa909 c9070bb4 ff0fee5c ca153a52 7f800000 7f800000",
            "ff09ed8b ef758a57 7fad2487 71ef101f 7f800000 ff800000",
            "ff9a7901 ff800000 49d73a22 7e5a2440 7f800000 ff800000",
            "fef8ae18 bdfa1781 ff800000 7f800000 7f800000 ffc00000",
            "80000000 37633974 ff800000 ffd88acb ffc00000 ff800000",
            "ffa88aaf 00000000 ff800000 3e7c5248 ffc00000 ffc00000",
        ];
        for case in f32_cases {
            let v: Vec<f32> = case.split(' ').map(|h| f32::from_bits(u32::from_str_radix(h, 16).unwrap())).collect();
            let z = Complex { re: v[0], im: v[1] }.mul(Complex { re: v[2], im: v[3] });
            let want = [v[4] as f64, v[5] as f64];
            assert!(same_f64(&[z.re as f64, z.im as f64], &want), "{case}: {z:?}");
        }
        let f64_cases = [
            "221fe225b4dc3fc8 a278f62e1ffb9f48 8000000000000000 22305d44e05fa291 04b987b0806546d4 04604e00b822319d",
            "bee889129c0f723f 000f234f0b4a0329 bedafd589df33705 0020571c734d90c8 3dd4b19ecbfc927f 8000001f70ec38e9",
            "fff4ee59abdd0407 c0ab25801fa49954 ffd3c21ebb9c951a 40a88ddf1acf664b 7ff0000000000000 7ff0000000000000",
            "bfd519b0395693d9 3fb5716e782b91b4 7ff0000000000000 3fb5860a265b5da5 fff0000000000000 7ff0000000000000",
            "0000cbad16c469b8 c015c99eca5d49d4 7ff0000000000000 fffb07798b943267 7ff0000000000000 fff0000000000000",
            "bfc5671d7d2d6bfe fff0000000000000 3f69a14abfc2a361 fff7a10c0795e1a9 fff8000000000000 fff0000000000000",
            "8000000000000000 7ff3fb9addd6c073 7ff0000000000000 fff1170aa73daaa7 fff8000000000000 fff8000000000000",
        ];
        for case in f64_cases {
            let v: Vec<f64> = case.split(' ').map(|h| f64::from_bits(u64::from_str_radix(h, 16).unwrap())).collect();
            let z = Complex { re: v[0], im: v[1] }.mul(Complex { re: v[2], im: v[3] });
            assert!(same_f64(&[z.re, z.im], &v[4..]), "{case}: {z:?}");
        }
    }

    /// `long double` `+`, `-`, `*` from gcc 12 on x86_64 (x87): a, b, a + b, a - b, a * b as
    /// 80-bit patterns (sign+exponent, significand), over normals, denormals, pseudo-denormals,
    /// overflow, underflow, infinities, NaNs and the encodings the x87 rejects.
    const F80_ARITHMETIC: [&str; 47] = [
        "00000000000000051467 00000000000000061f47 000000000000000b33ae 80000000000000010ae0 00000000000000000000",
        "80005fcbccadd9c15bff 800073821282071601a3 8001d34ddf2fe0d75da2 000013b645d42d54a5a4 00000000000000000000",
        "00000880aa9a17f66e52 3fedc7ad53657066c3d8 3fedc7ad53657066c3d8 bfedc7ad53657066c3d8 000000000350e32b1449",
        "0000000000000009c4c1 6338800000000000059d 6338800000000000059d e338800000000000059d 230e9c4c1000000006db",
        "00005ce78d985cba4e33 c015db59b6436854afbb c015db59b6436854afbb 4015db59b6436854afbb 80179f35498d4cd9977c",
        "8000000000000007ad4c 3fb18000000000000000 3fb18000000000000000 bfb18000000000000000 80000000000000000000",
        "fffafad28b51f5701904 fffbe000000000000000 fffcaeb4a2d47d5c0641 7ffac52d74ae0a8fe6fc 7fff8000000000000000",
        "fffddf0c7c5635052b57 fffea67f03ec27e04b1a ffff8000000000000000 7ffcdbe317043576d5ba 7fff8000000000000000",
        "fff19000000000000000 7ff1a000000000000000 7fee8000000000000000 fff29800000000000000 ffff8000000000000000",
        "7ffcabac3a18ff1afe2a bff5f9b6d54bb859f395 7ffcabac3a18ff1afe2a 7ffcabac3a18ff1afe2a fff3a7751ffcb1528bf6",
        "7ffbd3d8c1ad794db559 c05ba9edc65df30c9472 7ffbd3d8c1ad794db559 7ffbd3d8c1ad794db559 ffff8000000000000000",
        "fffdc812710f3fead0c0 9ec18b1d9ea4f23f96c0 fffdc812710f3fead0c0 fffdc812710f3fead0c0 5ebfd97252ecc2b36aca",
        "fff196676a82ad973eed 7fefbf6bf38254c363ec fff0cd18db4430cccbe4 fff1c642676342c817e8 ffff8000000000000000",
        "7fff8000000000000000 7fff8000000000000000 7fff8000000000000000 ffffc000000000000000 7fff8000000000000000",
        "ffff8000000000000000 7fff8000000000000000 ffffc000000000000000 ffff8000000000000000 ffff8000000000000000",
        "ffff8000000000000000 00000000000000000000 ffff8000000000000000 ffff8000000000000000 ffffc000000000000000",
        "7fefd2e46f006cf5530a 7ff0f5cd19e0e30e8be4 7ff1af9fa8b08cc49ab4 fff08c5ae260ac93e25f 7fff8000000000000000",
        "a00a8000000000e6244d 9fef8000000000010ad8 a00a8000001000e6244d a009ffffffe001cc489a 0000010000000001ce5e",
        "5feac96b822d7aca23ff 600b8000000000000c93 600b8000000064b5cdaa e00affffffff369496f9 7ff6c96b822d7aca37c8",
        "f997f2f1b4177c73262e f995d53b5822046f5439 f9989420450ffec77d9e f997bda2de0efb575120 7fff8000000000000000",
        "d5f8800000000000cfd5 562e80000000aed4cc24 562e80000000aed4ca24 d62e80000000aed4ce24 ec2780000000aed59bf9",
        "a013fa7a2c2ac114c490 200f878ed283044dfdf4 a013f2013f0290cfe4b1 a01481798ca978acd238 802484a22b07747ef15a",
        "8ecad072c5bef6c30206 0ec5c352b66523c7e2af 8ecaca58300bcda4c2f1 8ecad68d5b721fe1411b 80000000000000000000",
        "fea2c000000000000000 7ea2c000000000000000 00000000000000000000 fea3c000000000000000 ffff8000000000000000",
        "c057a000000000000000 4057a000000000000000 00000000000000000000 c058a000000000000000 c0afc800000000000000",
        "8846a000000000000000 0846a000000000000000 00000000000000000000 8847a000000000000000 80000000000000000000",
        "80008cc0c17edb80e3fa 0000ccc8b27fd1a91fca 00004007f100f6283bd0 8002acc4b9ff569501e2 80000000000000000000",
        "0000956c37ccda6a7c15 0000d277d4c0b038389f 0002b3f20646c5515a5a 80003d0b9cf3d5cdbc8a 00000000000000000000",
        "8000fdc36fa4dc9cdffb 80000000000000000000 8001fdc36fa4dc9cdffb 8001fdc36fa4dc9cdffb 00000000000000000000",
        "7fff1e2db1af2d9345c8 ffeaa6e7c60157e7c13a ffffc000000000000000 ffffc000000000000000 ffffc000000000000000",
        "7fffc0000000000000a0 3967a2ae12f1912121d8 7fffc0000000000000a0 7fffc0000000000000a0 7fffc0000000000000a0",
        "ffffc00000000000004e 7fffc00000000000006f 7fffc00000000000006f 7fffc00000000000006f 7fffc00000000000006f",
        "ffffc0000000000000b2 7fff80000000000000aa ffffc0000000000000b2 ffffc0000000000000b2 ffffc0000000000000b2",
        "ffff80000000000000fb ffff8000000000000000 ffffc0000000000000fb ffffc0000000000000fb ffffc0000000000000fb",
        "7fff800000000000000e 7fff80000000000000cc 7fffc0000000000000cc 7fffc0000000000000cc 7fffc0000000000000cc",
        "7fffc000000000000001 ffffc000000000000001 7fffc000000000000001 7fffc000000000000001 7fffc000000000000001",
        "001689a27316dafbdef2 fffbd9ae64dadf71ad8c fffbd9ae64dadf71ad8c 7ffbd9ae64dadf71ad8c c012ea10ec637529cce3",
        "801f8a3f5a8e5b847793 bfd2c9188cc8fff3d0bd bfd2c9188cc8fff3d0bd 3fd2c9188cc8fff3d0bd 00000001b2640045d1c4",
        "0002cebcde438c770a79 405df50231ae012fc8cd 405df50231ae012fc8cd c05df50231ae012fc8cd 0061c5dc864f0dd45974",
        "0041eabe56ea283fe168 400ebf5ba0f9f8daad77 400ebf5ba0f9f8daad77 c00ebf5ba0f9f8daad77 0051af78081dc6e9c423",
        "804d8000000000000000 00608000000007dc5c1e 005fffffe0000fb8b83c 80608000100007dc5c1e 80000000000000000000",
        "00029490381fdf353c1e 8001c63234ee3253000f 000062ee3b518c17782d 0002f7a95296f85ebc26 80000000000000000000",
        "003ab000000000000000 803ab000000000000000 00000000000000000000 003bb000000000000000 80000000000000000000",
        "8f29585e8ffdc5f5a856 c013f6634a8852f376e1 ffffc000000000000000 ffffc000000000000000 ffffc000000000000000",
        "80000000000000000000 000000000000000561ad 000000000000000561ad 800000000000000561ad 80000000000000000000",
        "3fff8000000000000000 3fbf8000000000000000 3fff8000000000000000 3ffeffffffffffffffff 3fbf8000000000000000",
        "3fff8000000000000001 3fbf8000000000000000 3fff8000000000000002 3fff8000000000000000 3fbf8000000000000001",
    ];

    #[test]
    fn long_double_arithmetic_matches_x87() {
        for case in F80_ARITHMETIC {
            let v: Vec<F80> = case.split(' ').map(f80).collect();
            let (a, b) = (v[0], v[1]);
            assert_eq!(bits(a.add(b)), bits(v[2]), "{case}: sum");
            assert_eq!(bits(a.sub(b)), bits(v[3]), "{case}: difference");
            assert_eq!(bits(a.mul(b)), bits(v[4]), "{case}: product");
        }
        // Through apply, several at once: SUM and PROD write the 10 value bytes only.
        let (a, b): (Vec<F80>, Vec<F80>) = F80_ARITHMETIC.iter().map(|c| (f80(&c[..20]), f80(&c[21..41]))).unzip();
        let mut dst = enc(&a);
        for (i, pad) in dst.chunks_exact_mut(16).enumerate() {
            pad[10..].fill(i as u8);
        }
        run(Kind::Write, FI_SUM, FI_LONG_DOUBLE, &mut dst, &enc(&b), &[]).unwrap();
        for (i, (got, case)) in dst.chunks_exact(16).zip(F80_ARITHMETIC).enumerate() {
            assert_eq!(bits(F80::load(got)), case[42..62], "{case}");
            assert!(got[10..].iter().all(|&p| p == i as u8), "padding kept");
        }
        let mut dst = enc(&a);
        run(Kind::Write, FI_PROD, FI_LONG_DOUBLE, &mut dst, &enc(&b), &[]).unwrap();
        for (got, case) in dst.chunks_exact(16).zip(F80_ARITHMETIC) {
            assert_eq!(bits(F80::load(got)), case[84..104], "{case}");
        }
    }

    /// `long double _Complex` `*` from gcc 12 (a, b, c, d, then real and imaginary result).
    #[test]
    fn long_double_complex_products_match_gcc() {
        let cases = [
            "4031f000000000000000 0000e46ce401baaf1303 402e81d151f3a957f244 c02ed17b3e9fb9e1ca93 4060f36879a8dd84e640 c061c4638ab5be43adea",
            "3ffab08e61de2beacf8c 8000e6ad23f1e116aada 8000000000000002f625 0000f115eb68d1460487 800000000000000020ae 00000a645282b2c94e43",
            "bfd0bdb259ba85060891 002e9bc9b95af3f75531 bfd1993e8de2b271dc95 000077023eba278926db 3fa2e31be3ead78c4c27 80005d41a0fa4f9b9062",
            "8040d4778f1beb3b8e53 4039800000000000006d 7ffd8771072609aae186 c003edfb33bffd125997 c03dd3a838f2ef26bbb0 7fff8000000000000000",
            "7ffcbe444a65814e2acb 470155b4dc5eef63394a c018d02e1802b8a7d4a1 02e624f949ed7e60ba41 ffff8000000000000000 ffffc000000000000000",
            "7fb5de2abdc27186d518 ffff39660261de6b15b1 fcd86d8d424028b7c535 ffbf800759423558495f ffffc000000000000000 ffff8000000000000000",
            "801bcfb0193b9492977c 7fa280000000000518f0 7fff80000000000000a9 7fcbf851afe4d0ccdbc0 ffff8000000000000000 ffff8000000000000000",
            "51a0b13cb1ddbd355941 80000000000000000000 7ffccc9d5a9fa31c46c3 ffff8000000000000082 7fff8000000000000000 ffffc000000000000000",
            "d6edb1ed06fb88e21cd6 00449b71b3ebe038908c 00000000000000000000 ffff8000000000000004 ffffc000000000000004 ffffc000000000000004",
            "800000000000000c85a5 c0579000000000000000 7fff8000000000000000 0000ead7fa3bbed49e53 ffff8000000000000000 ffff8000000000000000",
            "7fff8000000000000000 ffffc00000000000002a 981cf000000000000000 981d8000000000000000 ffff8000000000000000 ffff8000000000000000",
            "ffff8000000000000079 8023b8170412e73bfccc ffff8000000000000000 001dc79c40e90660981f ffffc000000000000000 7fff8000000000000000",
            "ffffc00000000000002a ffffc000000000000090 7fff8000000000000000 800022c01c873c9ab531 ffffc000000000000000 ffffc000000000000000",
        ];
        for case in cases {
            let v: Vec<F80> = case.split(' ').map(f80).collect();
            let mut dst = enc(&[Complex { re: v[0], im: v[1] }]);
            run(Kind::Fetch, FI_PROD, FI_LONG_DOUBLE_COMPLEX, &mut dst, &enc(&[Complex { re: v[2], im: v[3] }]), &[])
                .unwrap();
            let [z] = dec::<Complex<F80>>(&dst)[..] else { unreachable!() };
            assert_eq!((bits(z.re), bits(z.im)), (bits(v[4]), bits(v[5])), "{case}");
        }
    }

    #[test]
    fn long_double_comparisons() {
        let pseudo_denormal = f80("00008000000000000001");
        let same_normal = f80("00018000000000000001");
        let zero = f80("00000000000000000000");
        let neg_zero = f80("80000000000000000000");
        let nan = f80("7fffc000000000000000");
        let unnormal = f80("3fff4000000000000000");
        let one = f80("3fff8000000000000000");
        let two = f80("40008000000000000000");
        let minus_one = f80("bfff8000000000000000");
        let inf = f80("7fff8000000000000000");
        let denormal = f80("00000000000000000001");
        assert!(pseudo_denormal == same_normal && zero == neg_zero);
        assert!(nan != nan && unnormal != unnormal && unnormal.partial_cmp(&one).is_none());
        let ascending = [F80::INFINITY.copysign(minus_one), minus_one, neg_zero, denormal, one, two, inf];
        for (i, a) in ascending.iter().enumerate() {
            for (j, b) in ascending.iter().enumerate() {
                assert_eq!(a.partial_cmp(b), Some(i.cmp(&j)));
            }
        }
        let s = f80("40018000000000000000");
        let d = [one, one, one, nan, unnormal, pseudo_denormal, zero];
        let c = [one, two, minus_one, nan, unnormal, same_normal, neg_zero];
        let swapped = |mask: [bool; 7]| -> Vec<String> {
            d.iter().zip(mask).map(|(&x, m)| bits(if m { s } else { x })).collect()
        };
        let check = |op, mask| {
            let got = compare_op(op, FI_LONG_DOUBLE, &d, &[s; 7], &c);
            assert_eq!(got.into_iter().map(bits).collect::<Vec<_>>(), swapped(mask), "op {op}");
        };
        check(FI_CSWAP, [true, false, false, false, false, true, true]);
        check(FI_CSWAP_NE, [false, true, true, true, true, false, false]);
        check(FI_CSWAP_LE, [true, false, true, false, false, true, true]);
        check(FI_CSWAP_LT, [false, false, true, false, false, false, false]);
        check(FI_CSWAP_GE, [true, true, false, false, false, true, true]);
        check(FI_CSWAP_GT, [false, true, false, false, false, false, false]);
        let got = write_op(FI_MIN, FI_LONG_DOUBLE, &[one, two, nan, one, zero], &[two, one, one, unnormal, neg_zero]);
        assert_eq!(got.into_iter().map(bits).collect::<Vec<_>>(), [one, one, nan, one, zero].map(bits));
        let got = write_op(FI_MAX, FI_LONG_DOUBLE, &[one, two, nan, one, zero], &[two, one, one, unnormal, neg_zero]);
        assert_eq!(got.into_iter().map(bits).collect::<Vec<_>>(), [two, two, nan, one, zero].map(bits));
        // Logical ops: NaN and rejected encodings are non-zero; the result is 1.0L or 0.0L.
        let got = write_op(FI_LOR, FI_LONG_DOUBLE, &[zero, neg_zero, nan, unnormal], &[neg_zero, zero, zero, zero]);
        assert_eq!(got.into_iter().map(bits).collect::<Vec<_>>(), [zero, zero, one, one].map(bits));
        let got = write_op(FI_LXOR, FI_LONG_DOUBLE, &[zero, denormal, nan, unnormal], &[neg_zero, zero, one, one]);
        assert_eq!(got.into_iter().map(bits).collect::<Vec<_>>(), [zero, one, zero, zero].map(bits));
        // Copies (WRITE, CSWAP) move all 16 bytes.
        let mut dst = vec![0u8; 16];
        let operand: Vec<u8> = (1..=16).collect();
        run(Kind::Fetch, FI_ATOMIC_WRITE, FI_LONG_DOUBLE, &mut dst, &operand, &[]).unwrap();
        assert_eq!(dst, operand);
    }

    #[test]
    fn combinations_not_valid_are_refused_and_leave_memory_alone() {
        let mut refused = 0;
        for kind in KINDS {
            for op in ops() {
                for dt in (0..=FI_UINT128 + 2).chain([FI_VOID, u32::MAX]) {
                    if valid(kind, op, dt) {
                        continue;
                    }
                    let mut dst = [7u8; 32];
                    let compare = if kind == Kind::Compare { &[1u8; 32][..] } else { &[] };
                    assert_eq!(run(kind, op, dt, &mut dst, &[1; 32], compare), Err(ApplyError::Unsupported));
                    assert_eq!(dst, [7; 32]);
                    refused += 1;
                }
            }
        }
        assert!(refused > 1000);
        // Specific ones the man page and libfabric rule out.
        assert!(!valid(Kind::Write, FI_ATOMIC_READ, FI_INT32));
        assert!(!valid(Kind::Write, FI_CSWAP, FI_INT32) && !valid(Kind::Fetch, FI_MSWAP, FI_INT32));
        assert!(!valid(Kind::Compare, FI_SUM, FI_INT32) && !valid(Kind::Compare, FI_ATOMIC_WRITE, FI_INT32));
        assert!(!valid(Kind::Write, FI_BOR, FI_DOUBLE) && !valid(Kind::Compare, FI_MSWAP, FI_FLOAT));
        assert!(!valid(Kind::Write, FI_MIN, FI_FLOAT_COMPLEX) && !valid(Kind::Compare, FI_CSWAP_LT, FI_DOUBLE_COMPLEX));
    }

    #[test]
    fn wrong_lengths_are_errors_not_panics() {
        let bad = |buffer| move |r: Result<Vec<u8>, ApplyError>| matches!(r, Err(ApplyError::BadLength { buffer: b, .. }) if b == buffer);
        let mut dst = [0u8; 8];
        assert!(bad("dst")(run(Kind::Write, FI_SUM, FI_INT32, &mut dst[..7], &[0; 7], &[])));
        assert!(bad("dst")(run(Kind::Write, FI_SUM, FI_LONG_DOUBLE_COMPLEX, &mut [0; 48], &[0; 48], &[])));
        assert!(bad("operand")(run(Kind::Write, FI_SUM, FI_INT32, &mut dst, &[0; 4], &[])));
        assert!(bad("operand")(run(Kind::Write, FI_SUM, FI_INT32, &mut dst, &[0; 12], &[])));
        assert!(bad("operand")(run(Kind::Write, FI_SUM, FI_INT32, &mut dst, &[], &[])));
        assert!(bad("operand")(run(Kind::Fetch, FI_ATOMIC_READ, FI_INT32, &mut dst, &[0; 4], &[])));
        assert!(bad("compare")(run(Kind::Write, FI_SUM, FI_INT32, &mut dst, &[0; 8], &[0; 8])));
        assert!(bad("compare")(run(Kind::Compare, FI_CSWAP, FI_INT32, &mut dst, &[0; 8], &[0; 4])));
        assert!(bad("compare")(run(Kind::Compare, FI_CSWAP, FI_INT32, &mut dst, &[0; 8], &[])));
        let mut result = [0u8; 8];
        assert!(matches!(
            apply(Kind::Write, FI_SUM, FI_INT32, &mut dst, &[0; 8], &[], &mut result),
            Err(ApplyError::BadLength { buffer: "result", len: 8, expected: 0 })
        ));
        assert!(matches!(
            apply(Kind::Fetch, FI_SUM, FI_INT32, &mut dst, &[0; 8], &[], &mut result[..4]),
            Err(ApplyError::BadLength { buffer: "result", len: 4, expected: 8 })
        ));
        assert_eq!(dst, [0; 8], "nothing written on errors");
        // READ may come with or without an operand; zero elements are fine.
        assert_eq!(run(Kind::Fetch, FI_ATOMIC_READ, FI_INT32, &mut dst, &[], &[]), Ok(vec![0; 8]));
        assert_eq!(run(Kind::Fetch, FI_ATOMIC_READ, FI_INT32, &mut dst, &[1; 8], &[]), Ok(vec![0; 8]));
        assert_eq!(run(Kind::Compare, FI_CSWAP, FI_DOUBLE_COMPLEX, &mut [], &[], &[]), Ok(vec![]));
        // Any lengths: an answer, never a panic; Ok only when they fit.
        for (kind, op, dt) in [
            (Kind::Write, FI_SUM, FI_LONG_DOUBLE_COMPLEX),
            (Kind::Fetch, FI_ATOMIC_READ, FI_INT16),
            (Kind::Compare, FI_MSWAP, FI_UINT64),
        ] {
            let size = type_size(dt).unwrap();
            for n in 0..70usize {
                for m in [0, 1, n.saturating_sub(1), n, n + 1, 64] {
                    for k in [0, n, m] {
                        for r in [0, n, k] {
                            let mut dst = vec![0; n];
                            let fits = n.is_multiple_of(size)
                                && (m == n || (op == FI_ATOMIC_READ && m == 0))
                                && k == if kind == Kind::Compare { n } else { 0 }
                                && r == if kind == Kind::Write { 0 } else { n };
                            let got = apply(kind, op, dt, &mut dst, &vec![1; m], &vec![2; k], &mut vec![3; r]);
                            assert_eq!(got.is_ok(), fits, "{kind:?} {op} {dt} {n} {m} {k} {r}");
                        }
                    }
                }
            }
        }
    }

    /// `word` computes what the element tables compute, for every valid combination it takes, over
    /// values at the types' boundaries (both sign bits, carries out of the low half), and
    /// takes nothing of another width or datatype.
    #[test]
    fn word_agrees_with_apply() {
        let values: [u64; 8] = [0, 1, 2, u64::MAX, 0x7fff_ffff, 0x8000_0000, 0xffff_ffff, 0x1234_5678_9abc_def0];
        let mut taken = 0;
        for dt in INTEGERS.into_iter().chain(REALS).chain(COMPLEXES) {
            let size = type_size(dt).unwrap();
            for kind in KINDS {
                for op in ops().filter(|&op| valid(kind, op, dt)) {
                    for bytes in [4, 8, 16] {
                        let fast = |d: u64, s: u64, c: u64| word(op, dt, bytes, d, s, c);
                        if bytes != size || !matches!(dt, FI_INT32 | FI_UINT32 | FI_INT64 | FI_UINT64) {
                            assert_eq!(fast(1, 2, 3), None, "op {op} datatype {dt} width {bytes}");
                            continue;
                        }
                        let cut = |v: u64| if bytes == 4 { v & 0xffff_ffff } else { v };
                        let le = |v: u64| v.to_ne_bytes()[..bytes].to_vec();
                        let triples = values.iter().flat_map(|&d| values.map(|s| (d, s)));
                        for (d, s, c) in triples.flat_map(|(d, s)| values.map(|c| (d, s, c))) {
                            let (d, s, c) = (cut(d), cut(s), cut(c));
                            let Some(new) = fast(d, s, c) else { continue };
                            taken += 1;
                            let mut dst = le(d);
                            let operand = if op == FI_ATOMIC_READ { Vec::new() } else { le(s) };
                            let compare = if kind == Kind::Compare { le(c) } else { Vec::new() };
                            let mut old = vec![0xa5; if kind == Kind::Write { 0 } else { bytes }];
                            elements(kind, op, dt, &mut dst, &operand, &compare, &mut old).unwrap();
                            let what = format!("{kind:?} op {op} datatype {dt}: {d:#x} {s:#x} {c:#x}");
                            assert_eq!(le(cut(new)), dst, "{what}");
                            if kind != Kind::Write {
                                assert_eq!(old, le(d), "{what}");
                            }
                        }
                    }
                }
            }
        }
        // Four datatypes; fi_atomic's SUM, PROD, BOR, BAND, BXOR and WRITE, fi_fetch_atomic's
        // those and READ, fi_compare_atomic's CSWAP, CSWAP_NE and MSWAP.
        assert_eq!(taken, 4 * 512 * (6 + 7 + 3), "combinations taken");
    }

    #[test]
    fn kinds_from_flags_and_error_codes() {
        assert_eq!(Kind::from_flags(0), Some(Kind::Write));
        assert_eq!(Kind::from_flags(FI_FETCH_ATOMIC), Some(Kind::Fetch));
        assert_eq!(Kind::from_flags(FI_COMPARE_ATOMIC | u64::from(FI_TAGGED)), Some(Kind::Compare));
        assert_eq!(Kind::from_flags(FI_FETCH_ATOMIC | FI_COMPARE_ATOMIC), None);
        assert_eq!(FiError::from(ApplyError::Unsupported), FiError::OPNOTSUPP);
        let e = ApplyError::BadLength { buffer: "operand", len: 3, expected: 4 };
        assert_eq!(FiError::from(e), FiError::INVAL);
        assert!(e.to_string().contains("operand"));
    }
}
