//! FI_RSHM_* parameters, registered with the core so `fi_info -e` lists them.

use crate::core_api::provider_ptr;
use rshm_ffi as ffi;
use std::ffi::{c_int, CString};
use std::sync::OnceLock;
use std::time::Duration;

/// Every parameter: name (without the FI_RSHM_ prefix), type, help.
const DEFINITIONS: &[(&str, ffi::fi_param_type, &str)] = &[
    ("CMA", ffi::FI_PARAM_BOOL, "Use cross-memory attach (process_vm_readv) for large messages; off forces SAR bounce buffers (default: on, if the kernel permits)"),
    ("CMA_MIN", ffi::FI_PARAM_SIZE_T, "Smallest message sent by cross-memory attach (process_vm_readv by the receiver; RMA pulls with it at every size where allowed); messages above the inject size but below it go through SAR bounce buffers, both sides copying. 0: CMA for every message above the inject size (default: unset, above the inject size whichever of SAR and CMA the receivers measure faster on this host: docs/perf/protocols.md)"),
    ("SPLIT_MIN", ffi::FI_PARAM_SIZE_T, "Smallest message sent by CMA whose copy the two processes share, the receiver reading the first half while the sender writes the second into the receive's buffer; from half of it too in a one-way stream (other commands wait behind the message and none of the receiver's own sends waits) and for the reply to an RMA read whose initiator chose, by measurement, to have it pushed and split (default: 65536; SIZE_MAX, 18446744073709551615, turns it off)"),
    ("REMOTE_COMM", ffi::FI_PARAM_BOOL, "Advertise FI_REMOTE_COMM (Open MPI's mtl/ofi requires it; all peers are still on this node) (default: off)"),
    ("QUEUE_LEN", ffi::FI_PARAM_SIZE_T, "Entries in each endpoint's command queue and response queue, a power of two (default: 1024 commands, 512 responses)"),
    ("INJECT_COUNT", ffi::FI_PARAM_SIZE_T, "4 KiB inject buffers per endpoint (default: 128)"),
    ("SAR_COUNT", ffi::FI_PARAM_SIZE_T, "SAR bounce buffers per endpoint (default: 64)"),
    ("SAR_SIZE", ffi::FI_PARAM_SIZE_T, "Bytes per SAR bounce buffer (default: 32768)"),
    ("SAR_HOLD", ffi::FI_PARAM_SIZE_T, "SAR buffers an endpoint holds back after copying out of them, so that senders write into buffers whose cache lines have left its caches; at most seven eighths of SAR_COUNT, and given back early when senders find none free (default: seven eighths of SAR_COUNT; 0: give each back at once)"),
    ("INJECT_HOLD", ffi::FI_PARAM_SIZE_T, "Inject buffers an endpoint holds back after taking a message or an answer out of them, so that senders write into buffers whose cache lines have left its caches; at most seven eighths of INJECT_COUNT, and given back early when senders find none free. Pays where the two CPUs are far apart (2-4 KiB messages 17-27% faster on such a VM) and costs where they are close (4 KiB streams 23% slower) (default: 0, each given back at once)"),
    ("INLINE_MAX", ffi::FI_PARAM_SIZE_T, "Largest message carried inside its command queue entry; longer ones (up to 4 KiB) go through an inject buffer (default: 1032, the most an entry holds)"),
    ("PINGPONG_INLINE_MAX", ffi::FI_PARAM_SIZE_T, "Largest message carried inside its command queue entry when it is sent alone (no send since the last poll, no FI_MORE); longer ones go through an inject buffer, which the receiver reads with fewer waits for lines crossing between CPUs. Streams keep INLINE_MAX (default: 256)"),
    ("MAX_PEERS", ffi::FI_PARAM_SIZE_T, "Peers that may send to one endpoint (default: 1024)"),
    ("READ_ONE_TRIP_MAX", ffi::FI_PARAM_SIZE_T, "Largest RMA read answered in one round trip, its bytes placed by the target in a buffer of the initiator's region (an inject buffer up to 4 KiB, a SAR buffer above); larger reads take a reply message (default: 16384)"),
    ("PEER_TIMEOUT_MS", ffi::FI_PARAM_SIZE_T, "How long sends to an address with no endpoint behind it retry before failing; an address that an rshm process of this pid namespace generated, and whose process is gone, fails after DEAD_PEER_TIMEOUT_MS instead (default: 30000)"),
    ("PROGRESS_SPIN_US", ffi::FI_PARAM_SIZE_T, "Microseconds the FI_PROGRESS_AUTO thread keeps polling after a pass that served a peer, before it sleeps again; a stream of requests then costs no wake-up each, but a passive target that computes on the CPU it shares with the thread gives the thread part of it while requests keep coming. 0: sleep after every pass (default: 50)"),
    ("UNLINK_ON_SIGNAL", ffi::FI_PARAM_BOOL, "On SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGABRT, SIGBUS or SIGSEGV (unless ignored), remove this process's regions from /dev/shm, then let the signal do what it did before: kill the process, or run the handler the application or another library installed, as the C shm does. An application that lives on after its own handler has lost its names, so that no new peer finds it: turn this off for such an application (default: on)"),
    ("REAP_DEAD", ffi::FI_PARAM_BOOL, "Before this process opens its first endpoint, remove the regions in /dev/shm that processes of this user and pid namespace left when they died without closing their endpoints (killed, crashed): each holds the memory it used until removed (default: on)"),
    ("DEAD_PEER_TIMEOUT_MS", ffi::FI_PARAM_SIZE_T, "How long sends to an address whose endpoint's process died before this one reached it retry, waiting for a restarted process to take the address, before failing with FI_EIO (default: 500)"),
    ("PARKED_SENDER_TIMEOUT_MS", ffi::FI_PARAM_SIZE_T, "How long an endpoint that cannot map a new sender's memory for want of file descriptors or memory (at its hard open-files limit) keeps that sender's messages aside, in order, retrying every 100 ms, before it gives the sender up: its small messages are still delivered, and the sender's other sends fail with FI_EIO instead of waiting (default: 30000)"),
];

