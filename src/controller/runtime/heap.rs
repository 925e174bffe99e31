//! The allocator's figures of the process's heap, for `/metrics`: what live objects take
//! (`allocated`), the pages holding them (`active`), and what the allocator keeps resident
//! (`resident`, freed pages not yet returned included). Their gaps tell a leak (allocated
//! grows) from fragmentation (resident grows, allocated does not).

use tikv_jemalloc_ctl::{epoch, stats};

/// One reading of the heap, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HeapFigures {
    /// Bytes in live allocations.
    pub allocated: u64,
    /// Bytes in pages that hold live allocations.
    pub active: u64,
    /// Bytes the allocator holds resident, its own metadata included.
    pub resident: u64,
}

/// Reads the allocator's figures as of now; `None` where it keeps none (a build whose
/// allocator is not jemalloc reads zeros, which are reported as they are).
pub(crate) fn sample() -> Option<HeapFigures> {
    epoch::advance().ok()?;
    Some(HeapFigures {
        allocated: stats::allocated::read().ok()? as u64,
        active: stats::active::read().ok()? as u64,
        resident: stats::resident::read().ok()? as u64,
    })
}
