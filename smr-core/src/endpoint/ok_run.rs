//! Ok answers to acknowledged messages, gathered into one response per run.
//!
//! In a stream of acknowledged operations (SOS's non-fetching atomics and puts, which ask for
//! delivery completion, 64 in flight) every command used to cost its receiver one push into the
//! sender's response ring, and the sender one pop: a cache line each way per operation, and the
//! sender, which also issues the operations, is the busier side. A pass of ours that handles
//! several commands from one sender in a row now answers those that simply succeeded with one
//! `resp::DONE_MANY` entry (up to `DONE_MANY_MAX` ids).
//!
//! Answers are gathered only while more commands wait behind the one answered, as seen when it
//! is answered (`Endpoint::commands_behind`): an answer with nothing behind it goes out at once,
//! as it always did, so a sender waiting for one operation at a time waits no longer. A run is
//! pushed when full, when the next command does not wait already, before any other response
//! goes out (so that the answers to one sender keep their order), when a command from another
//! sender is answered, when its sender is forgotten, and at the latest before this pass returns
//! (`Endpoint::progress`). A single answer goes out as the plain `DONE` it always was.

use super::{Endpoint, SrcId};
use crate::cmd::{RespEntry, Status, DONE_MANY_MAX};

/// The answers gathered so far: all to `src`, `len` of them.
#[derive(Default)]
pub(super) struct OkRun {
    src: SrcId,
    ids: [u64; DONE_MANY_MAX],
    len: usize,
    /// Whether the command being handled still holds its ring slot (the express path reads it
    /// in place), so that the next command is the one after the head.
    pub in_slot: bool,
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
        if self.ok_run.src != src {
            self.flush_ok_run();
        }
        let more = self.commands_behind();
        let run = &mut self.ok_run;
        if run.is_empty() && !more {
            // The usual answer of a sender waiting for one operation: the value of a plain Ok
            // answer is the message's length, which no sender of an acknowledged small message
            // reads.
            self.push_resp(src, RespEntry::done(msg_id, Status::Ok, 0));
            return;
        }
        run.src = src;
        run.ids[run.len] = msg_id;
        run.len += 1;
        if run.len == DONE_MANY_MAX || !more {
            self.flush_ok_run();
        }
    }

    /// Whether another command is published behind the one being handled: one load (the head
    /// is that command while it still holds its slot, the next one once released).
    #[inline(always)]
    pub(super) fn commands_behind(&self) -> bool {
        self.cmd_rx.ready_at(&self.region.cmd_ring(), u64::from(self.ok_run.in_slot))
    }

    /// Push the run gathered so far, if any: a test inline, the push out of line.
    #[inline(always)]
    pub(super) fn flush_ok_run(&mut self) {
        if !self.ok_run.is_empty() {
            self.push_ok_run();
        }
    }

    #[inline(never)]
    fn push_ok_run(&mut self) {
        let run = std::mem::take(&mut self.ok_run.len);
        let ids = &self.ok_run.ids[..run];
        let entry = match ids {
            [] => return,
            [id] => RespEntry::done(*id, Status::Ok, 0),
            _ => {
                self.stats.ok_runs += 1;
                RespEntry::done_many(ids)
            }
        };
        self.push_resp(self.ok_run.src, entry);
    }
}
