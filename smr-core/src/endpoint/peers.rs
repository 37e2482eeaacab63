//! Both directions of the address exchange, and liveness.
//!
//! Sender side: a peer is a name until the first send maps its region, claims an entry in its
//! peer table (our name, pid, start time, incarnation) and pushes a CONNECT naming our
//! incarnation, before anything else. The request is idempotent and re-sent until a CONN_ACK
//! arrives, so a lost request cannot hang anybody.
//! Receiver side: a CONNECT from the sender its entry holds (or a command from an entry whose
//! sender we never met) makes us read the table entry, map the sender's region and check it is
//! the process the entry claims to be. Commands a sender we forgot left behind stay its own
//! (`Forgotten`).

use super::entry::{claim_slot, sender_alive, slot_name, slot_sender};
use super::{AnswerTo, Endpoint, Handler, PeerId, SrcId};
use crate::clock::Instant;
use crate::cmd::{op, resp, CmdEntry, RespEntry, Status};
use crate::error::{Error, Result};
use crate::layout::{PeerSlot, SLOT_FREE, SLOT_READY};
use crate::liveness::Watch;
use crate::region::{check_name, Region};
use crate::ring::PushError;
use crate::sync::Ordering;
use std::sync::Arc;

/// A peer we send to.
pub(super) struct OutPeer {
    pub name: String,
    pub link: Option<Link>,
    /// Set when the mapped owner died; cleared when a new owner of the name is connected.
    pub dead: bool,
    /// First failed attempt to find the region, for giving up on absent peers.
    pub absent_since: Option<Instant>,
}

/// A mapped peer region and our entry in its peer table.
pub(super) struct Link {
    /// Shared with the entry of the same peer as a sender to us (`Endpoint::mapped_region`).
    pub region: Arc<Region>,
    pub slot: u32,
    /// Our connection request is in its ring: nothing else of ours goes before it.
    pub connect_sent: bool,
    pub acked: bool,
    pub last_request: Instant,
    /// Cleared when the peer's kernel refused CMA.
    pub cma: bool,
    /// Sent to since the last liveness check: a peer we talk to is watched even when nothing
    /// waits on it, so sends to a dead one fail instead of filling its queue.
    pub used: bool,
    pub last_check: Instant,
    pub owner: Watch,
    /// Our last looks at the owner's free-poll count (`peer_is_free`) and at its count of every
    /// progress call (`peer_progresses`).
    pub seen_free: BeatSeen,
    pub seen_polls: BeatSeen,
    /// Both counts (every call, free calls) at our last look for `peer_busy_with_own`, and
    /// what the last look that saw one move said.
    pub seen_own: [u64; 2],
    pub busy_own: bool,
}

impl Link {
    /// Every message but the first few: connected, acknowledged, the receiver still open.
    fn ready(&self) -> bool {
        self.acked && !self.region.closed()
    }
}

impl Link {
    /// The owner of the region we send to is gone: it closed its endpoint, its process died,
    /// or its file was cut short.
    pub fn owner_gone(&self) -> bool {
        self.region.closed() || !(self.owner.alive() && self.region.intact())
    }

    /// The receiver freed our entry of its table (of our `incarnation`): it dropped us (gave
    /// us up, `parked`, or a peer scribbled there), and answers nothing we sent before. An
    /// entry CLAIMED is judged at a later look: the receiver holds it so for a moment while it
    /// checks whose it is (`free_entry_of`), and keeps it if it is ours.
    pub fn dropped(&self, incarnation: u64) -> bool {
        self.region.peer_slots().get(self.slot as usize).map_or(true, |entry| {
            match entry.state.load(Ordering::Acquire) & 3 {
                SLOT_FREE => true,
                SLOT_READY => entry.incarnation.load(Ordering::Relaxed) != incarnation,
                _ => false,
            }
        })
    }
}

/// What a look at one of a peer's owner's progress counts (`peer_is_free`, `peer_progresses`)
/// saw: the count, when (the fine clock: the window is microseconds, below the coarse clock's
/// tick), and whether it found it moving.
#[derive(Clone, Copy)]
pub(super) struct BeatSeen {
    pub count: u64,
    pub at: std::time::Instant,
    pub moving: bool,
    /// When a look last saw the count move.
    pub moved_at: Option<std::time::Instant>,
}

