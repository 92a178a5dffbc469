//! The tool registry (DESIGN §4): unique names, provenance, conflict rules, reserved names,
//! exposure, and immutable snapshots for each model request.
//!
//! Unlike a plain map, a second registration never silently replaces the first: a duplicate
//! built-in is a build error, and an extension or MCP tool that reuses a taken name is skipped
//! with a warning unless an explicit override names it.

mod scope;
mod toolset;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use jsonschema::Validator;
use parking_lot::RwLock;
use toolrail_session_log::ToolSource;

pub use scope::{NamePattern, ScopeBuilder, ToolScope};
pub use toolset::{CallOrigin, CodeOnlyRefusal, ToolEntry, ToolSet};

use crate::tool::Tool;

/// A configuration error: the registry cannot be built as asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    /// Two trusted tools (built-in or runtime) have the same name.
    #[error(
        "two built-in tools are named `{name}`; built-in names must be unique — rename one of them"
    )]
    DuplicateBuiltin {
        /// The name they share.
        name: String,
    },
    /// A tool not installed as the runtime's own takes a name kept for one
    /// ([`RegistryBuilder::reserve`]).
    #[error("`{name}` is reserved for the toolrail runtime; choose another name")]
    ReservedName {
        /// The reserved name it took.
        name: String,
    },
    /// A name that is not 1–64 characters from `A-Z`, `a-z`, `0-9`, `_` and `-`.
    #[error(
        "`{name}` is not a valid tool name: use 1–64 characters from A-Z, a-z, 0-9, `_` and `-`"
    )]
    InvalidName {
        /// The name, as the tool's spec gives it.
        name: String,
    },
    /// A tool's input or output schema is not one the JSON Schema validator can compile.
    #[error("the {which} schema of `{name}` does not compile: {message}")]
    InvalidSchema {
        /// The tool whose schema it is.
        name: String,
        /// `"input"` or `"output"`.
        which: &'static str,
        /// The validator's error.
        message: String,
    },
    /// A tool installed as the runtime's own has a name nobody reserved for it.
    #[error(
        "the runtime tool `{name}` has no reserved name; reserve it first (RegistryBuilder::reserve)"
    )]
    NotReserved {
        /// The tool's name.
        name: String,
    },
    /// A tool registered where it may not be: a trusted tool at run time, or a scope's own
    /// tool that shadows a name its parent lacks, adds one its parent has, or comes twice.
    #[error("scope: {message}")]
    Scope {
        /// What was asked, and what to do instead.
        message: String,
    },
    /// More than one problem: a build reports every one at once.
    #[error("several problems:\n{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
    Several(Vec<RegistryError>),
}

/// A registration that was skipped. Also logged through `tracing`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistryWarning {
    /// The name of the tool that was skipped.
    pub name: String,
    /// Where the skipped tool came from.
    pub skipped: ToolSource,
    /// The source that holds the name, when the skip was a name conflict.
    pub kept: Option<ToolSource>,
    /// The whole warning as logged: the tool, its source and why it was skipped.
    pub message: String,
}

/// Collects tools, then checks the conflict rules all at once.
#[derive(Default)]
pub struct RegistryBuilder {
    pending: Vec<(ToolSource, Arc<dyn Tool>)>,
    reserved: BTreeSet<String>,
    overrides: BTreeSet<String>,
    deferred: BTreeSet<String>,
    errors: Vec<RegistryError>,
}

impl RegistryBuilder {
    /// A builder with no tools, overrides or deferrals.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a trusted built-in tool.
    pub fn builtin(mut self, tool: impl Tool) -> Self {
        self.pending.push((ToolSource::Builtin, Arc::new(tool)));
        self
    }

    /// Adds a tool from an extension or an MCP server (any non-built-in source).
    pub fn external(mut self, source: ToolSource, tool: Arc<dyn Tool>) -> Self {
        self.pending.push((source, tool));
        self
    }

    /// Lets an external tool replace the built-in named `name`. Without it, the external
    /// tool is skipped with a warning.
    pub fn allow_override(mut self, name: impl Into<String>) -> Self {
        self.overrides.insert(name.into());
        self
    }

    /// Offers the tool named `name` only through `tool_search`, whatever its own spec says
    /// (a configuration deferring a shipped tool); it holds for a tool of that name that
    /// joins later too.
    pub fn defer(mut self, name: impl Into<String>) -> Self {
        self.deferred.insert(name.into());
        self
    }

