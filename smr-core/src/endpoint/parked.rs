//! Senders we met while this process was out of descriptors or memory.
//!
//! To accept a sender we map its region (`accept`). When that open fails for want of a
//! descriptor or of memory, the sender is alive and did nothing wrong: dropping it, as we drop
//! one whose region is gone, lost every message of it that needs its region (CMA, SAR) while
//! it waited for answers that never came, and delivered its inline ones out of order. So its
//! commands are set aside instead, in order, and played again on each liveness tick: once the
//! open succeeds they are handled as if they had just arrived. Other senders go on meanwhile.
//!
//! Parking is bounded, in time (`Params::parked_timeout`) and in commands set aside, all
//! parked senders together (`PARKED_COMMANDS_MAX`, about 4 MiB of copies: a hostile peer that
//! holds many entries of our table and makes their opens fail cannot make it more). Past either
//! bound we give the sender up as one whose region is gone: its inline and inject messages are
//! still delivered, its buffers come back, and its entry of our table is freed, by which the
//! sender learns that we dropped it and fails the sends that wait on us (`check_peers`):
//! errors, not a hang. Until that entry is freed the sender stays given up
//! (`Forgotten::given_up`): accepted again before, it would have been answered for nothing it
//! sent before, its waiting sends never told; after, it is met afresh.

use super::entry::slot_name;
use super::peers::Forgotten;
use super::{Endpoint, Handler, SrcId};
use crate::clock::Instant;
use crate::cmd::{CmdEntry, Command};
use crate::error::Error;
use crate::sync::Ordering;

/// Commands set aside, all parked senders together, at most: the sender whose command goes
/// past this is given up at once.
const PARKED_COMMANDS_MAX: usize = 4096;

/// A sender whose region we could not map for want of descriptors or memory.
pub(super) struct Parked {
    pub src: SrcId,
    /// The first failed open.
    pub since: Instant,
    /// Its commands from the first on, in the order they came.
    pub commands: Vec<CmdEntry>,
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
    pub(super) fn park_if_parked(&mut self, cmd: &Command, entry: &CmdEntry, h: &mut impl Handler) -> bool {
        let src = source(cmd);
        let Some(i) = self.parked.iter().position(|p| p.src == src) else { return false };
        self.parked[i].commands.push(*entry);
        if self.parked.iter().map(|p| p.commands.len()).sum::<usize>() > PARKED_COMMANDS_MAX {
            let parked = self.parked.swap_remove(i);
            self.give_up(parked, h);
        }
        true
    }

    /// Park sender `src`, whose region's open failed for a shortage, from its command `entry` on.
    #[cold]
    pub(super) fn park(&mut self, src: SrcId, entry: &CmdEntry) {
        self.parked.push(Parked { src, since: Instant::now(), commands: vec![*entry] });
    }

    /// On the liveness tick: play every parked sender's commands again, in order. One whose
    /// region opens now is served; one still short is parked again (its first command is the
    /// one that tries the open); one parked past `parked_timeout` is given up. Returns the
    /// commands played.
    pub(super) fn replay_parked(&mut self, h: &mut impl Handler) -> usize {
        let timeout = self.params.parked_timeout;
        let mut played = 0;
        for parked in std::mem::take(&mut self.parked) {
            let (src, since) = (parked.src, parked.since);
            if since.elapsed() >= timeout {
                played += self.give_up(parked, h);
                continue;
            }
            played += self.play(parked, h);
            // Parked again: it still waits since its first failure.
            if let Some(again) = self.parked.iter_mut().find(|p| p.src == src) {
                again.since = since;
            }
        }
        played
    }

    /// Give `parked`'s sender up, unless its region opens at this last try, and play its
    /// commands: as a gone sender's (`gave_up`), or, served after all, as usual.
    fn give_up(&mut self, parked: Parked, h: &mut impl Handler) -> usize {
        let src = parked.src;
        match self.accept(src, h) {
            Ok(()) => {}
            Err(Error::Again) => {
                if let Some(slot) = self.region.peer_slots().get(src as usize) {
                    let incarnation = slot.incarnation.load(Ordering::Relaxed);
                    // Its entry is freed once what it pushed is handled, as for a sender we forget.
                    self.forgotten.insert(src, Forgotten { name: slot_name(slot), incarnation, given_up: true });
                    self.decide_later(src, incarnation);
                }
            }
            // Gone meanwhile: `accept` forgot it (its decision made), given up as well.
            Err(_) => {
                if let Some(forgotten) = self.forgotten.get_mut(&src) {
                    forgotten.given_up = true;
                }
            }
        }
        self.play(parked, h)
    }

    /// Handle `parked`'s commands (taken out of `self.parked`) as if they had just come; how
    /// many.
    fn play(&mut self, parked: Parked, h: &mut impl Handler) -> usize {
        // Copies, not ring slots: the next command is at the ring's head (`ok_run`).
        let in_slot = std::mem::replace(&mut self.ok_run.in_slot, false);
        for entry in &parked.commands {
            self.handle_command(entry, h);
        }
        self.ok_run.in_slot = in_slot;
        parked.commands.len()
    }

    /// Whether we gave up the sender that entry `src` still holds (`Forgotten::given_up`).
    pub(super) fn gave_up(&self, src: SrcId) -> bool {
        self.forgotten.get(&src).is_some_and(|f| f.given_up && self.entry_holds(src, f.incarnation))
    }

    /// Whether sender `src` is parked (its entry is not a dead stranger's to free: `unmet`).
    pub(super) fn is_parked(&self, src: SrcId) -> bool {
        self.parked.iter().any(|p| p.src == src)
    }
}