/// A response waiting for room in its sender's ring, for the sender of `incarnation` only: the
/// entry of our peer table that names it (`src`) may pass to another sender meanwhile.
#[derive(Clone, Copy)]
pub(super) struct QueuedResp {
    pub src: SrcId,
    pub incarnation: u64,
    pub entry: RespEntry,
}

/// A sender we dropped. Its commands may still come, from its entry of our peer table, until
/// our ring has passed them, when we free the entry (`spare::Decision`); and, should another
/// hold the entry by then (a scribble), they are its own, not the holder's (whose message ids
/// are its own: answered as the holder's, such a command could complete one of its sends, and
/// a segment could land in one of its messages). A sender's first command is its CONNECT, which
/// names its incarnation, so a command from the entry is the holder's only once we have taken
/// its CONNECT (`Endpoint::left_by_forgotten`).
pub(super) struct Forgotten {
    /// None for a sender we never met (`note_gone_sender`): nothing vouches for its commands,
    /// which may be garbage, so none is delivered and no buffer they name is taken back.
    pub name: Option<String>,
    pub incarnation: u64,
    /// We gave it up, alive, for a shortage of ours (`parked`): until its entry is freed, its
    /// commands are a gone sender's, and it is neither accepted nor parked again.
    pub given_up: bool,
}

impl Endpoint {
    /// Whether entry `src` of our peer table holds the sender of `incarnation` now (a CONNECT
    /// naming another is a gone sender's: `note_gone_sender`).
    pub(super) fn entry_holds(&self, src: SrcId, incarnation: u64) -> bool {
        self.region.peer_slots().get(src as usize).is_some_and(|slot| {
            slot.state.load(Ordering::Acquire) & 3 == SLOT_READY
                && slot.incarnation.load(Ordering::Relaxed) == incarnation
        })
    }

    /// The sender we know in entry `src`, if it is the one of `incarnation`.
    pub(super) fn sender_at(&self, src: SrcId, incarnation: u64) -> Option<&InPeer> {
        self.inp.get(&src).filter(|p| p.incarnation == incarnation)
    }

    /// Whether a command from entry `src` is one a sender we forgot there left: we know no
    /// sender there now, and the entry no longer holds the forgotten one (a successor's CONNECT
    /// would have come first).
    pub(super) fn left_by_forgotten(&self, src: SrcId) -> bool {
        !self.inp.contains_key(&src) && self.forgotten.get(&src).is_some_and(|f| !self.entry_holds(src, f.incarnation))
    }

    /// Whether we knew the sender we forgot in entry `src`: its queued inline and inject
    /// messages are delivered, and the buffers of ours its commands name come back.
    pub(super) fn knew_forgotten(&self, src: SrcId) -> bool {
        self.forgotten.get(&src).is_some_and(|f| f.name.is_some())
    }

    /// A CONNECT from entry `src` whose sender (`incarnation`) does not hold the entry: garbage,
    /// as an honest sender's entry passes on only once we freed it, and we free it only past
    /// every command its sender pushed (`claim_slot`, `spare::Decision`). Taken for a gone
    /// sender's: what follows it from the entry is that sender's, not the holder's, which is
    /// learnt from its own request. A sender we know by that incarnation keeps the entry while
    /// it lives (`accept` refuses another's request in it as a scribble); one we never met is
    /// vouched for by nothing, and its commands are dropped.
    pub(super) fn note_gone_sender(&mut self, src: SrcId, incarnation: u64) {
        let forgotten = self.forgotten.get(&src).is_some_and(|f| f.incarnation == incarnation);
        if self.sender_at(src, incarnation).is_none() && !forgotten {
            self.forgotten.insert(src, Forgotten { name: None, incarnation, given_up: false });
        }
    }
}

/// A peer that sends to us.
pub(super) struct InPeer {
    pub name: String,
    /// Shared with our link to the same peer as a receiver (`Endpoint::mapped_region`).
    pub region: Arc<Region>,
    pub watch: Watch,
    pub incarnation: u64,
}

