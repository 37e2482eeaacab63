//! Cross-memory attach: copying straight out of a peer's address space with process_vm_readv.
//!
//! # Safety
//! The local side of every copy is memory the caller lent us (see `crate::iov`); the remote side
//! is checked by the kernel, which fails the call (EFAULT) instead of touching anything invalid.

use crate::cmd::RemoteIov;
use crate::error::{Error, Result};
use crate::iov::LocalIov;

/// Whether this process may use CMA at all: the syscall exists (no seccomp filter) and Yama
/// does not restrict it to descendants. Permission for a given peer is only known on first use.
pub fn probe() -> bool {
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

/// Copy the peer's `remote` ranges, in order, into `local` starting at byte `local_off`.
/// Returns how many bytes were copied (the shorter of the two totals).
pub fn read_from(pid: u32, remote: &[RemoteIov], local: &LocalIov, local_off: usize) -> Result<usize> {
    let mut local_vecs = Vec::new();
    local.iovecs_from(local_off, &mut local_vecs);
    let want: usize = remote.iter().map(|r| r.len as usize).sum::<usize>().min(local.len().saturating_sub(local_off));
    let mut remote_vecs: Vec<libc::iovec> = Vec::with_capacity(remote.len());
    let mut left = want;
    for r in remote {
        if left == 0 {
            break;
        }
        let take = (r.len as usize).min(left);
        remote_vecs.push(libc::iovec { iov_base: r.addr as *mut _, iov_len: take });
        left -= take;
    }
    let mut done = 0usize;
    // process_vm_readv copies at most IOV_MAX entries and may return short: loop until done.
    let (mut li, mut ri) = (0usize, 0usize);
    let (mut loff, mut roff) = (0usize, 0usize);
    while done < want {
        let mut lv: Vec<libc::iovec> = Vec::new();
        let mut rv: Vec<libc::iovec> = Vec::new();
        let mut budget = want - done;
        let (mut i, mut o) = (li, loff);
        while budget > 0 && i < local_vecs.len() && lv.len() < 1024 {
            let v = local_vecs[i];
            let take = (v.iov_len - o).min(budget);
            // SAFETY: pointer arithmetic inside an iovec the caller lent us.
            lv.push(libc::iovec { iov_base: unsafe { v.iov_base.cast::<u8>().add(o) }.cast(), iov_len: take });
            budget -= take;
            i += 1;
            o = 0;
        }
        let mut budget = want - done;
        let (mut j, mut p) = (ri, roff);
        while budget > 0 && j < remote_vecs.len() && rv.len() < 1024 {
            let v = remote_vecs[j];
            let take = (v.iov_len - p).min(budget);
            rv.push(libc::iovec { iov_base: (v.iov_base as usize + p) as *mut _, iov_len: take });
            budget -= take;
            j += 1;
            p = 0;
        }
        // SAFETY: `lv` describes caller-lent writable memory within bounds; `rv` is remote and
        // validated by the kernel.
        let n = unsafe { libc::process_vm_readv(pid as libc::pid_t, lv.as_ptr(), lv.len() as _, rv.as_ptr(), rv.len() as _, 0) };
        if n < 0 {
            return Err(Error::last_os());
        }
        if n == 0 {
            return Err(Error::Os(libc::EFAULT));
        }
        let n = n as usize;
        done += n;
        // Advance both cursors by n bytes.
        let mut adv = n;
        while adv > 0 {
            let rem = local_vecs[li].iov_len - loff;
            if adv >= rem {
                adv -= rem;
                li += 1;
                loff = 0;
            } else {
                loff += adv;
                adv = 0;
            }
        }
        let mut adv = n;
        while adv > 0 {
            let rem = remote_vecs[ri].iov_len - roff;
            if adv >= rem {
                adv -= rem;
                ri += 1;
                roff = 0;
            } else {
                roff += adv;
                adv = 0;
            }
        }
    }
    Ok(done)
}
