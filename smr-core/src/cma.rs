//! Cross-memory attach: copying straight out of (process_vm_readv) or into (process_vm_writev)
//! a peer's address space.
//!
//! # Safety
//! The local side of every copy is memory the caller lent us (see `crate::iov`); the remote side
//! is checked by the kernel, which fails the call (EFAULT) instead of touching anything invalid.

use crate::cmd::RemoteIov;
use crate::error::{Error, Result};
use crate::iov::{IoVecs, LentRange, LocalIov};

/// Setting this environment variable to `1` makes `probe` answer `false`, as on a host where
/// Yama or seccomp forbids CMA. It can only turn CMA off, never on: it exists so that the SAR
/// fallback and the tests' handling of a CMA-less host can be exercised on any machine.
pub const DENY_ENV: &str = "RSHM_TEST_DENY_CMA";

/// Whether this process may use CMA at all: the syscall exists (no seccomp filter) and Yama
/// does not restrict it to descendants (and `DENY_ENV` is not set to `1`). Permission for a
/// given peer is only known on first use. Probed once per process.
pub fn probe() -> bool {
    static ALLOWED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ALLOWED.get_or_init(|| !denied_by_env() && probe_now())
}

/// Why `probe` answered `false`, for the one log line a provider writes about it (None when
/// CMA is allowed).
pub fn why_denied() -> Option<&'static str> {
    if probe() {
        return None;
    }
    Some(if denied_by_env() {
        "RSHM_TEST_DENY_CMA=1"
    } else if std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope").is_ok_and(|s| s.trim() != "0") {
        "Yama restricts ptrace (kernel.yama.ptrace_scope is not 0)"
    } else {
        "process_vm_readv is refused (seccomp or a container policy)"
    })
}

fn denied_by_env() -> bool {
    matches!(std::env::var_os(DENY_ENV), Some(v) if v == "1")
}

fn probe_now() -> bool {
    let src = [0x5au8; 8];
    let mut dst = [0u8; 8];
    let local = libc::iovec { iov_base: dst.as_mut_ptr().cast(), iov_len: dst.len() };
    let remote = libc::iovec { iov_base: src.as_ptr() as *mut _, iov_len: src.len() };
    // SAFETY: both iovecs describe live stack buffers of the given lengths in this process.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    if n != 8 || dst != src {
        return false;
    }
    match std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope") {
        Ok(scope) => scope.trim() == "0",
        Err(_) => true,
    }
}

/// Whether a failed copy was refused by policy (Yama, seccomp, a container's rules) rather than
/// by a bad address: the data can still go another way.
pub fn refused(e: &Error) -> bool {
    matches!(e, Error::Os(libc::EPERM | libc::EACCES | libc::ENOSYS))
}

/// Linux refuses more iovecs than this in one call.
const UIO_MAXIOV: usize = 1024;

/// Copy the peer's `remote` ranges, in order, into `local` starting at byte `local_off`.
/// Returns how many bytes were copied (the shorter of the two totals).
pub fn read_from(pid: u32, remote: &[RemoteIov], local: &mut LocalIov, local_off: usize) -> Result<usize> {
    if let Some(copied) = one_range_each(pid, local, local_off, remote, Direction::Read) {
        return copied;
    }
    read_spans(pid, &mut [(local, local_off, usize::MAX)], remote)
}

/// Copy `local`, in order, into the peer's `remote` ranges (a target answering a read straight
/// into its initiator's buffer). Returns how many bytes were copied (the shorter of the two
/// totals).
pub fn write_to(pid: u32, local: &LocalIov, remote: &[RemoteIov]) -> Result<usize> {
    write_part_to(pid, local, 0, remote)
}

/// Copy the bytes of `local` from `local_off` on, in order, into the peer's `remote` ranges (a
/// sender writing its part of a split copy, `endpoint::split`). Returns how many bytes were
/// copied (the shorter of the two totals).
pub fn write_part_to(pid: u32, local: &LocalIov, local_off: usize, remote: &[RemoteIov]) -> Result<usize> {
    if let Some(copied) = one_range_each(pid, local, local_off, remote, Direction::Write) {
        return copied;
    }
    write_spans(pid, &[(local, local_off, usize::MAX)], remote)
}