/// Senders by source id (their index in our peer table): a dense table, so the per-message
/// lookup is an index, not a hash. Its entries are boxed: a sender's id is the first free entry
/// from where its name hashes to in our table (`claim_slot`), once anywhere up to `max_peers`,
/// so the table grew to about that length with the first sender, and of whole entries (about
/// 330 bytes each) it took 330 KiB of private memory per endpoint; of boxes, 8 KiB (now the
/// hash picks among the first 64 entries). What the per-message path reads, the sender's
/// incarnation, is kept beside them (`gens`), so that path loads no box.
#[derive(Default)]
pub(super) struct SrcTable {
    slots: Vec<Option<Box<InPeer>>>,
    /// The ids that have an entry, so that a walk over the senders takes as many steps as there
    /// are senders, not as the table is long (up to `max_peers`).
    present: Vec<SrcId>,
    /// The incarnation of the sender at each id, 0 where there is none (or where it is 0 itself:
    /// then `incarnation` says None and callers take the general path, which uses `get`).
    gens: Vec<u64>,
}

impl SrcTable {
    pub fn get(&self, src: &SrcId) -> Option<&InPeer> {
        self.slots.get(*src as usize)?.as_deref()
    }

    pub fn get_mut(&mut self, src: &SrcId) -> Option<&mut InPeer> {
        self.slots.get_mut(*src as usize)?.as_deref_mut()
    }

    /// The incarnation of the sender at `src`, without loading its entry (see `gens`).
    #[inline(always)]
    pub fn incarnation(&self, src: SrcId) -> Option<u64> {
        self.gens.get(src as usize).copied().filter(|&g| g != 0)
    }

    pub fn contains_key(&self, src: &SrcId) -> bool {
        self.get(src).is_some()
    }

    pub fn insert(&mut self, src: SrcId, peer: InPeer) {
        let at = src as usize;
        if self.slots.len() <= at {
            self.slots.resize_with(at + 1, || None);
            self.gens.resize(at + 1, 0);
        }
        self.gens[at] = peer.incarnation;
        if self.slots[at].replace(Box::new(peer)).is_none() {
            self.present.push(src);
        }
    }

    pub fn remove(&mut self, src: &SrcId) -> Option<InPeer> {
        if let Some(g) = self.gens.get_mut(*src as usize) {
            *g = 0;
        }
        let peer = self.slots.get_mut(*src as usize)?.take()?;
        self.present.retain(|id| id != src);
        Some(*peer)
    }

    pub fn iter(&self) -> impl Iterator<Item = (SrcId, &InPeer)> {
        self.present.iter().filter_map(|&id| Some((id, self.get(&id)?)))
    }
}

/// Push `entry` into `region`'s command ring as the sender at `slot` of its peer table (whose
/// claim record is there), and wake the owner.
pub(super) fn push_cmd(region: &Region, slot: u32, entry: &CmdEntry) -> Result<()> {
    pushed(region, slot, region.cmd_ring_as(slot).push(entry))
}

/// `push_cmd` for a command written in place into the claimed slot (`Ring::push_with`).
#[inline(always)]
pub(super) fn push_cmd_with(region: &Region, slot: u32, fill: impl FnOnce(&mut CmdEntry)) -> Result<()> {
    pushed(region, slot, region.cmd_ring_as(slot).push_with(fill))
}

fn pushed(region: &Region, slot: u32, push: std::result::Result<(), PushError>) -> Result<()> {
    match push {
        Ok(()) => {
            crate::wake::notify(region.wake_word());
            Ok(())
        }
        Err(refused) => Err(no_room(region, crate::wake::room_sender_bit(slot), refused)),
    }
}

/// A push into `region`'s ring that was refused: `Again` to the caller, and if the ring was
/// full, the owner asked to wake `who` once it has taken entries (`wake::want_room`).
pub(super) fn no_room(region: &Region, who: u32, refused: PushError) -> Error {
    if refused == PushError::Full {
        crate::wake::want_room(region.wake_word(), who);
    }
    Error::Again
}

/// The answer to a connection request: the sender's index in our peer table.
fn conn_ack(src: SrcId) -> RespEntry {
    RespEntry { kind: resp::CONN_ACK, status: Status::Ok as u32, msg_id: 0, value: src as u64, ..Default::default() }
}

impl Endpoint {
    /// The peer to send to that is the sender of `to` (connected on first use, as `add_peer`):
    /// where a receiver sends a reply. `PeerDead` once the sender has left its entry
    /// (`AnswerTo`). Needs no copy of the name once connected.
    pub fn peer_of(&mut self, to: AnswerTo) -> Result<PeerId> {
        let name = &self.sender_at(to.src, to.src_gen).ok_or(Error::PeerDead)?.name;
        if let Some(&id) = self.out_by_name.get(name.as_str()) {
            return Ok(id);
        }
        let name = name.clone();
        self.add_peer(&name)
    }

