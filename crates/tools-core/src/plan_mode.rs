//! Whether plan mode is on: one switch shared by the guard that enforces it (in
//! `policy-guards`) and the tool that leaves it (in `interaction`), which may not depend on
//! each other.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Plan mode's on/off state. Clones share the state.
#[derive(Clone, Debug, Default)]
pub struct PlanModeSwitch(Arc<AtomicBool>);

impl PlanModeSwitch {
    /// A switch that starts off.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether plan mode is on now.
    pub fn is_active(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }

    /// Turns plan mode on or off, for every clone. Only the switch changes: logging the change
    /// (`plan/mode`) is the caller's.
    pub fn set(&self, active: bool) {
        self.0.store(active, Ordering::SeqCst);
    }
}
