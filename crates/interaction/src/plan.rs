//! Plan mode: while it is on, the plan-mode guard lets only read-only tools run. Entering is
//! the embedder's call; leaving is `exit_plan_mode {plan}`, which always asks for approval
//! (the pipeline asks, and logs it), so only an allowed answer turns plan mode off.

use schemars::JsonSchema;
use serde::Deserialize;
use toolrail_tools_core::log::{
    AppendUrgency, Event, EventData, EventDraft, EventSink, SinkError, Timestamp, ToolEvent,
    event::PlanMode as PlanModeEvent,
};
use toolrail_tools_core::{
    PlanModeSwitch, ToolContext, ToolFailure, ToolKind, ToolOutput, ToolResult, ToolSpec, Typed,
    TypedTool,
};

/// Turns plan mode on and off, logging each change.
#[derive(Clone, Debug, Default)]
pub struct PlanMode {
    switch: PlanModeSwitch,
}

impl PlanMode {
    /// Plan mode over `switch`, the one the plan-mode guard watches.
    pub fn new(switch: PlanModeSwitch) -> Self {
        Self { switch }
    }

    /// The state the log ends with (the last `plan/mode` event), set on `switch`.
    pub fn from_events(switch: PlanModeSwitch, events: &[Event]) -> Self {
        let active = events.iter().rev().find_map(|event| {
            if let EventData::PlanMode(mode) = &event.data {
                Some(mode.active)
            } else {
                None
            }
        });
        switch.set(active.unwrap_or(false));
        Self { switch }
    }

    /// Whether plan mode is on.
    pub fn is_active(&self) -> bool {
        self.switch.is_active()
    }

    /// The switch it sets, for the plan-mode guard.
    pub fn switch(&self) -> &PlanModeSwitch {
        &self.switch
    }

    /// Turns plan mode on, once the change is durable in the log.
    pub async fn enter(&self, log: &dyn EventSink) -> Result<u64, SinkError> {
        let draft = EventDraft {
            ts: Timestamp::now(),
            turn: None,
            step: None,
            call_id: None,
            data: EventData::PlanMode(PlanModeEvent { active: true }),
        };
        let seq = log.append(draft, AppendUrgency::Durable).await?;
        self.switch.set(true);
        Ok(seq)
    }

    /// The tool that leaves plan mode, ready to register.
    pub fn exit_tool(&self) -> Typed<ExitPlanMode> {
        Typed::new(ExitPlanMode::new(self.switch.clone()))
    }
}

/// The arguments of `exit_plan_mode`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExitPlanModeArgs {
    /// The plan to carry out, complete enough for the user to approve or reject.
    pub plan: String,
}

/// `exit_plan_mode {plan}`.
pub struct ExitPlanMode {
    switch: PlanModeSwitch,
}

impl ExitPlanMode {
    /// The name the model calls it by; the plan-mode guard's refusals name it too.
    pub const NAME: &'static str = "exit_plan_mode";

    fn new(switch: PlanModeSwitch) -> Self {
        Self { switch }
    }
}

impl TypedTool for ExitPlanMode {
    type Args = ExitPlanModeArgs;

    fn spec(&self) -> ToolSpec {
        ToolSpec::for_args::<ExitPlanModeArgs>(
            Self::NAME,
            "Present your plan and ask the user to approve it. Only an approval ends plan mode; after that, tools that change things may run. If the plan is rejected, plan mode stays on: revise the plan or ask what to change.",
        )
        .kind(ToolKind::Think)
        // Reading the plan back changes nothing: the plan-mode guard lets this one through.
        .read_only()
        .always_ask("leaving plan mode: approve this plan before anything that changes the workspace runs")
        .build()
    }

    fn check(&self, args: &ExitPlanModeArgs) -> Result<(), Vec<String>> {
        if args.plan.trim().is_empty() {
            return Err(vec!["/plan: must not be empty".to_owned()]);
        }
        Ok(())
    }

    async fn run(&self, ctx: &ToolContext, _args: ExitPlanModeArgs) -> ToolResult {
        // The pipeline ran this body only after an allowed answer.
        ctx.record(
            ToolEvent::PlanMode(PlanModeEvent { active: false }),
            AppendUrgency::Durable,
        )
        .await
        .map_err(|error| ToolFailure::new(format!("could not log leaving plan mode: {error}")))?;
        self.switch.set(false);
        Ok(ToolOutput::text(
            "The plan was approved and plan mode is off: carry it out.",
        ))
    }
}
