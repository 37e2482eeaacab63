//! Peers waiting for room of ours are woken when we make it: senders waiting for our SAR
//! buffers when we give one back, and any peer that found one of our rings full once we have
//! taken entries.
//!
//! A large message goes through our SAR pool a segment at a time, its sender popping each
//! segment's buffer from our free stack (`send::push_segments`). A message longer than the pool
//! (over 2 MiB by default), or several senders at once, find the stack empty: the sender keeps
//! the rest of its message (`sar_tx`) and pushes it as we give buffers back. If that sender is
//! asleep in a blocking wait meanwhile (`fi_cntr_wait` or `fi_cq_sread` on the send's
//! completion, an auto-progress thread), nothing of ours reaches its rings to wake it: it slept
//! out its whole slice, 100 ms in the provider's waits, so a 2 MiB `fi_rdm_cntr_pingpong` took
//! 412 ms a round trip instead of 0.2.
//!
//! So whoever pushes a buffer onto our empty stack wakes our senders (`wake::notify`, a fence
//! and a load when a sender is not asleep). That loses no wake-up: a sender that found the stack
//! empty read an empty head, and the next change of the head is a push (a pop cannot move an
//! empty head), which finds the stack empty (`FreeStack::push_refilling`). The sender armed its
//! wake word before the progress pass that found no buffer, and we load that word after our push
//! (`notify`'s fence against `arm`'s): either we see it armed and wake it, or its pass saw our
//! buffer.
//!
//! Only our own pushes wake anyone: a sender that gives back a buffer of ours it could not use
//! (its command found our ring full) knows nothing of our other senders; those are left to the
//! waits' short sleeps while work waits for room (`Endpoint::waits_for_room`).
//!
//! A full ring is said by the peer that found it so, in our wake word (`wake::want_room`), a bit
//! for its group of senders (or for all that answer us): every poll of ours looks at that word
//! (`has_work`), and the pass after it, which took what it could from both rings, wakes the
//! peers whose bits are set (`wake_for_room`): those of our senders (commands), and the peers we
//! sent to (their responses). Before, nothing told them: a progress thread or a blocking wait
//! whose work waited for such room slept out its whole short slice (1 ms), and woke only then to
//! find the room made long before. The slice stays, as the backstop for the one look that can
//! miss the word (`want_room`).

use super::Endpoint;

impl Endpoint {
    /// We are done with SAR buffer `buf` of our pool: back to it (cold, `cold.rs`), waking our
    /// senders if the pool was empty.
    pub(super) fn give_back_sar(&mut self, buf: u32) {
        if self.sar_cold.give_back(&self.region.sar_stack(), buf) {
            self.wake_senders();
        }
    }

    /// `give_back_sar` straight to the stack, not held back cold (a buffer of a command we did
    /// not handle).
    pub(super) fn push_back_sar(&self, buf: u32) {
        if self.region.sar_stack().push_refilling(buf) == Ok(true) {
            self.wake_senders();
        }
    }

    /// Wake every sender that may sleep waiting for our SAR buffers.
    fn wake_senders(&self) {
        self.wake_for_room(crate::wake::ROOM_ALL_SENDERS);
    }

    /// Peers found one of our rings full (`wake::want_room`; `wanted`, their bits), and this
    /// pass took from both: wake the senders whose bit is set, and every peer we sent to if one
    /// of them asked (they push our responses).
    pub(super) fn wake_for_room(&self, wanted: u32) {
        for (src, sender) in self.inp.iter() {
            if wanted & crate::wake::room_sender_bit(src) != 0 {
                crate::wake::notify(sender.region.wake_word());
            }
        }
        if wanted & crate::wake::ROOM_RESPONDERS != 0 {
            for link in self.out.iter().filter_map(|p| p.link.as_ref()) {
                crate::wake::notify(link.region.wake_word());
            }
        }
    }

    /// Whether work of ours waits for room at a peer: SAR segments its pool or ring had no room
    /// for, staged messages its ring had no room for, answers its response ring had no room for.
    /// The peer wakes us when it makes that room (above), but for one look that can miss our
    /// request (`wake::want_room`), so a thread that sleeps with such work still sleeps briefly.
    pub fn waits_for_room(&self) -> bool {
        !self.sar_tx.is_empty() || !self.staged.is_empty() || !self.resp_backlog.is_empty()
    }
}