/// Copy the peer's `remote` ranges, in order, into the spans of our buffers `local` (each
/// buffer's `len` bytes from byte `off`, one after the other), with as few calls as the kernel
/// allows: one buffer's bytes from an offset (`read_from`), or the heads of several split copies
/// from one sender in one call (`endpoint::split::together`). Returns how many bytes were copied (the shorter of the two
/// totals).
pub fn read_spans(pid: u32, local: &mut [(&mut LocalIov, usize, usize)], remote: &[RemoteIov]) -> Result<usize> {
    let mut local_vecs = IoVecs::new();
    for (iov, off, len) in local.iter_mut() {
        iov.iovecs_span(*off, *len, &mut local_vecs);
    }
    // SAFETY: `local_vecs` describes memory the callers' buffers lent us for writing.
    unsafe { transfer(pid, local_vecs, remote, Direction::Read) }
}

/// Copy the spans of our buffers `local` (each buffer's `len` bytes from byte `off`), in order,
/// into the peer's `remote` ranges, with as few calls as the kernel allows: one buffer's bytes
/// from an offset (`write_part_to`), or the tails of several split copies to one receiver in one
/// call (`endpoint::split::together`). Returns how many
/// bytes were copied (the shorter of the two totals).
pub fn write_spans(pid: u32, local: &[(&LocalIov, usize, usize)], remote: &[RemoteIov]) -> Result<usize> {
    let mut local_vecs = IoVecs::new();
    for (iov, off, len) in local {
        iov.iovecs_span_for_reading(*off, *len, &mut local_vecs);
    }
    // SAFETY: `local_vecs` describes memory the callers' buffers lent us; a write only reads it.
    unsafe { transfer(pid, local_vecs, remote, Direction::Write) }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    /// The peer's memory into ours.
    Read,
    /// Ours into the peer's.
    Write,
}

/// The usual copy, one range each side (a lent buffer of one range, one remote range): made
/// without the iovec lists `transfer` builds and trims, which were about a tenth of a CMA
/// message's instructions on the receiving side. None where either side has several ranges,
/// `local` is owned, or `local_off` is at or past its end: `transfer` then.
fn one_range_each(
    pid: u32,
    local: &LocalIov,
    local_off: usize,
    remote: &[RemoteIov],
    dir: Direction,
) -> Option<Result<usize>> {
    let ([one], Some((addr, len))) = (remote, local.lent_single()) else { return None };
    if local_off >= len {
        return None;
    }
    // SAFETY: the range from `local_off` lies inside the one the caller lent us for this
    // direction's access (`read_from`'s and `write_part_to`'s contracts: writable for a read).
    Some(unsafe { one_range(pid, addr + local_off, len - local_off, *one, dir) })
}

/// Copy the peer's `remote` range into `local` (the express path of a CMA message into a
/// posted receive's one buffer): the shorter of the two lengths.
pub fn read_into(pid: u32, remote: RemoteIov, local: LentRange) -> Result<usize> {
    // SAFETY: a `LentRange` is writable until the copy it is handed to returns (its contract).
    unsafe { one_range(pid, local.addr(), local.len(), remote, Direction::Read) }
}

/// One range each side, the shorter of the two lengths.
///
/// # Safety
/// `len` bytes at `addr` must be valid for the direction's access (writes for `Read`).
unsafe fn one_range(pid: u32, addr: usize, len: usize, remote: RemoteIov, dir: Direction) -> Result<usize> {
    let want = len.min(remote.len as usize);
    let local_vec = libc::iovec { iov_base: addr as *mut _, iov_len: want };
    let remote_vec = libc::iovec { iov_base: remote.addr as *mut _, iov_len: want };
    // SAFETY: `local_vec` lies inside the range the caller vouches for.
    unsafe { transfer_vecs(pid, &mut [local_vec], &mut [remote_vec], want, dir) }
}

/// The loop both directions share: the kernel may copy less than asked (page boundaries,
/// iovec limits), so continue from where it stopped.
///
/// # Safety
/// `local_vecs` must describe memory valid for the direction's access (writes for `Read`).
unsafe fn transfer(pid: u32, mut local_vecs: IoVecs, remote: &[RemoteIov], dir: Direction) -> Result<usize> {
    let local_total = local_vecs.iter().fold(0usize, |sum, v| sum.saturating_add(v.iov_len));
    let remote_total = remote.iter().fold(0usize, |sum, r| sum.saturating_add(r.len as usize));
    let want = remote_total.min(local_total);
    let mut remote_vecs: IoVecs =
        remote.iter().map(|r| libc::iovec { iov_base: r.addr as *mut _, iov_len: r.len as usize }).collect();
    trim(&mut local_vecs, want);
    trim(&mut remote_vecs, want);
    // SAFETY: the caller's contract, passed on.
    unsafe { transfer_vecs(pid, &mut local_vecs, &mut remote_vecs, want, dir) }
}

