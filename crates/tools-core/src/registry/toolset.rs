//! An immutable tool set: what one model request may call. A call is resolved against the
//! snapshot of its request, never against the live registry.

use std::collections::BTreeMap;
use std::sync::Arc;

use jsonschema::Validator;
use toolrail_session_log::{ToolSource, event::ToolManifestEntry};

use crate::spec::{Exposure, ToolSpec};
use crate::tool::Tool;

/// A registered tool with its provenance and compiled schemas.
pub struct ToolEntry {
    tool: Arc<dyn Tool>,
    source: ToolSource,
    input: Validator,
    output: Option<Validator>,
    /// The tool's spec as the registry offers it, when that differs from the tool's own
    /// (deferred by configuration).
    offered_spec: Option<ToolSpec>,
}

impl ToolEntry {
    pub(crate) fn new(
        tool: Arc<dyn Tool>,
        source: ToolSource,
        input: Validator,
        output: Option<Validator>,
    ) -> Self {
        Self {
            tool,
            source,
            input,
            output,
            offered_spec: None,
        }
    }

    /// The same tool, offered as `exposure` says whatever its own spec says.
    pub(crate) fn exposed(mut self, exposure: Exposure) -> Self {
        self.offered_spec = Some(
            self.tool
                .spec()
                .clone()
                .into_builder()
                .exposure(exposure)
                .build(),
        );
        self
    }

    /// The registered tool. Its own spec may differ from the offered one: see
    /// [`ToolEntry::spec`].
    pub fn tool(&self) -> &Arc<dyn Tool> {
        &self.tool
    }

    /// The spec as the registry offers the tool (its exposure as configured).
    pub fn spec(&self) -> &ToolSpec {
        self.offered_spec
            .as_ref()
            .unwrap_or_else(|| self.tool.spec())
    }

    /// The name the tool is registered and called by.
    pub fn name(&self) -> &str {
        self.tool.spec().name()
    }

    /// Where the tool came from; recorded with each of its calls.
    pub fn source(&self) -> &ToolSource {
        &self.source
    }

    pub(crate) fn input_validator(&self) -> &Validator {
        &self.input
    }

    pub(crate) fn output_validator(&self) -> Option<&Validator> {
        self.output.as_ref()
    }

    fn manifest(&self) -> ToolManifestEntry {
        let spec = self.spec();
        ToolManifestEntry {
            name: spec.name().to_owned(),
            source: self.source.clone(),
            version: spec.version().to_owned(),
            read_only: spec.is_read_only(),
            idempotent: spec.is_idempotent(),
        }
    }
}

/// Who is asking to resolve a tool name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallOrigin {
    /// The model, directly or through a code-mode program: only offered tools resolve.
    Model,
    /// The embedding program: hidden tools resolve too.
    Host,
    /// A code-mode program (a binding call): tools kept for code resolve too.
    Code,
}

/// The tools of one model request, by name. Cheap to clone.
#[derive(Clone, Default)]
pub struct ToolSet {
    offered: Arc<BTreeMap<String, Arc<ToolEntry>>>,
    hidden: Arc<BTreeMap<String, Arc<ToolEntry>>>,
    /// In code mode: the tools a program may call but the model may not call directly.
    code_only: Arc<BTreeMap<String, Arc<ToolEntry>>>,
    /// In code mode: why a code-only tool called directly is refused, in the words of the
    /// crate that owns code mode (which knows how its programs call a tool).
    code_only_refusal: Option<CodeOnlyRefusal>,
    /// In code mode: the one tool the model is offered.
    entry_point: Option<Arc<str>>,
}

/// What the model is told when it calls, directly, a tool kept for programs: given the
/// tool's name and the entry point's.
pub type CodeOnlyRefusal = fn(tool: &str, entry_point: &str) -> String;

/// The refusal when the code-mode crate gives none of its own.
fn generic_refusal(tool: &str, entry_point: &str) -> String {
    format!(
        "`{tool}` is not called directly in code mode: call it from a program through `{entry_point}`"
    )
}