    /// Register a peer by name. Nothing is mapped until the first send.
    pub fn add_peer(&mut self, name: &str) -> Result<PeerId> {
        check_name(name)?;
        if let Some(&id) = self.out_by_name.get(name) {
            return Ok(id);
        }
        let id = self.out.len() as PeerId;
        self.out.push(OutPeer { name: name.to_string(), link: None, dead: false, absent_since: None });
        self.out_by_name.insert(name.to_string(), id);
        Ok(id)
    }

    pub fn peer_name(&self, peer: PeerId) -> Option<&str> {
        self.out.get(peer as usize).map(|p| p.name.as_str())
    }

    /// Whether `peer` and we may copy between each other with CMA: both regions say CMA is on.
    /// False until the link to it is made, and after it refused a CMA copy.
    pub fn cma_with(&self, peer: PeerId) -> bool {
        self.cma_ok && self.out.get(peer as usize).and_then(|p| p.link.as_ref()).is_some_and(|l| l.cma)
    }

    /// The name of a sender, as it announced itself in our peer table.
    pub fn src_name(&self, src: SrcId) -> Option<&str> {
        self.inp.get(&src).map(|p| p.name.as_str())
    }

    /// The mapped, connected link to `peer`, establishing it on first use.
    #[inline]
    pub(super) fn link(&mut self, peer: PeerId) -> Result<&mut Link> {
        if self.out.get(peer as usize).is_some_and(|p| p.link.as_ref().is_some_and(Link::ready)) {
            return Ok(self.out[peer as usize].link.as_mut().expect("checked above"));
        }
        self.link_slow(peer)
    }

    /// `link` without its slow path: the link to a peer that is ready, or None.
    #[inline(always)]
    pub(super) fn ready_link(&mut self, peer: PeerId) -> Option<&mut Link> {
        self.out.get_mut(peer as usize)?.link.as_mut().filter(|l| l.ready())
    }

    /// `link` for a peer not yet connected, not yet acknowledged, or whose receiver closed.
    fn link_slow(&mut self, peer: PeerId) -> Result<&mut Link> {
        let retry = self.params.connect_retry;
        let absent_timeout = self.params.absent_peer_timeout;
        let dead_owner_timeout = self.params.dead_owner_timeout;
        let name_owner_gone = self.params.name_owner_gone;
        let (me, my_inc) = (self.me, self.region.incarnation());
        // The receiver's region, if we map it already as a sender to us.
        let shared = match self.out.get(peer as usize) {
            Some(p) if p.link.is_none() => self.mapped_region(&p.name, None),
            _ => None,
        };
        let p = self.out.get_mut(peer as usize).ok_or(Error::Invalid("unknown peer handle"))?;
        // A receiver that closed its endpoint takes nothing more: its region is as good as a
        // dead one's (a successor of the same name is found by the open below).
        if p.link.as_ref().is_some_and(|l| l.region.closed()) {
            p.link = None;
            p.dead = true;
        }
        // Sends still waiting on a dead or closed predecessor fail at the next liveness tick
        // (`check_peers` finds them by this peer being dead). Until then no successor is
        // linked: that would clear `dead`, and they would wait on the successor forever.
        if p.dead && p.link.is_none() && self.waits_on(peer) {
            return Err(Error::Again);
        }
        let p = &mut self.out[peer as usize];
        if p.link.is_none() {
            let opened = shared.map_or_else(|| Region::open(&p.name).map(Arc::new), Ok).map(|r| {
                let owner = r.watch_owner();
                (r, owner)
            });
            let (region, owner) = match opened {
                Ok((r, owner)) if owner.alive() => (r, owner),
                Ok(_) | Err(Error::NoSuchPeer) | Err(Error::Again) => {
                    if p.dead {
                        return Err(Error::PeerDead);
                    }
                    let since = *p.absent_since.get_or_insert_with(Instant::now);
                    // The region is there but its owner died (before we ever reached it): wait
                    // `dead_owner_timeout` for a successor to take the name, then report the
                    // death. A name with no region yet may belong to a peer still starting,
                    // unless the name says its owner is gone (its region was reaped; asked only
                    // once the shorter wait is over, since it may read /proc).
                    let owner_gone = |name: &str| name_owner_gone.is_some_and(|gone| gone(name));
                    if since.elapsed() > dead_owner_timeout && (opened.is_ok() || owner_gone(&p.name)) {
                        p.dead = true;
                        return Err(Error::PeerDead);
                    }
                    return Err(if since.elapsed() > absent_timeout { Error::NoSuchPeer } else { Error::Again });
                }
                Err(e) => return Err(e),
            };
            let slot = claim_slot(&region, self.region.name(), me, my_inc)?;
            // CMA names the owner by its pid, which means nothing in another pid namespace.
            let cma = region.flags() & crate::layout::FLAG_CMA != 0 && owner.pid_usable();
            let now = Instant::now();
            let seen = |count: &crate::sync::AtomicU64| BeatSeen {
                count: count.load(Ordering::Relaxed),
                at: std::time::Instant::now(),
                moving: false,
                moved_at: None,
            };
            let (seen_free, seen_polls) = (seen(&region.beat().free_polls), seen(&region.beat().polls));
            p.link = Some(Link {
                region,
                slot,
                acked: false,
                connect_sent: false,
                last_request: now,
                cma,
                used: false,
                last_check: now,
                owner,
                seen_own: [seen_polls.count, seen_free.count],
                busy_own: false,
                seen_free,
                seen_polls,
            });
            p.dead = false;
            p.absent_since = None;
        }
        let link = p.link.as_mut().expect("mapped above");
        let first = !link.connect_sent;
        if first || (!link.acked && link.last_request.elapsed() >= retry) {
            let pushed = push_cmd(&link.region, link.slot, &CmdEntry::connect(link.slot, my_inc));
            if first {
                // Our first command in its ring is the request, which names our incarnation: by
                // it the receiver tells our commands from those a predecessor in our entry left
                // (`Forgotten`). Until it is in (the ring was full), nothing else of ours goes.
                pushed?;
                link.connect_sent = true;
            }
            link.last_request = Instant::now();
        }
        Ok(link)
    }