    /// Keeps `name` for a tool of the runtime's own ([`runtime_tool`](Self::runtime_tool)):
    /// any other tool of that name (an extension's, an MCP server's, a scope's) is refused,
    /// whether or not the runtime installs one. The crate that owns the feature names it
    /// (code mode's `run_code`, the loop's `tool_search`).
    pub fn reserve(mut self, name: impl Into<String>) -> Self {
        self.reserved.insert(name.into());
        self
    }

    /// Installs one of the runtime's own tools; its name must be [reserved](Self::reserve).
    pub fn runtime_tool(mut self, tool: Arc<dyn Tool>) -> Self {
        self.pending.push((ToolSource::Runtime, tool));
        self
    }

    /// Checks every rule and builds the registry, or reports every problem at once.
    pub fn build(self) -> Result<(Registry, Vec<RegistryWarning>), RegistryError> {
        let mut errors = self.errors;
        let mut state = RegistryState {
            reserved: self.reserved,
            overrides: self.overrides,
            deferred: self.deferred,
            ..RegistryState::default()
        };
        let mut warnings = Vec::new();
        // Built-ins (and runtime tools) first, so an external tool never wins by coming early.
        let (trusted, external): (Vec<_>, Vec<_>) = self
            .pending
            .into_iter()
            .partition(|(source, _)| source.is_trusted());
        for (source, tool) in trusted.into_iter().chain(external) {
            match state.insert(source, tool) {
                Ok(Some(warning)) => warnings.push(warning),
                Ok(None) => {}
                Err(error) => errors.push(error),
            }
        }
        match errors.len() {
            0 => Ok((Registry::from_state(state), warnings)),
            1 => Err(errors.remove(0)),
            _ => Err(RegistryError::Several(errors)),
        }
    }
}

#[derive(Clone, Default)]
struct RegistryState {
    tools: BTreeMap<String, Arc<ToolEntry>>,
    /// Names kept for the runtime's own tools.
    reserved: BTreeSet<String>,
    overrides: BTreeSet<String>,
    /// Names offered only through `tool_search`, whatever their tools' specs say.
    deferred: BTreeSet<String>,
    /// Built-ins replaced by an explicit override; they come back when the overriding
    /// source leaves.
    displaced: BTreeMap<String, Arc<ToolEntry>>,
    loaded: BTreeSet<String>,
}

impl RegistryState {
    /// Removes every tool of `source`, bringing back the built-ins they had displaced;
    /// returns the names removed.
    fn withdraw(&mut self, source: &ToolSource) -> Vec<String> {
        let names: Vec<String> = self
            .tools
            .iter()
            .filter(|(_, entry)| entry.source() == source)
            .map(|(name, _)| name.clone())
            .collect();
        for name in &names {
            self.tools.remove(name);
            if let Some(builtin) = self.displaced.remove(name) {
                self.tools.insert(name.clone(), builtin);
            }
        }
        names
    }

    /// Adds a tool. A trusted tool that breaks a rule is a configuration error; any other
    /// tool that breaks one (a reserved or invalid name, a schema that does not compile, a
    /// taken name) is skipped with a warning, so one bad MCP server cannot stop the rest.
    fn insert(
        &mut self,
        source: ToolSource,
        tool: Arc<dyn Tool>,
    ) -> Result<Option<RegistryWarning>, RegistryError> {
        let name = tool.spec().name().to_owned();
        let runtime = source == ToolSource::Runtime;
        let checked = if !valid_name(&name) {
            Err(RegistryError::InvalidName { name: name.clone() })
        } else if runtime && !self.reserved.contains(&name) {
            Err(RegistryError::NotReserved { name: name.clone() })
        } else if !runtime && self.reserved.contains(&name) {
            Err(RegistryError::ReservedName { name: name.clone() })
        } else {
            compile(tool, source.clone())
        };
        let entry = match checked {
            Ok(entry) if self.deferred.contains(&name) => {
                entry.exposed(crate::spec::Exposure::Deferred)
            }
            Ok(entry) => entry,
            Err(error) if source.is_trusted() => return Err(error),
            Err(error) => {
                let message = format!("tool `{name}` from {source} was skipped: {error}");
                return Ok(Some(skipped(name, source, None, message)));
            }
        };
        if let Some(existing) = self.tools.get(&name) {
            let kept = existing.source().clone();
            if kept.is_trusted() && source.is_trusted() {
                return Err(RegistryError::DuplicateBuiltin { name });
            }
            let may_override = kept == ToolSource::Builtin && self.overrides.contains(&name);
            if !may_override {
                let hint = if kept == ToolSource::Builtin {
                    " (configure an explicit override to replace it)"
                } else {
                    ""
                };
                let message = format!(
                    "tool `{name}` from {source} was skipped: the name is taken by {kept}{hint}"
                );
                return Ok(Some(skipped(name, source, Some(kept), message)));
            }
            tracing::info!(tool = %name, by = %source, "built-in tool overridden by configuration");
            self.displaced.insert(name.clone(), Arc::clone(existing));
        }
        self.tools.insert(name, Arc::new(entry));
        Ok(None)
    }
}

