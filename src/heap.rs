//! How the process heap gives memory back. glibc raises its mmap threshold to the size of the
//! largest block freed (up to 32 MiB), so after one 15 MiB tool result every later big buffer
//! comes from the heap and stays resident; a fixed threshold keeps big buffers mapped on their
//! own and returned to the system when dropped.

/// Blocks at least this large get their own mapping, unmapped when freed.
const OWN_MAPPING_FROM: i32 = 256 * 1024;

/// Fix the threshold (the binary calls this first; an embedding program keeps its own tuning).
pub fn return_big_buffers() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes glibc's malloc parameters; called before any thread starts.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, OWN_MAPPING_FROM);
    }
}
