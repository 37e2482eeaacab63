//! Where the main program is mapped: its data and bss hold the global and static symmetric
//! variables, whose address differs between PEs by the program's load address (not by the
//! symmetric heap's), so queued operations on them are translated through this range.

/// `[lo, hi)` covering the main program's loadable segments, if the loader reports them.
pub fn main_program() -> Option<(usize, usize)> {
    let mut range: Option<(usize, usize)> = None;
    // SAFETY: dl_iterate_phdr calls `first` with valid info pointers and our `data` pointer,
    // during this call only; `range` outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(first), (&mut range as *mut Option<(usize, usize)>).cast()) };
    range
}

/// The callback: records the first object (the main program) and stops.
unsafe extern "C" fn first(info: *mut libc::dl_phdr_info, _size: libc::size_t, data: *mut libc::c_void) -> libc::c_int {
    // SAFETY: dl_iterate_phdr passes a valid info, and data is the &mut Option above.
    let (info, out) = unsafe { (&*info, &mut *data.cast::<Option<(usize, usize)>>()) };
    if info.dlpi_phdr.is_null() {
        return 1;
    }
    // SAFETY: dlpi_phdr points to dlpi_phnum program headers (the loader's contract).
    let phdrs = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) };
    let base = info.dlpi_addr as usize;
    for ph in phdrs.iter().filter(|ph| ph.p_type == libc::PT_LOAD) {
        let lo = base + ph.p_vaddr as usize;
        let hi = lo + ph.p_memsz as usize;
        *out = Some(out.map_or((lo, hi), |(l, h)| (l.min(lo), h.max(hi))));
    }
    1
}

#[cfg(test)]
mod tests {
    static GLOBAL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

    #[test]
    fn covers_a_global() {
        let (lo, hi) = super::main_program().expect("main program mapped");
        let g = &GLOBAL as *const _ as usize;
        assert!(lo <= g && g < hi, "{lo:#x} {g:#x} {hi:#x}");
        let heap = Box::new(0u64);
        let h = &*heap as *const u64 as usize;
        assert!(!(lo <= h && h < hi));
    }
}
