//! Recovery for the file tools: a `write` or `edit` that started and has no result logged
//! its `fs/write-intent` first, so the file itself tells whether the change happened.

use std::path::Path;

use toolrail_tools_core::log::{
    EventData,
    recovery::{EffectProbe, InterruptedCall, ProbeVerdict},
};

use crate::version::file_digest;

/// Compares the file named by a call's last write intent with the intent's digests: equal to
/// `after`, the call completed; equal to `before` (or absent when it did not exist), it did
/// not happen; anything else stays unknown.
///
/// A `write` or `edit` that started but logged no intent: unknown by default. Under
/// [`FsEffectProbe::for_strict_log`] it did not happen — in the strict durability mode its
/// intent is durable before the file is touched, so a missing intent means an untouched
/// file. (In `batched` or `none` mode the intent itself may be what the crash lost.) The
/// probe knows the file tools by their names, `write` and `edit`: a registry holds one tool
/// per name, so a session that gives those names to other tools must not use this probe.
#[derive(Clone, Copy, Debug, Default)]
pub struct FsEffectProbe {
    strict_log: bool,
}

impl FsEffectProbe {
    /// For a log of any durability mode.
    pub fn new() -> Self {
        Self::default()
    }

    /// For a log written in the strict durability mode.
    pub fn for_strict_log() -> Self {
        Self { strict_log: true }
    }
}

impl EffectProbe for FsEffectProbe {
    fn probe(&self, call: &InterruptedCall<'_>) -> Result<Option<ProbeVerdict>, String> {
        let Some(intent) = call.own_events.iter().rev().find_map(|event| {
            if let EventData::FsWriteIntent(intent) = &event.data {
                Some(intent)
            } else {
                None
            }
        }) else {
            if self.strict_log && matches!(call.name, "write" | "edit") {
                return Ok(Some(ProbeVerdict::DidNotHappen {
                    evidence: "no write intent was logged, and in strict mode the intent is durable before the file is touched".to_owned(),
                }));
            }
            return Ok(None);
        };
        let now = file_digest(Path::new(&intent.path))
            .map_err(|error| format!("`{}` cannot be read: {error}", intent.path))?;
        let shown = |digest: &Option<String>| digest.clone().unwrap_or_else(|| "absent".to_owned());
        if now.as_deref() == Some(intent.after.as_str()) {
            return Ok(Some(ProbeVerdict::Completed {
                evidence: format!(
                    "`{}` has the digest the write intended ({})",
                    intent.path, intent.after
                ),
            }));
        }
        if now == intent.before {
            return Ok(Some(ProbeVerdict::DidNotHappen {
                evidence: format!(
                    "`{}` is as it was before the write ({})",
                    intent.path,
                    shown(&intent.before)
                ),
            }));
        }
        Err(format!(
            "`{}` is neither as before ({}) nor as intended ({}): now {}",
            intent.path,
            shown(&intent.before),
            intent.after,
            shown(&now)
        ))
    }
}