    /// The region `name` if we map it already for the peer's other direction: as a sender to
    /// us (for a link, `incarnation` None: while that sender lives and has not closed, the name
    /// is still its), or as a receiver we link to (for a sender, of `incarnation`). One mapping
    /// and one descriptor per peer region instead of one per direction (docs/perf/scale.md).
    /// A scan of the peers, made once per connection.
    pub(super) fn mapped_region(&self, name: &str, incarnation: Option<u64>) -> Option<Arc<Region>> {
        match incarnation {
            None => self
                .inp
                .iter()
                .map(|(_, sender)| sender)
                .find(|sender| sender.name == name && !sender.region.closed() && sender.watch.alive())
                .map(|sender| Arc::clone(&sender.region)),
            Some(incarnation) => self
                .out
                .iter()
                .filter_map(|p| p.link.as_ref())
                .find(|l| l.region.name() == name && l.region.incarnation() == incarnation && !l.region.closed())
                .map(|l| Arc::clone(&l.region)),
        }
    }

    /// Whether a send still waits on `peer` (unanswered, or answered in part).
    fn waits_on(&self, peer: PeerId) -> bool {
        self.pending.values().any(|s| s.peer == peer) || self.acked.values().any(|s| s.peer == peer)
    }

    /// Receiver side: learn (or re-learn) the sender behind table entry `src`. `Again` when its
    /// region did not open for a shortage of descriptors or memory of ours (`parked`).
    pub(super) fn accept(&mut self, src: SrcId, h: &mut impl Handler) -> Result<()> {
        let slots = self.region.peer_slots();
        let slot = slots.get(src as usize).ok_or(Error::Corrupt("peer index out of range"))?;
        let state = slot.state.load(Ordering::Acquire);
        if state & 3 != SLOT_READY {
            return Err(Error::Corrupt("command from an unclaimed peer entry"));
        }
        let name = slot_name(slot).ok_or(Error::Corrupt("peer entry holds a bad name"))?;
        let ident = slot_sender(state, slot);
        let incarnation = slot.incarnation.load(Ordering::Relaxed);
        if let Some(known) = self.inp.get(&src) {
            if known.incarnation == incarnation && known.name == name {
                self.send_resp(src, conn_ack(src));
                return Ok(());
            }
            // No sender takes the entry of one we know before we forget it and free the entry
            // (layout version 22: `spare::Decision`), so another sender's CONNECT in it is a
            // scribble while the one we know lives: it keeps the entry and its messages count
            // as its own. A dead one we forget now rather than on the next tick.
            if known.watch.alive() {
                return Err(Error::Corrupt("a CONNECT naming another sender in a live sender's entry"));
            }
            self.forget_in_peer(src, h);
        }
        // A sender that announced itself and then closed (or died) before we met it: its region
        // is gone or belongs to a successor. What it queued inline or in our inject buffers is
        // complete in our memory and is still delivered (as for senders we knew, `forgotten`).
        let opened = self.mapped_region(&name, Some(incarnation)).map_or_else(|| Region::open(&name).map(Arc::new), Ok);
        #[cfg(test)]
        let opened = if self.opens_short { Err(Error::Os(libc::EMFILE)) } else { opened };
        let region = match opened {
            Ok(r) if r.incarnation() == incarnation && r.owner() == ident => r,
            // A shortage of ours, not the sender's fault: its commands wait (`parked`).
            Err(e) if e.is_shortage() => return Err(Error::Again),
            other => {
                // Its entry is freed once what it pushed is handled, as for a sender we forget.
                self.decide_later(src, incarnation);
                self.forgotten.insert(src, Forgotten { name: Some(name), incarnation, given_up: false });
                return Err(other.err().unwrap_or(Error::Corrupt("peer entry does not match the region it names")));
            }
        };
        self.forgotten.remove(&src);
        let watch = region.watch_owner();
        self.inp.insert(src, InPeer { name, region, watch, incarnation });
        self.send_resp(src, conn_ack(src));
        Ok(())
    }