/// `transfer` of iovec lists of `want` bytes each.
///
/// # Safety
/// As `transfer`.
unsafe fn transfer_vecs(
    pid: u32,
    mut lv: &mut [libc::iovec],
    mut rv: &mut [libc::iovec],
    want: usize,
    dir: Direction,
) -> Result<usize> {
    let mut done = 0;
    while done < want {
        let (nl, nr) = (lv.len().min(UIO_MAXIOV), rv.len().min(UIO_MAXIOV));
        let pid = pid as libc::pid_t;
        // SAFETY: `lv` describes local memory valid for this direction (the caller's contract);
        // the remote side is checked by the kernel.
        let n = unsafe {
            match dir {
                Direction::Read => libc::process_vm_readv(pid, lv.as_ptr(), nl as _, rv.as_ptr(), nr as _, 0),
                Direction::Write => libc::process_vm_writev(pid, lv.as_ptr(), nl as _, rv.as_ptr(), nr as _, 0),
            }
        };
        if n < 0 {
            return Err(Error::last_os());
        }
        if n == 0 {
            return Err(Error::Os(libc::EFAULT));
        }
        done += n as usize;
        lv = advance(lv, n as usize);
        rv = advance(rv, n as usize);
    }
    Ok(done)
}

/// Cut an iovec list to `total` bytes.
fn trim(vecs: &mut IoVecs, total: usize) {
    let mut left = total;
    vecs.retain_mut(|v| {
        v.iov_len = v.iov_len.min(left);
        left -= v.iov_len;
        v.iov_len > 0
    });
}