/// Register the parameters (once per load).
pub fn define_all() {
    for (name, ty, help) in DEFINITIONS {
        let name = CString::new(*name).expect("static name");
        let help = CString::new(*help).expect("static help");
        // SAFETY: valid provider and NUL-terminated strings; "%s" consumes `help`.
        unsafe { ffi::fi_param_define(provider_ptr(), name.as_ptr(), *ty, c"%s".as_ptr(), help.as_ptr()) };
    }
}

fn get_bool(name: &str) -> Option<bool> {
    let name = CString::new(name).ok()?;
    let mut v: c_int = 0;
    // SAFETY: FI_PARAM_BOOL writes an int.
    let rc = unsafe { ffi::fi_param_get(provider_ptr() as *mut _, name.as_ptr(), (&mut v as *mut c_int).cast()) };
    (rc == 0).then_some(v != 0)
}

fn get_size(name: &str) -> Option<usize> {
    let name = CString::new(name).ok()?;
    let mut v: usize = 0;
    // SAFETY: FI_PARAM_SIZE_T writes a size_t.
    let rc = unsafe { ffi::fi_param_get(provider_ptr() as *mut _, name.as_ptr(), (&mut v as *mut usize).cast()) };
    (rc == 0).then_some(v)
}

/// Default of FI_RSHM_READ_ONE_TRIP_MAX: reads up to this size are answered in one round trip
/// (see `ep::rma`), chosen by measurement (docs/perf/protocols.md).
pub const READ_ONE_TRIP_MAX: usize = 16384;

/// Without FI_RSHM_CMA_MIN no message is sent by CMA by size alone: above the inject size (4 KiB)
/// they go by whichever of SAR and CMA the timings say is faster (`Params::measure_protocol`). On
/// this project's VM, SAR beat CMA from 8 KiB to 4 MiB by
/// 1.5-2.5x at 2026-11-23 12:17 (kernel 6.18.44-fc-v782), where hosts before (6.18.44-fc-v669)
/// and after (6.18.44-fc-v595, 2026-11-25) had CMA ahead by 1.4-1.6x from 64 KiB
/// (docs/perf/protocols.md).
pub const CMA_MIN: usize = usize::MAX;

