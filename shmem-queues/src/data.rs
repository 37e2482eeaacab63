//! Data queues: each PE pushes elements into an outgoing buffer per target PE; the collective
//! global flush moves them into the targets' incoming areas (one area per source PE, FIFO),
//! from which each target pops.
//!
//! Symmetric block (the same on every PE):
//! ```text
//! used  [src]   u64, 8 B apart: bytes of data from src in the area here (written by src in a flush)
//! flags [src]   u64, 8 B apart: 1 if src could not deliver all it had in the last flush
//! area  [src]   max_bytes each, from a 64-byte aligned offset
//! ```
//! Global flush: every PE compacts its areas (drops what was popped) and publishes `used`; a
//! barrier; each PE reads `used` for itself on each target, puts what fits behind it (whole
//! elements, FIFO order), then the new `used` word, then its flag to every PE; a barrier; every
//! PE reads the flags, so all PEs return the same status.

use crate::config::{self, QueueAttr, QueueConfig, ANY_PE, EAGAIN, EFULL, EINVAL, ENOMEM, EPARTIAL, OK};
use crate::{mem, sys};

pub struct DataQueue {
    pub id: u64,
    base: usize,
    npes: usize,
    me: usize,
    max_bytes: usize,
    esize: usize,
    out: Vec<Vec<u8>>,
    head: Vec<usize>,
}

impl DataQueue {
    /// Collective over all PEs.
    pub fn create(id: u64, cfg: &QueueConfig) -> Result<Self, i32> {
        if cfg.qtype != config::QUEUE_DATA {
            return Err(EINVAL);
        }
        config::is_shared(cfg)?;
        let npes = usize::try_from(sys::n_pes()).map_err(|_| EINVAL)?;
        let me = usize::try_from(sys::my_pe()).map_err(|_| EINVAL)?;
        let esize = usize::try_from(cfg.data_elem_size.max(1)).map_err(|_| EINVAL)?;
        let max = if cfg.max_bytes == 0 { config::DEFAULT_DATA_MAX_BYTES } else { cfg.max_bytes };
        let max_bytes = usize::try_from(max).map_err(|_| EINVAL)?;
        if esize > max_bytes || max_bytes > (1 << 40) {
            return Err(EINVAL);
        }
        let max_bytes = (max_bytes / esize) * esize;
        let q = DataQueue { id, base: 0, npes, me, max_bytes, esize, out: vec![Vec::new(); npes], head: vec![0; npes] };
        let base = sys::malloc(q.area(npes));
        if base.is_null() {
            return Err(ENOMEM);
        }
        let q = DataQueue { base: base as usize, ..q };
        for s in 0..npes {
            mem::store_word(q.base + q.used(s), 0);
        }
        sys::barrier_all();
        Ok(q)
    }

    fn used(&self, src: usize) -> usize {
        src * 8
    }
    fn flag(&self, src: usize) -> usize {
        self.npes * 8 + src * 8
    }
    fn area(&self, src: usize) -> usize {
        ((self.npes * 16 + 63) & !63) + src * self.max_bytes
    }

    /// Collective: frees the block (data still queued is dropped).
    pub fn destroy(self) -> i32 {
        sys::barrier_all();
        // SAFETY: the block came from sys::malloc in create and nobody uses it after the
        // barrier (destroy is collective).
        unsafe { sys::free(self.base as *mut u8) };
        OK
    }

    fn pe(&self, pe: i32) -> Result<usize, i32> {
        usize::try_from(pe).ok().filter(|&p| p < self.npes).ok_or(EINVAL)
    }

    /// Appends `bytes` bytes at `src` to the outgoing buffer for `pe`.
    pub fn push(&mut self, src: usize, bytes: usize, pe: i32) -> i32 {
        let pe = match self.pe(pe) {
            Ok(p) => p,
            Err(e) => return e,
        };
        if bytes % self.esize != 0 || (src == 0 && bytes > 0) {
            return EINVAL;
        }
        if self.out[pe].len() + bytes > self.max_bytes {
            return EFULL;
        }
        if bytes > 0 {
            self.out[pe].extend_from_slice(mem::read_bytes(src, bytes));
        }
        OK
    }

    /// The `used` word of `src` here, clamped to the area (another PE writes it).
    fn used_bytes(&self, src: usize) -> usize {
        (mem::load_word(self.base + self.used(src)) as usize).min(self.max_bytes)
    }