    /// Queue a response to sender `src`; it goes out now or from the backlog later, after the
    /// Ok answers gathered before it (`ok_run.rs`).
    pub(super) fn send_resp(&mut self, src: SrcId, entry: RespEntry) {
        self.flush_ok_run();
        self.push_resp(src, entry);
    }

    /// `send_resp` without the gathered answers: their own push.
    pub(super) fn push_resp(&mut self, src: SrcId, entry: RespEntry) {
        if !self.resp_backlog.holds(src) && self.try_resp(src, &entry) != Err(Error::Again) {
            return;
        }
        self.queue_resp(src, entry);
    }

    /// Queue a response for the sender now at `src`; one that has gone is not told.
    fn queue_resp(&mut self, src: SrcId, entry: RespEntry) {
        if let Some(sender) = self.inp.get(&src) {
            self.resp_backlog.push(QueuedResp { src, incarnation: sender.incarnation, entry });
        }
    }

    /// `send_resp` of the answer to `msg_id` carrying `bytes` (at most `ANSWER_DATA_MAX`;
    /// callers check), written straight into the sender's ring slot: no entry built, cleared
    /// and copied aside first, which for an entry of two lines cost the usual answer of a few
    /// bytes about 30 instructions.
    pub(super) fn send_answer(&mut self, src: SrcId, msg_id: u64, bytes: &[u8]) {
        // In the slot, the consumer copies the first line's 32 data bytes whatever the answer's
        // length, and reads `value` of them: the rest of a short answer's are what the slot held
        // a lap ago, bytes of an answer the same sender already had, and nobody reads them.
        self.send_resp_with(src, |e: &mut RespEntry| {
            e.set_done(msg_id, Status::Answered, bytes.len() as u64);
            e.data[..bytes.len()].copy_from_slice(bytes);
        });
    }

    /// `send_resp` of the response `fill` writes (every field the consumer reads), written
    /// straight into the sender's ring slot, or (the ring full, or responses queued before it)
    /// into a cleared entry for the backlog.
    pub(super) fn send_resp_with(&mut self, src: SrcId, fill: impl Fn(&mut RespEntry)) {
        self.flush_ok_run();
        if !self.resp_backlog.holds(src) && self.try_push_resp(src, |ring| ring.push_with(&fill)) != Err(Error::Again) {
            return;
        }
        let mut entry = RespEntry::default();
        fill(&mut entry);
        self.queue_resp(src, entry);
    }

