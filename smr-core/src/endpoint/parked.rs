//! Senders we met while this process was out of descriptors or memory.
//!
//! To accept a sender we map its region (`accept`). When that open fails for want of a
//! descriptor or of memory, the sender is alive and did nothing wrong: dropping it, as we drop
//! one whose region is gone, lost every message of it that needs its region (CMA, SAR) while
//! it waited for answers that never came, and delivered its inline ones out of order. So its
//! commands are set aside instead, in order, and played again on each liveness tick: once the
//! open succeeds they are handled as if they had just arrived. Other senders go on meanwhile.
//!
//! Parking is bounded, in time (`Params::parked_timeout`) and in commands
//! (`PARKED_COMMANDS_MAX`, about 4 MiB of copies). Past either bound we give the sender up as
//! one whose region is gone: its inline and inject messages are still delivered, its buffers
//! come back, and its entry of our table is freed, by which the sender learns that we dropped
//! it and fails the sends that wait on us (`check_peers`): errors, not a hang.

use super::{Endpoint, Handler, SrcId};
use crate::clock::Instant;
use crate::cmd::{CmdEntry, Command};
use crate::error::Error;

/// Commands set aside for one sender, at most: a sender that keeps sending while we cannot map
/// its region is given up past this many.
const PARKED_COMMANDS_MAX: usize = 4096;

/// A sender whose region we could not map for want of descriptors or memory.
pub(super) struct Parked {
    pub src: SrcId,
    /// The first failed open.
    pub since: Instant,
    /// Its commands from the first on, in the order they came.
    pub commands: Vec<CmdEntry>,
}

/// Whether `e`, from opening a live sender's region, is a shortage of ours, which passes.
pub(super) fn is_shortage(e: &Error) -> bool {
    matches!(e, Error::Os(libc::EMFILE | libc::ENFILE | libc::ENOMEM))
}

/// The sender whose command `cmd` is.
fn source(cmd: &Command) -> SrcId {
    match *cmd {
        Command::Connect { src, .. }
        | Command::Disconnect { src }
        | Command::Msg { src, .. }
        | Command::SarSeg { src, .. } => src,
    }
}

impl Endpoint {
    /// Set command `entry` (decoded: `cmd`) aside if its sender is parked; whether it was.
    #[cold]
    pub(super) fn park_if_parked(&mut self, cmd: &Command, entry: &CmdEntry) -> bool {
        let src = source(cmd);
        let Some(parked) = self.parked.iter_mut().find(|p| p.src == src) else { return false };
        parked.commands.push(*entry);
        true
    }

    /// Park sender `src`, whose region's open failed for a shortage, from its command `entry` on.
    #[cold]
    pub(super) fn park(&mut self, src: SrcId, entry: &CmdEntry) {
        self.parked.push(Parked { src, since: Instant::now(), commands: vec![*entry] });
    }

    /// Whether the open of sender `src`'s region is given up, not parked, when it fails.
    pub(super) fn giving_up(&self, src: SrcId) -> bool {
        self.giving_up == Some(src)
    }

    /// On the liveness tick: play every parked sender's commands again, in order. One whose
    /// region opens now is served; one still short is parked again (its first command is the
    /// one that tries the open); one past the bounds is given up. Returns the commands played.
    pub(super) fn replay_parked(&mut self, h: &mut impl Handler) -> usize {
        let timeout = self.params.parked_timeout;
        let mut played = 0;
        // Copies, not ring slots: the next command is at the ring's head (`ok_run`).
        self.ok_run.in_slot = false;
        for parked in std::mem::take(&mut self.parked) {
            let give_up = parked.since.elapsed() >= timeout || parked.commands.len() > PARKED_COMMANDS_MAX;
            self.giving_up = give_up.then_some(parked.src);
            let since = parked.since;
            for entry in &parked.commands {
                self.handle_command(entry, h);
            }
            played += parked.commands.len();
            // Parked again: it still waits since its first failure.
            if let Some(again) = self.parked.iter_mut().find(|p| p.src == parked.src) {
                again.since = since;
            }
        }
        self.giving_up = None;
        played
    }

    /// Whether sender `src` is parked (its entry is not a dead stranger's to free: `unmet`).
    pub(super) fn is_parked(&self, src: SrcId) -> bool {
        self.parked.iter().any(|p| p.src == src)
    }
}