/// Drop the first `n` bytes from an iovec list.
fn advance(mut vecs: &mut [libc::iovec], mut n: usize) -> &mut [libc::iovec] {
    while n > 0 && !vecs.is_empty() {
        let first = &mut vecs[0];
        if n >= first.iov_len {
            n -= first.iov_len;
            vecs = &mut vecs[1..];
        } else {
            first.iov_base = (first.iov_base as usize + n) as *mut _;
            first.iov_len -= n;
            n = 0;
        }
    }
    vecs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_scattered_ranges_of_this_process() {
        let src: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
        let remote = [
            RemoteIov { addr: src.as_ptr() as u64, len: 3000 },
            RemoteIov { addr: src.as_ptr() as u64 + 3000, len: 7000 },
        ];
        let mut a = vec![0u8; 4000];
        let mut b = vec![0u8; 7000];
        // SAFETY: `a` and `b` outlive `local` and are not touched while it lives.
        let mut local = unsafe { LocalIov::from_raw(&[(a.as_mut_ptr(), a.len()), (b.as_mut_ptr(), b.len())]) };
        let n = read_from(std::process::id(), &remote, &mut local, 500).unwrap();
        assert_eq!(n, 10_000);
        drop(local);
        assert_eq!(&a[500..], &src[..3500]);
        assert_eq!(&b[..6500], &src[3500..]);
    }

    #[test]
    fn writes_into_scattered_ranges_of_this_process() {
        let src: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
        let mut a = vec![0u8; 3000];
        let mut b = vec![0u8; 8000];
        let remote = [
            RemoteIov { addr: a.as_mut_ptr() as u64, len: 3000 },
            RemoteIov { addr: b.as_mut_ptr() as u64, len: 8000 },
        ];
        // SAFETY: `src` outlives `local` and is only read.
        let local = unsafe {
            LocalIov::from_raw(&[(src.as_ptr().cast_mut(), 4000), (src.as_ptr().cast_mut().wrapping_add(4000), 6000)])
        };
        assert_eq!(write_to(std::process::id(), &local, &remote).unwrap(), 10_000);
        assert_eq!(&a[..], &src[..3000]);
        assert_eq!(&b[..7000], &src[3000..]);
        assert!(b[7000..].iter().all(|&x| x == 0), "nothing past the source's end");
    }

    #[test]
    fn a_bad_remote_address_is_an_error_not_a_crash() {
        let mut local = LocalIov::owned(vec![0; 64]);
        let remote = [RemoteIov { addr: 8, len: 64 }];
        assert_eq!(read_from(std::process::id(), &remote, &mut local, 0), Err(Error::Os(libc::EFAULT)));
        assert_eq!(write_to(std::process::id(), &local, &remote), Err(Error::Os(libc::EFAULT)));
    }

    /// A copy asked to start at or past the end of a one-range buffer copies nothing, either
    /// way, and touches nothing beyond the range lent (the bytes after it here).
    #[test]
    fn nothing_is_copied_from_an_offset_at_or_past_the_end() {
        let src = [0xABu8; 64];
        let remote = [RemoteIov { addr: src.as_ptr() as u64, len: 64 }];
        let mut buf = [0u8; 128];
        for off in [64, 65, 1000] {
            // SAFETY: the first 64 bytes of `buf` outlive `local` and are not otherwise touched.
            let mut local = unsafe { LocalIov::from_raw(&[(buf.as_mut_ptr(), 64)]) };
            assert_eq!(read_from(std::process::id(), &remote, &mut local, off), Ok(0));
            drop(local);
            assert!(buf.iter().all(|&b| b == 0), "a read from offset {off} wrote somewhere");
        }
        let mut target = [0u8; 64];
        let remote = [RemoteIov { addr: target.as_mut_ptr() as u64, len: 64 }];
        let buf = [0xCDu8; 128];
        for off in [64, 65, 1000] {
            // SAFETY: the first 64 bytes of `buf` outlive `local` and are only read.
            let local = unsafe { LocalIov::from_raw(&[(buf.as_ptr().cast_mut(), 64)]) };
            assert_eq!(write_part_to(std::process::id(), &local, off, &remote), Ok(0));
            assert!(target.iter().all(|&b| b == 0), "a write from offset {off} wrote something");
        }
    }

    /// From an offset inside a one-range buffer, a copy fills the rest of the range and no more,
    /// however much the peer offers.
    #[test]
    fn a_copy_from_an_offset_ends_at_the_range_lent() {
        let src: Vec<u8> = (0..64u8).collect();
        let remote = [RemoteIov { addr: src.as_ptr() as u64, len: 64 }];
        let mut buf = [0u8; 128];
        // SAFETY: the first 64 bytes of `buf` outlive `local` and are not otherwise touched.
        let mut local = unsafe { LocalIov::from_raw(&[(buf.as_mut_ptr(), 64)]) };
        assert_eq!(read_from(std::process::id(), &remote, &mut local, 16), Ok(48));
        drop(local);
        assert_eq!(&buf[16..64], &src[..48]);
        assert!(buf[..16].iter().chain(&buf[64..]).all(|&b| b == 0), "bytes outside the copy changed");
        let mut target = [0u8; 64];
        let remote = [RemoteIov { addr: target.as_mut_ptr() as u64, len: 64 }];
        // SAFETY: `src` outlives `local` and is only read.
        let local = unsafe { LocalIov::from_raw(&[(src.as_ptr().cast_mut(), 40)]) };
        assert_eq!(write_part_to(std::process::id(), &local, 16, &remote), Ok(24));
        assert_eq!(&target[..24], &src[16..40]);
        assert!(target[24..].iter().all(|&b| b == 0), "bytes past the copy changed");
    }

    /// Lists longer than the kernel takes in one call (1024 iovecs) go in several, each going on
    /// where the last stopped: at a range's end on one side, inside a range on the other.
    #[test]
    fn lists_longer_than_one_call_takes_are_copied_whole_and_in_order() {
        let src: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
        // 1500 local ranges of 7 bytes, 3 remote ranges; then 2,000 remote ranges of 5 bytes.
        let remote = [6_000, 4_000, 10_000].iter().scan(0u64, |at, &len| {
            let r = RemoteIov { addr: src.as_ptr() as u64 + *at, len };
            *at += len;
            Some(r)
        });
        let remote: Vec<RemoteIov> = remote.collect();
        let mut dst = vec![0u8; 1500 * 7];
        let parts: Vec<(*mut u8, usize)> = dst.chunks_mut(7).map(|c| (c.as_mut_ptr(), 7)).collect();
        // SAFETY: `dst` outlives `local` and is not touched while it lives.
        let mut local = unsafe { LocalIov::from_raw(&parts) };
        assert_eq!(read_from(std::process::id(), &remote, &mut local, 3), Ok(1500 * 7 - 3));
        drop(local);
        assert_eq!(&dst[3..], &src[..1500 * 7 - 3]);
        assert_eq!(&dst[..3], &[0; 3]);

        let mut target = vec![0u8; 10_000];
        let remote: Vec<RemoteIov> =
            target.chunks_mut(5).map(|c| RemoteIov { addr: c.as_mut_ptr() as u64, len: 5 }).collect();
        // SAFETY: `src` outlives `local` and is only read.
        let local = unsafe {
            LocalIov::from_raw(&[
                (src.as_ptr().cast_mut(), 7_001),
                (src.as_ptr().cast_mut().wrapping_add(9_000), 11_000),
            ])
        };
        assert_eq!(write_to(std::process::id(), &local, &remote), Ok(10_000));
        assert_eq!(&target[..7_001], &src[..7_001]);
        assert_eq!(&target[7_001..], &src[9_000..11_999]);
    }

    /// A peer's range may claim any length (the kernel refuses iovec lists whose total passes
    /// `isize::MAX`): only as many bytes as our side holds are asked for, and copied.
    #[test]
    fn a_remote_length_beyond_any_buffer_is_cut_to_ours() {
        let src: Vec<u8> = (0..100u8).collect();
        for remote in [
            vec![RemoteIov { addr: src.as_ptr() as u64, len: u64::MAX }],
            vec![
                RemoteIov { addr: src.as_ptr() as u64, len: 30 },
                RemoteIov { addr: src.as_ptr() as u64 + 30, len: u64::MAX },
            ],
        ] {
            let (mut a, mut b) = ([0u8; 50], [0u8; 50]);
            // SAFETY: `a` and `b` outlive `local` and are not touched while it lives.
            let mut local = unsafe { LocalIov::from_raw(&[(a.as_mut_ptr(), 50), (b.as_mut_ptr(), 50)]) };
            assert_eq!(read_from(std::process::id(), &remote, &mut local, 0), Ok(100));
            drop(local);
            assert_eq!((&a[..], &b[..]), (&src[..50], &src[50..]));
        }
    }

    #[test]
    fn refused_means_by_policy_not_by_a_bad_address() {
        for errno in [libc::EPERM, libc::EACCES, libc::ENOSYS] {
            assert!(refused(&Error::Os(errno)), "errno {errno}");
        }
        for e in [Error::Os(libc::EFAULT), Error::Os(libc::ESRCH), Error::Os(libc::EINVAL), Error::Again] {
            assert!(!refused(&e), "{e:?}");
        }
    }

    /// The variable that the child below reads, and what it is set to: how the child's CMA is
    /// to be denied ("env", "seccomp") or not ("none").
    const CHILD: &str = "RSHM_CMA_PROBE_CHILD";

    /// As a child (this binary run again by the tests below): deny CMA as `CHILD` says, then
    /// print what `probe` and `why_denied` answer and whether a copy was refused by policy.
    #[test]
    fn child_reporting_the_probe() {
        let Ok(how) = std::env::var(CHILD) else { return };
        if how == "seccomp" {
            crate::test_child::refuse_cma_by_seccomp();
        }
        let src = [1u8; 8];
        let mut local = LocalIov::owned(vec![0; 8]);
        let copy = read_from(std::process::id(), &[RemoteIov { addr: src.as_ptr() as u64, len: 8 }], &mut local, 0);
        println!("probe={} why={:?} refused={}", probe(), why_denied(), copy.as_ref().is_err_and(refused));
    }

    /// What `child_reporting_the_probe` printed when run with `CHILD` = `how` and `DENY_ENV` =
    /// `deny` (None: unset).
    fn probe_in_a_child(how: &str, deny: Option<&str>) -> String {
        let mut cmd = crate::test_child::rerun("cma::tests::child_reporting_the_probe", CHILD, how);
        match deny {
            Some(v) => cmd.env(DENY_ENV, v),
            None => cmd.env_remove(DENY_ENV),
        };
        crate::test_child::report_line(&mut cmd, "probe=")
    }

    /// `RSHM_TEST_DENY_CMA=1` turns CMA off and says so; any other value leaves the host's
    /// answer (here: allowed, with a copy that works).
    #[test]
    fn the_test_switch_denies_cma_and_names_itself() {
        assert_eq!(probe_in_a_child("env", Some("1")), r#"probe=false why=Some("RSHM_TEST_DENY_CMA=1") refused=false"#);
        let host = if probe_now() { "probe=true why=None refused=false" } else { "probe=false" };
        assert!(probe_in_a_child("none", Some("0")).starts_with(host));
        assert!(probe_in_a_child("none", None).starts_with(host));
    }

    /// A process whose seccomp filter refuses the CMA system calls (as some container runtimes'
    /// do) finds CMA off, blames the policy, and its copies fail as refused, not as bad addresses.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn a_seccomp_filter_against_cma_is_found_and_named() {
        let report = probe_in_a_child("seccomp", None);
        assert_eq!(
            report,
            r#"probe=false why=Some("process_vm_readv is refused (seccomp or a container policy)") refused=true"#
        );
    }
}