    /// Sender `src`'s response ring (`peer` its entry), to push into with our claim record for
    /// it: `PeerSlot::resp_claim` of its entry in our peer table, which it finds through its
    /// link to us when its ring stalls (`Known::response_claimant_lives`).
    #[inline(always)]
    pub(super) fn resp_ring_of<'a>(&'a self, src: SrcId, peer: &'a InPeer) -> crate::ring::Ring<'a, RespEntry> {
        let ring = peer.region.resp_ring();
        match self.region.peer_slots().get(src as usize) {
            Some(entry) => ring.with_claim_record(&entry.resp_claim),
            None => ring,
        }
    }

    fn try_resp(&self, src: SrcId, entry: &RespEntry) -> Result<()> {
        self.try_push_resp(src, |ring| ring.push(entry))
    }

    /// Push a response into sender `src`'s ring with `push`, and wake the sender.
    #[inline(always)]
    fn try_push_resp(
        &self,
        src: SrcId,
        push: impl FnOnce(&crate::ring::Ring<'_, RespEntry>) -> std::result::Result<(), PushError>,
    ) -> Result<()> {
        let Some(peer) = self.inp.get(&src) else {
            return Ok(()); // the sender is gone: nobody to tell
        };
        match push(&self.resp_ring_of(src, peer)) {
            Ok(()) => {
                crate::wake::notify(peer.region.wake_word());
                Ok(())
            }
            Err(refused) => Err(no_room(&peer.region, crate::wake::ROOM_RESPONDERS, refused)),
        }
    }

    /// Push the responses that wait, each sender's in order, as far as its ring has room.
    pub(super) fn flush_resp_backlog(&mut self) {
        let mut backlog = std::mem::take(&mut self.resp_backlog);
        backlog.flush(|resps| {
            while let Some(&QueuedResp { src, incarnation, entry }) = resps.front() {
                // It waits while its sender lives and has no room for it. Dropped otherwise: its
                // sender gone, or a successor in its entry of our peer table (whose message ids
                // are its own: the answer could complete one of its sends).
                let waits = self
                    .sender_at(src, incarnation)
                    .is_some_and(|sender| self.try_resp(src, &entry) == Err(Error::Again) && sender.watch.alive());
                if waits {
                    return true;
                }
                resps.pop_front();
            }
            false
        });
        self.resp_backlog = backlog;
    }

    /// A CONN_ACK from the peer we connected to.
    pub(super) fn on_conn_ack(&mut self, from_slot: u64) {
        for p in &mut self.out {
            if let Some(link) = &mut p.link {
                if u64::from(link.slot) == from_slot && !link.acked {
                    link.acked = true;
                }
            }
        }
    }

    /// Check peers we use or that operations wait on; fail what waits on the dead. Returns
    /// the number of completions raised.
    pub(super) fn check_peers(&mut self, h: &mut impl Handler) -> usize {
        self.forget_late_answers();
        let mut events = 0;
        let incarnation = self.region.incarnation();
        let waited: std::collections::HashSet<PeerId> =
            self.pending.values().map(|s| s.peer).chain(self.acked.values().map(|s| s.peer)).collect();
        for (id, p) in self.out.iter_mut().enumerate() {
            let Some(link) = &mut p.link else { continue };
            let watched = waited.contains(&(id as PeerId)) || !link.acked || link.used;
            if !link.used {
                // Nothing sent to it since the last tick: the buffer we held for the next
                // message goes back to its pool, for its other senders.
                super::spare::give_back(&link.region, link.slot, incarnation);
            }
            link.used = false;
            if !watched {
                continue;
            }
            link.last_check = Instant::now();
            if link.owner_gone() || link.dropped(incarnation) {
                p.link = None;
                p.dead = true;
            }
        }
        let dead_receivers: Vec<PeerId> =
            waited.into_iter().filter(|&id| self.out.get(id as usize).is_some_and(|p| p.dead)).collect();
        if !dead_receivers.is_empty() {
            // A receiver answers before it closes its endpoint or exits, and we saw it gone
            // (Acquire) after any answer it published: answers it left in our response ring,
            // perhaps since this pass drained it, complete their sends first. Only the sends
            // it never answered fail.
            events += self.drain_responses(h);
        }
        events += self.fail_sends_to_dead(&dead_receivers, h);
        let dead: Vec<SrcId> = self.inp.iter().filter(|(_, p)| !p.watch.alive()).map(|(s, _)| s).collect();
        for src in dead {
            events += self.forget_in_peer(src, h);
        }
        events
    }

    /// A send to `peer` found its queue or pool full: if its owner died, say so (rate-limited
    /// to one check per liveness interval).
    pub(super) fn check_full_peer(&mut self, peer: PeerId) -> Error {
        let interval = self.params.liveness_interval;
        let Some(p) = self.out.get_mut(peer as usize) else { return Error::Again };
        let Some(link) = &mut p.link else { return Error::Again };
        if link.last_check.elapsed() < interval {
            return Error::Again;
        }
        link.last_check = Instant::now();
        if link.owner_gone() {
            p.link = None;
            p.dead = true;
            return Error::PeerDead;
        }
        Error::Again
    }

    /// Drop a sender: fail its partial receives; its table entry is freed once every command it
    /// pushed is handled (`spare::Decision`).
    pub(super) fn forget_in_peer(&mut self, src: SrcId, h: &mut impl Handler) -> usize {
        // Answers gathered for this sender go to its region, not to a successor's in its entry.
        self.flush_ok_run();
        if let Some(peer) = self.inp.remove(&src) {
            self.forgotten
                .insert(src, Forgotten { name: Some(peer.name), incarnation: peer.incarnation, given_up: false });
            self.decide_later(src, peer.incarnation);
        }
        self.fail_receives_from(src, h)
    }

    /// Closing: tell the peers we send to, and mark our region closed so that the peers that
    /// send to us stop, and fail what they are waiting for.
    pub(super) fn disconnect_all(&mut self) {
        self.region.mark_closed();
        let incarnation = self.region.incarnation();
        for p in &self.out {
            if let Some(link) = &p.link {
                super::spare::give_back(&link.region, link.slot, incarnation);
                let _ = push_cmd(&link.region, link.slot, &CmdEntry::control(op::DISCONNECT, link.slot));
            }
        }
    }
}

/// The peers an endpoint knows, for `check_stalls` to find the claim records that name a
/// stalled head of its rings (`ring::Ring::with_claim_record`) and judge whether their
/// producers live. Every producer is found: one of our command ring fills its entry in our peer
/// table before it sends anything and keeps its record there; one of our response ring is a
/// peer we send to, and keeps its record in its own table's entry for us.
pub(super) struct Known<'a> {
    pub inp: &'a SrcTable,
    pub out: &'a [OutPeer],
    pub table: &'a [PeerSlot],
}