impl ToolSet {
    pub(crate) fn from_entries<'a>(
        entries: impl IntoIterator<Item = &'a Arc<ToolEntry>>,
        is_loaded: impl Fn(&str) -> bool,
    ) -> Self {
        let mut offered = BTreeMap::new();
        let mut hidden = BTreeMap::new();
        for entry in entries {
            let name = entry.name().to_owned();
            match entry.spec().exposure() {
                Exposure::Direct => {
                    offered.insert(name, Arc::clone(entry));
                }
                Exposure::Deferred => {
                    if is_loaded(&name) {
                        offered.insert(name, Arc::clone(entry));
                    }
                }
                Exposure::Hidden => {
                    hidden.insert(name, Arc::clone(entry));
                }
            }
        }
        Self {
            offered: Arc::new(offered),
            hidden: Arc::new(hidden),
            code_only: Arc::default(),
            code_only_refusal: None,
            entry_point: None,
        }
    }

    /// This set in code mode: the model is offered `entry_point` alone (`run_code`), and
    /// every other offered tool is kept for programs (resolved for [`CallOrigin::Code`]).
    pub fn for_code_mode(&self, entry_point: &str) -> Self {
        let mut offered = BTreeMap::new();
        let mut code_only: BTreeMap<String, Arc<ToolEntry>> = (*self.code_only).clone();
        for (name, entry) in self.offered.iter() {
            if name == entry_point {
                offered.insert(name.clone(), Arc::clone(entry));
            } else {
                code_only.insert(name.clone(), Arc::clone(entry));
            }
        }
        Self {
            offered: Arc::new(offered),
            hidden: Arc::clone(&self.hidden),
            code_only: Arc::new(code_only),
            code_only_refusal: self.code_only_refusal,
            entry_point: Some(Arc::from(entry_point)),
        }
    }

    /// This set, refusing a direct call of a code-only tool with `refusal`'s words.
    pub fn with_code_only_refusal(mut self, refusal: CodeOnlyRefusal) -> Self {
        self.code_only_refusal = Some(refusal);
        self
    }

    /// Why a direct call of `name` is refused, when it is kept for code-mode programs.
    pub fn code_only_refusal(&self, name: &str) -> Option<String> {
        if !self.is_code_only(name) {
            return None;
        }
        let entry_point = self.entry_point.as_deref().unwrap_or("the code tool");
        let refusal = self.code_only_refusal.unwrap_or(generic_refusal);
        Some(refusal(name, entry_point))
    }

    /// This set without `name` offered (a native-mode session hides `run_code`).
    pub fn without(&self, name: &str) -> Self {
        let mut offered = (*self.offered).clone();
        offered.remove(name);
        Self {
            offered: Arc::new(offered),
            hidden: Arc::clone(&self.hidden),
            code_only: Arc::clone(&self.code_only),
            code_only_refusal: self.code_only_refusal,
            entry_point: self.entry_point.clone(),
        }
    }

    /// Whether `name` is kept for code-mode programs (and so refused to the model directly).
    pub fn is_code_only(&self, name: &str) -> bool {
        self.code_only.contains_key(name)
    }

    /// The tools a code-mode program may call: the offered ones and those kept for code,
    /// ordered by name.
    pub fn for_programs(&self) -> Vec<&Arc<ToolEntry>> {
        let mut all: Vec<&Arc<ToolEntry>> = self
            .offered
            .values()
            .chain(self.code_only.values())
            .collect();
        all.sort_by(|a, b| a.name().cmp(b.name()));
        all
    }

    /// Whether `other` is this very snapshot (or a copy of it): the same tools, found without
    /// comparing them. A registry hands out the same snapshot until it changes.
    pub fn is_same_snapshot(&self, other: &ToolSet) -> bool {
        Arc::ptr_eq(&self.offered, &other.offered)
            && Arc::ptr_eq(&self.hidden, &other.hidden)
            && Arc::ptr_eq(&self.code_only, &other.code_only)
            && self.entry_point == other.entry_point
    }

    /// Resolves a name for a caller; `None` is `UNKNOWN_TOOL`.
    pub fn resolve(&self, name: &str, origin: CallOrigin) -> Option<&Arc<ToolEntry>> {
        match origin {
            CallOrigin::Model => self.offered.get(name),
            CallOrigin::Host => self.offered.get(name).or_else(|| self.hidden.get(name)),
            CallOrigin::Code => self
                .code_only
                .get(name)
                .or_else(|| self.offered.get(name))
                .filter(|entry| !entry.spec().is_model_only()),
        }
    }

    /// The tools offered to the model, ordered by name.
    pub fn offered(&self) -> impl Iterator<Item = &Arc<ToolEntry>> {
        self.offered.values()
    }

    /// Names of the offered tools, ordered.
    pub fn names(&self) -> Vec<&str> {
        self.offered.keys().map(String::as_str).collect()
    }

    /// The offered tools as recorded in `session/start`.
    pub fn manifest(&self) -> Vec<ToolManifestEntry> {
        self.offered
            .values()
            .map(|entry| entry.manifest())
            .collect()
    }

    /// How many tools are offered to the model (hidden and code-only tools are not counted).
    pub fn len(&self) -> usize {
        self.offered.len()
    }

    /// Whether no tool is offered to the model (hidden and code-only tools may still resolve).
    pub fn is_empty(&self) -> bool {
        self.offered.is_empty()
    }
}
