//! A global allocator that counts, for benches and tests that say how many allocations a
//! piece of work makes. A binary opts in with
//! `#[global_allocator] static A: CountingAllocator = CountingAllocator;`; nothing shipped
//! uses it. It is the system allocator with two counters, so it changes no behaviour.
//!
//! ```
//! use toolrail_test_support::alloc::{CountingAllocator, allocations_per};
//!
//! #[global_allocator]
//! static COUNTING: CountingAllocator = CountingAllocator;
//!
//! fn main() {
//!     // Each iteration makes one 16-byte vector.
//!     let (count, bytes) = allocations_per(100, |n| {
//!         for _ in 0..n {
//!             std::hint::black_box(vec![1_u8; 16]);
//!         }
//!     });
//!     assert_eq!((count, bytes), (1.0, 16.0));
//! }
//! ```

// The allocator hands every call to the system one: the only unsafe code of the test
// support, and never in a shipped binary.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static ALLOCATED_BYTES: AtomicU64 = AtomicU64::new(0);

/// The system allocator, counting allocations (a reallocation counts as one) and the bytes
/// asked for.
#[derive(Clone, Copy, Debug, Default)]
pub struct CountingAllocator;

// SAFETY: every call goes to the system allocator unchanged; the counters are atomics.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        ALLOCATED_BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
        // SAFETY: the caller's layout, handed on as the trait requires.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator (so from `System`) with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        ALLOCATED_BYTES.fetch_add(size as u64, Ordering::Relaxed);
        // SAFETY: the caller's pointer, layout and new size, as for `alloc` and `dealloc`.
        unsafe { System.realloc(ptr, layout, size) }
    }
}

/// Allocations and bytes per iteration while `run(iters)` runs, as counted by
/// [`CountingAllocator`] (zero when the binary did not install it). Other threads'
/// allocations in that time count too: measure on a quiet runtime.
pub fn allocations_per(iters: u32, run: impl FnOnce(u32)) -> (f64, f64) {
    let before = (
        ALLOCATIONS.load(Ordering::Relaxed),
        ALLOCATED_BYTES.load(Ordering::Relaxed),
    );
    run(iters);
    let per = |now: u64, then: u64| now.saturating_sub(then) as f64 / f64::from(iters.max(1));
    (
        per(ALLOCATIONS.load(Ordering::Relaxed), before.0),
        per(ALLOCATED_BYTES.load(Ordering::Relaxed), before.1),
    )
}