impl Known<'_> {
    /// Whether a live sender's claim record names position `head` of our command ring.
    pub fn command_claimant_lives(&self, head: u64) -> bool {
        self.a_live_sender(|slot| crate::ring::names(slot.cmd_claim.load(Ordering::Acquire), head))
    }

    /// Whether a live sender marks that it copies into entry `mr` of our table of published
    /// registrations (`PeerSlot::mr_write`, `direct::write_published`).
    pub fn a_live_sender_writes_into(&self, mr: u32) -> bool {
        self.a_live_sender(|slot| slot.mr_write.load(Ordering::Acquire) == u64::from(mr) + 1)
    }

    /// Whether the sender of a READY entry for which `marks` holds lives (judged by its watch,
    /// or by the entry's pid and start time, or in another pid namespace by its region). The
    /// marks of an entry that is not READY count for nothing: its sender is gone (we freed the
    /// entry), or a new one is claiming it and has done nothing yet.
    fn a_live_sender(&self, marks: impl Fn(&PeerSlot) -> bool) -> bool {
        self.table.iter().enumerate().any(|(src, slot)| {
            let state = slot.state.load(Ordering::Acquire);
            state & 3 == SLOT_READY
                && marks(slot)
                && match self.inp.get(&(src as SrcId)) {
                    Some(p) => p.watch.alive(),
                    None => sender_alive(slot, slot_sender(state, slot)),
                }
        })
    }

    /// Whether a live peer we send to has a claim record naming position `head` of our response
    /// ring (in its region, in its table's entry for us).
    pub fn response_claimant_lives(&self, head: u64) -> bool {
        self.out.iter().filter_map(|p| p.link.as_ref()).any(|l| {
            l.region
                .peer_slots()
                .get(l.slot as usize)
                .is_some_and(|entry| crate::ring::names(entry.resp_claim.load(Ordering::Acquire), head))
                && l.owner.alive()
        })
    }
}
