//! Ok answers to acknowledged messages, gathered into one response per run.
//!
//! In a stream of acknowledged operations (SOS's non-fetching atomics and puts, which ask for
//! delivery completion, 64 in flight) every command used to cost its receiver one push into the
//! sender's response ring, and the sender one pop: a cache line each way per operation, and the
//! sender, which also issues the operations, is the busier side. A pass of ours that handles
//! several commands from one sender in a row now answers those that simply succeeded with one
//! `resp::DONE_MANY` entry (up to `DONE_MANY_MAX` ids).
//!
//! The run is pushed before this pass returns (`Endpoint::progress`), before any other response
//! goes out (so that the answers to one sender keep their order), when a command from another
//! sender is answered, and when it is full. A single answer goes out as the plain `DONE` it
//! always was. A latency-bound sender (one operation at a time) waits for nothing more than the
//! end of the pass that handled its command: the next, empty, look at our command ring.

use super::{Endpoint, SrcId};
use crate::cmd::{RespEntry, Status, DONE_MANY_MAX};

/// The answers gathered so far: all to `src`, `len` of them.
#[derive(Default)]
pub(super) struct OkRun {
    src: SrcId,
    ids: [u64; DONE_MANY_MAX],
    len: usize,
}

impl OkRun {
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Endpoint {
    /// Answer message `msg_id` of sender `src` with `Status::Ok`, in this pass's run.
    #[inline]
    pub(super) fn answer_ok(&mut self, src: SrcId, msg_id: u64) {
        if !self.ok_run.is_empty() && self.ok_run.src != src {
            self.flush_ok_run();
        }
        let run = &mut self.ok_run;
        run.src = src;
        run.ids[run.len] = msg_id;
        run.len += 1;
        if run.len == DONE_MANY_MAX {
            self.flush_ok_run();
        }
    }

    /// Push the run gathered so far, if any.
    #[inline(never)]
    pub(super) fn flush_ok_run(&mut self) {
        let run = std::mem::take(&mut self.ok_run.len);
        let ids = &self.ok_run.ids[..run];
        let entry = match ids {
            [] => return,
            // The value of a plain Ok answer is the message's length, which no sender of an
            // acknowledged small message reads.
            [id] => RespEntry::done(*id, Status::Ok, 0),
            _ => {
                self.stats.ok_runs += 1;
                RespEntry::done_many(ids)
            }
        };
        self.push_resp(self.ok_run.src, entry);
    }
}