fn skipped(
    name: String,
    skipped: ToolSource,
    kept: Option<ToolSource>,
    message: String,
) -> RegistryWarning {
    tracing::warn!(tool = %name, skipped = %skipped, "{message}");
    RegistryWarning {
        name,
        skipped,
        kept,
        message,
    }
}

fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-')
}

fn compile(tool: Arc<dyn Tool>, source: ToolSource) -> Result<ToolEntry, RegistryError> {
    let spec = tool.spec();
    let schema_error = |which: &'static str, message: String| RegistryError::InvalidSchema {
        name: spec.name().to_owned(),
        which,
        message,
    };
    let input: Validator = jsonschema::validator_for(spec.input_schema())
        .map_err(|error| schema_error("input", error.to_string()))?;
    let output = spec
        .output_schema()
        .map(jsonschema::validator_for)
        .transpose()
        .map_err(|error| schema_error("output", error.to_string()))?;
    Ok(ToolEntry::new(tool, source, input, output))
}

/// The live registry. Tools may join and leave (MCP servers, loaded deferred tools); every
/// snapshot taken before a change keeps seeing the tools it had.
#[derive(Clone)]
pub struct Registry {
    inner: Arc<RwLock<Shared>>,
}

struct Shared {
    state: RegistryState,
    snapshot: ToolSet,
}

impl Registry {
    fn from_state(state: RegistryState) -> Self {
        let snapshot = snapshot_of(&state);
        Self {
            inner: Arc::new(RwLock::new(Shared { state, snapshot })),
        }
    }

    /// A registry with no tools.
    pub fn empty() -> Self {
        Self::from_state(RegistryState::default())
    }

    /// The immutable tool set for the next model request.
    pub fn snapshot(&self) -> ToolSet {
        self.inner.read().snapshot.clone()
    }

    /// Registers a tool from a non-built-in source at run time (an MCP server joined). The
    /// same rules as at build time apply; it is visible from the next snapshot.
    pub fn register_external(
        &self,
        source: ToolSource,
        tool: Arc<dyn Tool>,
    ) -> Result<Option<RegistryWarning>, RegistryError> {
        let mut warnings = self.register_externals(&source, [tool])?;
        Ok(warnings.pop().flatten())
    }

    /// Registers many tools of one non-built-in source in one change: the same rules as
    /// [`register_external`](Self::register_external), one tool at a time in order, but the
    /// registry is copied and its snapshot rebuilt once, not once per tool. Returns each
    /// tool's warning (`None` when it joined), in order; nothing joins if a rule is broken
    /// in a way that is an error.
    pub fn register_externals(
        &self,
        source: &ToolSource,
        tools: impl IntoIterator<Item = Arc<dyn Tool>>,
    ) -> Result<Vec<Option<RegistryWarning>>, RegistryError> {
        refuse_trusted(source)?;
        self.mutate(|state| {
            tools
                .into_iter()
                .map(|tool| state.insert(source.clone(), tool))
                .collect()
        })
    }

    /// Installs one of the runtime's own tools after the registry was built (a tool that
    /// needs the registry itself, like `tool_search`). Visible from the next snapshot.
    pub fn install_runtime_tool(&self, tool: Arc<dyn Tool>) -> Result<(), RegistryError> {
        self.mutate(|state| state.insert(ToolSource::Runtime, tool))
            .map(drop)
    }