    fn incoming(&self, src: usize) -> usize {
        self.used_bytes(src).saturating_sub(self.head[src])
    }

    /// Moves `bytes` bytes of incoming data (from `pe`, or from every PE in order for ANY_PE)
    /// to `dest`; all or nothing.
    pub fn pop(&mut self, dest: usize, bytes: usize, pe: i32) -> i32 {
        if bytes % self.esize != 0 || (dest == 0 && bytes > 0) {
            return EINVAL;
        }
        let sources: Vec<usize> = if pe == ANY_PE {
            (0..self.npes).collect()
        } else {
            match self.pe(pe) {
                Ok(p) => vec![p],
                Err(e) => return e,
            }
        };
        if sources.iter().map(|&s| self.incoming(s)).sum::<usize>() < bytes {
            return EAGAIN;
        }
        let mut at = 0;
        for s in sources {
            let n = self.incoming(s).min(bytes - at);
            let from = self.base + self.area(s) + self.head[s];
            mem::move_bytes(dest + at, from, n);
            self.head[s] += n;
            at += n;
        }
        OK
    }

    /// (incoming bytes from `pe`, outgoing bytes to `pe`); totals for ANY_PE.
    pub fn sizes(&self, pe: i32) -> Result<(usize, usize), i32> {
        if pe == ANY_PE {
            let inc = (0..self.npes).map(|s| self.incoming(s)).sum();
            return Ok((inc, self.out.iter().map(Vec::len).sum()));
        }
        let p = self.pe(pe)?;
        Ok((self.incoming(p), self.out[p].len()))
    }

    pub fn outstanding_elems(&self) -> u64 {
        (self.out.iter().map(Vec::len).sum::<usize>() / self.esize) as u64
    }

    pub fn attr(&self) -> QueueAttr {
        let room: usize = self.out.iter().map(|o| self.max_bytes - o.len()).sum();
        QueueAttr {
            queue_id: self.id,
            outstanding_elems: self.outstanding_elems(),
            available_elems: (room / self.esize) as u64,
        }
    }

    /// Collective: delivers what fits; EPARTIAL on every PE if some PE kept data back.
    pub fn global_flush(&mut self) -> i32 {
        for s in 0..self.npes {
            let used = self.used_bytes(s);
            let head = std::mem::take(&mut self.head[s]).min(used);
            let area = self.base + self.area(s);
            mem::move_bytes(area, area + head, used - head);
            mem::store_word(self.base + self.used(s), (used - head) as u64);
        }
        sys::barrier_all();
        let mut short = 0u64;
        for pe in 0..self.npes {
            if self.out[pe].is_empty() {
                continue;
            }
            let used_at = self.base + self.used(self.me);
            let used = if pe == self.me {
                self.used_bytes(self.me)
            } else {
                // SAFETY: the used word for this PE in the target's block.
                ((unsafe { sys::fetch_u64(used_at as *const u64, pe as i32) }) as usize).min(self.max_bytes)
            };
            let room = self.max_bytes.saturating_sub(used);
            let n = (self.out[pe].len().min(room) / self.esize) * self.esize;
            let dst = self.base + self.area(self.me) + used;
            if pe == self.me {
                mem::write_bytes(dst, &self.out[pe][..n]);
                mem::store_word(used_at, (used + n) as u64);
            } else {
                // SAFETY: dst..dst+n is inside the target's area for this PE (n <= room).
                unsafe {
                    sys::put(dst as *mut u8, &self.out[pe][..n], pe as i32);
                    sys::put(used_at as *mut u8, &((used + n) as u64).to_ne_bytes(), pe as i32);
                }
            }
            self.out[pe].drain(..n);
            short |= u64::from(!self.out[pe].is_empty());
        }
        let flag_at = self.base + self.flag(self.me);
        for pe in 0..self.npes {
            if pe == self.me {
                mem::store_word(flag_at, short);
            } else {
                // SAFETY: the flag word for this PE in the target's block.
                unsafe { sys::put(flag_at as *mut u8, &short.to_ne_bytes(), pe as i32) };
            }
        }
        sys::barrier_all();
        let any = (0..self.npes).any(|s| mem::load_word(self.base + self.flag(s)) != 0);
        if any {
            EPARTIAL
        } else {
            OK
        }
    }
}