/// Default of FI_RSHM_SPLIT_MIN: CMA messages from 64 KiB are copied by both processes at once
/// (`smr_core::endpoint::split`; docs/perf/protocols.md).
pub const SPLIT_MIN: usize = 64 * 1024;

/// The parameters as read once from the environment.
#[derive(Debug, Clone)]
pub struct Config {
    pub engine: smr_core::endpoint::Params,
    pub remote_comm: bool,
    /// Reads up to this size are answered in one round trip (`ep::rma`).
    pub read_one_trip_max: usize,
    /// How long the auto-progress thread polls on after serving (None: `progress::SPIN`).
    pub progress_spin: Option<Duration>,
    /// Remove dead processes' regions before the first endpoint (`crate::reap`).
    pub reap_dead: bool,
    /// Unlink this process's region names on a fatal signal (`smr_core::signal_unlink`).
    pub unlink_on_signal: bool,
}

pub fn config() -> &'static Config {
    static CONFIG: OnceLock<Config> = OnceLock::new();
    CONFIG.get_or_init(|| {
        let mut engine = smr_core::endpoint::Params::default();
        if let Some(cma) = get_bool("CMA") {
            engine.cma = cma;
        }
        let cma_min = get_size("CMA_MIN");
        engine.cma_min = cma_min.unwrap_or(CMA_MIN);
        engine.measure_protocol = cma_min.is_none();
        engine.split_min = get_size("SPLIT_MIN").unwrap_or(SPLIT_MIN);
        let c = &mut engine.counts;
        match get_size("QUEUE_LEN") {
            Some(n) if n.is_power_of_two() => {
                c.cmd_len = n as u64;
                c.resp_len = n as u64;
            }
            Some(n) => crate::warn!(Core, "FI_RSHM_QUEUE_LEN={n} is not a power of two: using {}", c.cmd_len),
            None => {}
        }
        if let Some(n) = get_size("INJECT_COUNT") {
            c.inject_count = n as u64;
        }
        if let Some(n) = get_size("SAR_COUNT") {
            c.sar_count = n as u64;
        }
        if let Some(n) = get_size("SAR_SIZE") {
            c.sar_size = n as u64;
        }
        if let Some(n) = get_size("SAR_HOLD") {
            engine.sar_hold = n;
        }
        if let Some(n) = get_size("INJECT_HOLD") {
            engine.inject_hold = n;
        }
        match get_size("INLINE_MAX") {
            Some(n) if n <= smr_core::cmd::INLINE_MAX => engine.inline_max = n,
            Some(n) => crate::warn!(
                Core,
                "FI_RSHM_INLINE_MAX={n} is above {}, the most a queue entry holds: using {}",
                smr_core::cmd::INLINE_MAX,
                engine.inline_max
            ),
            None => {}
        }
        if let Some(n) = get_size("PINGPONG_INLINE_MAX") {
            engine.pingpong_inline_max = n;
        }
        if let Some(n) = get_size("MAX_PEERS") {
            c.max_peers = n as u64;
        }
        if let Some(ms) = get_size("PEER_TIMEOUT_MS") {
            engine.absent_peer_timeout = Duration::from_millis(ms as u64);
        }
        if let Some(ms) = get_size("DEAD_PEER_TIMEOUT_MS") {
            engine.dead_owner_timeout = Duration::from_millis(ms as u64);
        }
        if let Some(ms) = get_size("PARKED_SENDER_TIMEOUT_MS") {
            engine.parked_timeout = Duration::from_millis(ms as u64);
        }
        engine.name_owner_gone = Some(crate::names::generated_name_owner_gone);
        let read_one_trip_max = get_size("READ_ONE_TRIP_MAX").unwrap_or(READ_ONE_TRIP_MAX);
        let progress_spin = get_size("PROGRESS_SPIN_US").map(|us| Duration::from_micros(us as u64));
        Config {
            engine,
            remote_comm: get_bool("REMOTE_COMM").unwrap_or(false),
            read_one_trip_max,
            progress_spin,
            reap_dead: get_bool("REAP_DEAD").unwrap_or(true),
            unlink_on_signal: get_bool("UNLINK_ON_SIGNAL").unwrap_or(true),
        }
    })
}