    /// Removes every tool of a source (an MCP server left); returns their names. A built-in
    /// that one of them had overridden comes back.
    pub fn remove_source(&self, source: &ToolSource) -> Vec<String> {
        let removed = self.mutate(|state| {
            let names = state.withdraw(source);
            Ok::<_, RegistryError>(names)
        });
        removed.unwrap_or_default()
    }

    /// Replaces every tool of a source in one change (an MCP server's list changed): no
    /// snapshot ever sees some of its tools, or none, in between. `make` gets the names the
    /// other sources hold and returns the source's new tools, named around them. Returns
    /// the names registered and the tools skipped.
    pub fn replace_source(
        &self,
        source: &ToolSource,
        make: impl FnOnce(&BTreeSet<String>) -> Vec<Arc<dyn Tool>>,
    ) -> Result<(Vec<String>, Vec<RegistryWarning>), RegistryError> {
        refuse_trusted(source)?;
        self.mutate(|state| {
            state.withdraw(source);
            let taken: BTreeSet<String> = state.tools.keys().cloned().collect();
            let mut registered = Vec::new();
            let mut skipped = Vec::new();
            for tool in make(&taken) {
                let name = tool.spec().name().to_owned();
                match state.insert(source.clone(), tool)? {
                    Some(warning) => skipped.push(warning),
                    None => registered.push(name),
                }
            }
            Ok((registered, skipped))
        })
    }

    /// Makes deferred tools visible from the next snapshot; returns the names that were
    /// deferred and are now loaded (unknown or non-deferred names are ignored).
    pub fn load_deferred(&self, names: &[&str]) -> Vec<String> {
        let loaded = self.mutate(|state| {
            let mut loaded = Vec::new();
            for name in names {
                let deferred = state.tools.get(*name).is_some_and(|entry| {
                    entry.spec().exposure() == crate::spec::Exposure::Deferred
                });
                if deferred && state.loaded.insert((*name).to_owned()) {
                    loaded.push((*name).to_owned());
                }
            }
            Ok::<_, RegistryError>(loaded)
        });
        loaded.unwrap_or_default()
    }

    /// Every deferred tool that is not loaded yet (what `tool_search` searches).
    pub fn deferred_catalog(&self) -> Vec<Arc<ToolEntry>> {
        let shared = self.inner.read();
        shared
            .state
            .tools
            .values()
            .filter(|entry| {
                entry.spec().exposure() == crate::spec::Exposure::Deferred
                    && !shared.state.loaded.contains(entry.name())
            })
            .cloned()
            .collect()
    }

    /// Starts a child scope of this registry.
    pub fn scope(&self) -> ScopeBuilder {
        ScopeBuilder::new(Arc::new(self.clone()))
    }

    fn mutate<T, E>(
        &self,
        change: impl FnOnce(&mut RegistryState) -> Result<T, E>,
    ) -> Result<T, E> {
        let mut shared = self.inner.write();
        let mut next = shared.state.clone();
        let outcome = change(&mut next)?;
        shared.snapshot = snapshot_of(&next);
        shared.state = next;
        Ok(outcome)
    }
}

/// Trusted tools (built-in, the runtime's) join only through [`RegistryBuilder`].
fn refuse_trusted(source: &ToolSource) -> Result<(), RegistryError> {
    if source.is_trusted() {
        return Err(RegistryError::Scope {
            message: format!(
                "tools from {source} are installed through RegistryBuilder, not at run time"
            ),
        });
    }
    Ok(())
}

fn snapshot_of(state: &RegistryState) -> ToolSet {
    ToolSet::from_entries(state.tools.values(), |name| state.loaded.contains(name))
}

/// Anything a scope can inherit from.
pub trait SnapshotSource: Send + Sync {
    /// The current tool set, and the hidden tools, as entries.
    fn entries(&self) -> Vec<Arc<ToolEntry>>;
    /// Whether a deferred tool is loaded.
    fn is_loaded(&self, name: &str) -> bool;
    /// Whether `name` is kept for a tool of the runtime's own, which no scope may take.
    fn is_reserved(&self, name: &str) -> bool;
}

impl SnapshotSource for Registry {
    fn entries(&self) -> Vec<Arc<ToolEntry>> {
        self.inner.read().state.tools.values().cloned().collect()
    }

    fn is_loaded(&self, name: &str) -> bool {
        self.inner.read().state.loaded.contains(name)
    }

    fn is_reserved(&self, name: &str) -> bool {
        self.inner.read().state.reserved.contains(name)
    }
}
