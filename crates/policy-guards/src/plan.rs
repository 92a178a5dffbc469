//! The plan-mode guard: while plan mode is on, only read-only tools run.

use toolrail_tools_core::{CallView, Guard, GuardVerdict, PlanModeSwitch};

/// The tool that leaves plan mode, named in every refusal.
pub const EXIT_PLAN_MODE: &str = "exit_plan_mode";

/// Refuses every call of a tool that is not read-only while plan mode is on.
#[derive(Clone, Debug)]
pub struct PlanModeGuard {
    switch: PlanModeSwitch,
}

impl PlanModeGuard {
    /// A guard watching `switch`: a clone of the one that entering and leaving plan mode set
    /// (clones share their state).
    pub fn new(switch: PlanModeSwitch) -> Self {
        Self { switch }
    }
}

impl Guard for PlanModeGuard {
    fn name(&self) -> &str {
        "plan-mode"
    }

    fn check(&self, call: &CallView<'_>) -> GuardVerdict {
        if !self.switch.is_active() || call.spec.is_read_only() {
            return GuardVerdict::Abstain;
        }
        GuardVerdict::Deny {
            reason: format!(
                "plan mode is on: only read-only tools may run, and `{}` is not one. Finish the plan, then call `{EXIT_PLAN_MODE}` with it to ask for approval to act",
                call.spec.name()
            ),
        }
    }
}
