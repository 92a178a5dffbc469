//! What a tool is, as data: its definition (DESIGN §4) and the concurrency facts the
//! scheduler reads.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use schemars::JsonSchema;
use serde_json::Value;

/// What a tool does, for presenters and permission presets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ToolKind {
    /// Reads files or other state without changing it.
    Read,
    /// Creates or changes files.
    Edit,
    /// Deletes things (an MCP tool its server calls destructive is of this kind).
    Delete,
    /// Moves or renames files.
    Move,
    /// Searches files or a catalog (`grep`, `glob`, `tool_search`).
    Search,
    /// Runs commands or programs (`bash`, `run_code`).
    Execute,
    /// Fetches from the network.
    Fetch,
    /// Changes nothing outside the conversation: plans, todo lists, questions to the user.
    Think,
    /// Anything else; the kind of a spec that names none.
    Other,
}

impl ToolKind {
    /// The kind's name as written in cards and configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Edit => "edit",
            Self::Delete => "delete",
            Self::Move => "move",
            Self::Search => "search",
            Self::Execute => "execute",
            Self::Fetch => "fetch",
            Self::Think => "think",
            Self::Other => "other",
        }
    }
}

/// How a tool is offered to the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Exposure {
    /// In every request's tool set.
    Direct,
    /// Known but not offered until loaded through `tool_search`; joins from the next request.
    Deferred,
    /// Never offered to the model nor callable by it; only the embedding program calls it.
    Hidden,
}

/// Whether a claim reads or writes its resource.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ClaimMode {
    /// Only reads the resource: read claims on one key may overlap.
    Read,
    /// Changes the resource: conflicts with every other claim on its key.
    Write,
}

/// A resource two calls may contend for.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ResourceKey {
    /// A canonical filesystem path.
    Path(PathBuf),
    /// A terminal (shell session) by name.
    Terminal(String),
    /// Anything else a tool wants to serialize on.
    Custom(String),
}

/// One resource a call touches, and how.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ResourceClaim {
    /// The resource; claims can conflict only on equal keys.
    pub key: ResourceKey,
    /// Whether the call reads or writes it.
    pub mode: ClaimMode,
}

impl ResourceClaim {
    /// A read claim on `key`.
    pub fn read(key: ResourceKey) -> Self {
        Self {
            key,
            mode: ClaimMode::Read,
        }
    }

    /// A write claim on `key`.
    pub fn write(key: ResourceKey) -> Self {
        Self {
            key,
            mode: ClaimMode::Write,
        }
    }

    /// Two claims conflict on the same key when at least one writes.
    pub fn conflicts_with(&self, other: &ResourceClaim) -> bool {
        self.key == other.key && (self.mode == ClaimMode::Write || other.mode == ClaimMode::Write)
    }
}

/// What may overlap with a call. Separate from `read_only`, which is what the user permits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Concurrency {
    /// Runs alone, after every earlier call committed.
    Exclusive,
    /// May run beside calls whose claims do not conflict with these.
    Shared(Vec<ResourceClaim>),
}

impl Concurrency {
    /// Shared with no claims: overlaps with anything that is not exclusive.
    pub fn shared() -> Self {
        Self::Shared(Vec::new())
    }

    /// Whether two calls may run at the same time.
    pub fn may_overlap(&self, other: &Concurrency) -> bool {
        match (self, other) {
            (Self::Shared(mine), Self::Shared(theirs)) => !mine
                .iter()
                .any(|claim| theirs.iter().any(|their| claim.conflicts_with(their))),
            (Self::Exclusive, _) | (_, Self::Exclusive) => false,
        }
    }
}

/// What a tool's subject is: the one argument permission rules match on (the command of a
/// shell tool, the path of a file tool).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubjectKind {
    /// A file path, relative to the workspace or absolute. Globs match it with `/` as a
    /// separator (`*` stays inside one folder, `**` crosses folders).
    Path,
    /// A command line. Globs match it as plain text (`*` matches anything, `/` included).
    Command,
    /// A URL, matched as plain text.
    Url,
    /// Anything else, matched as plain text.
    Text,
}

impl SubjectKind {
    /// Whether `*` in a glob over this subject stops at `/`.
    pub fn separates_on_slash(self) -> bool {
        match self {
            Self::Path => true,
            Self::Command | Self::Url | Self::Text => false,
        }
    }
}

/// The argument a tool declares as its subject.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubjectField {
    /// A top-level property of the arguments holding a string.
    pub field: String,
    /// How permission rules and guards match the field's text: as a path or as plain text.
    pub kind: SubjectKind,
}

/// The definition of a tool (DESIGN §4). Built with [`ToolSpec::builder`] or
/// [`ToolSpec::for_args`] and the chained setters; read through the getters.
///
/// # Example
///
/// ```
/// use std::time::Duration;
///
/// use serde_json::json;
/// use toolrail_tools_core::{ToolKind, ToolSpec, spec::SubjectKind};
///
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct FetchArgs {
///     /// The address to fetch.
///     url: String,
/// }
///
/// let spec = ToolSpec::for_args::<FetchArgs>("fetch", "Fetches a web page.")
///     .kind(ToolKind::Fetch)
///     .read_only()
///     .timeout(Duration::from_secs(30))
///     // What permission rules such as `allow fetch(https://docs.rs/*)` match.
///     .subject("url", SubjectKind::Url)
///     .build();
///
/// // The doc comment of a field becomes its description in the input schema.
/// let schema = spec.input_schema();
/// assert_eq!(schema["properties"]["url"]["description"], "The address to fetch.");
/// assert_eq!(schema["required"], json!(["url"]));
/// assert_eq!((spec.name(), spec.version()), ("fetch", "1"));
/// assert!(spec.is_read_only() && !spec.is_idempotent());
/// assert_eq!(spec.timeout(), Some(Duration::from_secs(30)));
/// assert_eq!(spec.subject().map(|subject| subject.kind), Some(SubjectKind::Url));
/// ```
#[derive(Clone, Debug)]
pub struct ToolSpec {
    name: String,
    description: String,
    input_schema: Value,
    output_schema: Option<Value>,
    kind: ToolKind,
    version: Arc<str>,
    read_only: bool,
    idempotent: bool,
    model_only: bool,
    default_timeout: Option<Duration>,
    exposure: Exposure,
    max_value_bytes: Option<usize>,
    max_content_text_bytes: Option<usize>,
    subject: Option<SubjectField>,
    always_ask: Option<String>,
    concurrency_note: Option<String>,
    /// What may overlap with any call of this tool, when that does not depend on its
    /// arguments (`None`: the tool decides, `Exclusive` unless it says otherwise).
    declared: Option<Concurrency>,
}

impl ToolSpec {
    /// A tool of kind `other`, version `1`, not read-only, not idempotent, no timeout,
    /// offered directly, with the given input schema: a builder, finished by
    /// [`ToolSpecBuilder::build`].
    pub fn builder(
        name: impl Into<String>,
        description: impl Into<String>,
        input_schema: Value,
    ) -> ToolSpecBuilder {
        ToolSpecBuilder {
            spec: Self {
                name: name.into(),
                description: description.into(),
                input_schema,
                output_schema: None,
                kind: ToolKind::Other,
                version: Arc::from("1"),
                read_only: false,
                idempotent: false,
                model_only: false,
                default_timeout: None,
                exposure: Exposure::Direct,
                max_value_bytes: None,
                max_content_text_bytes: None,
                subject: None,
                always_ask: None,
                concurrency_note: None,
                declared: None,
            },
        }
    }

    /// Like [`ToolSpec::builder`], with the input schema derived from the argument type:
    /// the doc comments of its fields become their descriptions. What describes the Rust
    /// type itself (its `$schema`, `title` and doc comment) is left out: the model reads the
    /// tool's own description, and every key of a schema is sent with every request.
    pub fn for_args<A: JsonSchema>(
        name: impl Into<String>,
        description: impl Into<String>,
    ) -> ToolSpecBuilder {
        let mut schema = schemars::schema_for!(A).to_value();
        if let Some(root) = schema.as_object_mut() {
            for key in ["$schema", "title", "description"] {
                root.remove(key);
            }
        }
        Self::builder(name, description, schema)
    }

    /// This spec as a builder again, to derive another from it.
    pub fn into_builder(self) -> ToolSpecBuilder {
        ToolSpecBuilder { spec: self }
    }

    /// The name the model calls it by.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What the model reads about it.
    pub fn description(&self) -> &str {
        &self.description
    }

    /// The JSON Schema its arguments must satisfy.
    pub fn input_schema(&self) -> &Value {
        &self.input_schema
    }

    /// The schema every successful value must satisfy, if any.
    pub fn output_schema(&self) -> Option<&Value> {
        self.output_schema.as_ref()
    }

    /// Its kind (what presets judge it by).
    pub fn kind(&self) -> ToolKind {
        self.kind
    }

    /// The version recorded with every call.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The version, shared (recorded with every call without copying).
    pub fn shared_version(&self) -> &Arc<str> {
        &self.version
    }

    /// It does not change the world.
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// Running a call twice has the effect of running it once.
    pub fn is_idempotent(&self) -> bool {
        self.idempotent
    }

    /// Only the model may call it: a code-mode program's call finds no such tool.
    pub fn is_model_only(&self) -> bool {
        self.model_only
    }

    /// The default deadline of a call, if any.
    pub fn timeout(&self) -> Option<Duration> {
        self.default_timeout
    }

    /// How it is offered (directly, or deferred behind `tool_search`).
    pub fn exposure(&self) -> Exposure {
        self.exposure
    }

    /// Its cap on a value's serialized size, if it set one.
    pub fn max_value_bytes(&self) -> Option<usize> {
        self.max_value_bytes
    }

    /// The tool's own cap on its results' model-facing text, if it lowered the pipeline's.
    pub fn max_content_text_bytes(&self) -> Option<usize> {
        self.max_content_text_bytes
    }

    /// What [`ToolSpecBuilder::concurrency_note`] said, or what a declaration says.
    pub fn concurrency_summary(&self) -> Option<&str> {
        self.concurrency_note.as_deref().or(match &self.declared {
            Some(Concurrency::Shared(claims)) if claims.is_empty() => Some("shared"),
            Some(Concurrency::Shared(_)) => Some("shared, with the claims it declares"),
            Some(Concurrency::Exclusive) | None => None,
        })
    }

    /// What [`ToolSpecBuilder::parallel_safe`] or [`ToolSpecBuilder::parallel_with`] declared, if
    /// anything.
    pub fn declared_concurrency(&self) -> Option<&Concurrency> {
        self.declared.as_ref()
    }

    /// Why every call asks, for a tool that always asks.
    pub fn always_ask(&self) -> Option<&str> {
        self.always_ask.as_deref()
    }

    /// The declared subject argument, if any.
    pub fn subject(&self) -> Option<&SubjectField> {
        self.subject.as_ref()
    }
}

/// A [`ToolSpec`] being made: [`ToolSpec::builder`] or [`ToolSpec::for_args`], the setters
/// below, then [`ToolSpecBuilder::build`] (or `.into()` where a `ToolSpec` is expected).
#[derive(Clone, Debug)]
#[must_use = "a spec builder does nothing until it is built"]
pub struct ToolSpecBuilder {
    spec: ToolSpec,
}

impl ToolSpecBuilder {
    /// Sets the kind.
    pub fn kind(mut self, kind: ToolKind) -> Self {
        self.spec.kind = kind;
        self
    }

    /// Sets the version recorded with every call.
    pub fn version(mut self, version: impl Into<String>) -> Self {
        self.spec.version = Arc::from(version.into());
        self
    }

    /// Marks the tool read-only: it does not change the world (what the user permits).
    pub fn read_only(mut self) -> Self {
        self.spec.read_only = true;
        self
    }

    /// Marks the tool idempotent: running it twice has the effect of running it once.
    pub fn idempotent(mut self) -> Self {
        self.spec.idempotent = true;
        self
    }

    /// Keeps the tool from code-mode programs: only the model may call it (code mode's
    /// own entry point, so a program cannot start another program).
    pub fn model_only(mut self) -> Self {
        self.spec.model_only = true;
        self
    }

    /// Sets the default deadline of a call.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.spec.default_timeout = Some(timeout);
        self
    }

    /// Sets how the tool is offered.
    pub fn exposure(mut self, exposure: Exposure) -> Self {
        self.spec.exposure = exposure;
        self
    }

    /// Sets the schema every successful value must satisfy.
    pub fn output_schema(mut self, schema: Value) -> Self {
        self.spec.output_schema = Some(schema);
        self
    }

    /// Caps the serialized size of the value (the pipeline's cap applies otherwise).
    pub fn max_value_bytes(mut self, bytes: usize) -> Self {
        self.spec.max_value_bytes = Some(bytes);
        self
    }

    /// Lowers the cap on the text this tool's results show the model (the pipeline's
    /// `max_content_text_bytes`; a larger value than the pipeline's changes nothing).
    pub fn max_content_text_bytes(mut self, bytes: usize) -> Self {
        self.spec.max_content_text_bytes = Some(bytes);
        self
    }

    /// Declares the string argument `field` as the tool's subject, which permission rules
    /// and guards match on (`bash(git status*)`, `write(src/**)`).
    pub fn subject(mut self, field: impl Into<String>, kind: SubjectKind) -> Self {
        self.spec.subject = Some(SubjectField {
            field: field.into(),
            kind,
        });
        self
    }

    /// Every call of this tool asks the approval service, whatever the hooks decide, and no
    /// session approval covers it (leaving plan mode is the person's decision each time).
    /// With no approval service the call does not run.
    pub fn always_ask(mut self, reason: impl Into<String>) -> Self {
        self.spec.always_ask = Some(reason.into());
        self
    }

    /// Says in words what `concurrency` decides for this tool's calls (`shared: a read claim
    /// on the path`), for tool lists and documentation; the scheduler never reads it.
    pub fn concurrency_note(mut self, note: impl Into<String>) -> Self {
        self.spec.concurrency_note = Some(note.into());
        self
    }

    /// Every call of this tool may run beside other calls that allow it, claiming nothing:
    /// the one builder call for a tool whose calls never conflict with anything (a pure
    /// computation, a lookup). Whether the user lets it run without asking is another
    /// fact: see [`ToolSpecBuilder::read_only`].
    ///
    /// A declaration is used for every call, whatever its arguments; a tool whose answer
    /// depends on them (a read claim on the path it was given) overrides
    /// [`Tool::concurrency`](crate::Tool::concurrency) or
    /// [`TypedTool::concurrency`](crate::TypedTool::concurrency) instead and declares nothing.
    ///
    /// ```
    /// use toolrail_tools_core::{Concurrency, ToolSpec};
    /// let spec = ToolSpec::builder("now", "The time.", serde_json::json!({"type": "object"}))
    ///     .parallel_safe()
    ///     .build();
    /// assert_eq!(spec.declared_concurrency(), Some(&Concurrency::shared()));
    /// assert!(!spec.is_read_only(), "what may overlap and what is permitted stay apart");
    /// ```
    pub fn parallel_safe(mut self) -> Self {
        self.spec.declared = Some(Concurrency::shared());
        self
    }

    /// Every call of this tool may run beside others whose claims do not conflict with
    /// these (a claim is a resource key, read or written): calls that write one database
    /// wait for each other, and run beside everything else.
    ///
    /// ```
    /// use toolrail_tools_core::{Concurrency, ResourceClaim, ResourceKey, ToolSpec};
    /// let db = ResourceClaim::write(ResourceKey::Custom("orders-db".into()));
    /// let spec = ToolSpec::builder("add_order", "Add an order.", serde_json::json!({"type": "object"}))
    ///     .parallel_with([db.clone()])
    ///     .build();
    /// assert_eq!(spec.declared_concurrency(), Some(&Concurrency::Shared(vec![db])));
    /// ```
    pub fn parallel_with(mut self, claims: impl IntoIterator<Item = ResourceClaim>) -> Self {
        self.spec.declared = Some(Concurrency::Shared(claims.into_iter().collect()));
        self
    }

    /// The finished spec.
    pub fn build(self) -> ToolSpec {
        self.spec
    }
}

impl From<ToolSpecBuilder> for ToolSpec {
    fn from(builder: ToolSpecBuilder) -> Self {
        builder.build()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The arguments of a tool (a doc the model must not be sent).
    #[derive(schemars::JsonSchema)]
    #[allow(dead_code)]
    struct Args {
        /// Where to look.
        path: String,
    }

    #[test]
    fn a_derived_schema_keeps_the_fields_docs_and_drops_the_type_s() {
        let spec = ToolSpec::for_args::<Args>("look", "Looks.").build();
        let schema = spec.input_schema();
        assert_eq!(
            schema["properties"]["path"]["description"],
            "Where to look."
        );
        for key in ["$schema", "title", "description"] {
            assert!(schema.get(key).is_none(), "{key}: {schema}");
        }
    }

    fn path(p: &str) -> ResourceKey {
        ResourceKey::Path(PathBuf::from(p))
    }

    #[test]
    fn claims_conflict_only_on_the_same_key_with_a_writer() {
        let read_a = Concurrency::Shared(vec![ResourceClaim::read(path("/a"))]);
        let read_a2 = Concurrency::Shared(vec![ResourceClaim::read(path("/a"))]);
        let write_a = Concurrency::Shared(vec![ResourceClaim::write(path("/a"))]);
        let write_b = Concurrency::Shared(vec![ResourceClaim::write(path("/b"))]);
        assert!(read_a.may_overlap(&read_a2));
        assert!(!read_a.may_overlap(&write_a));
        assert!(!write_a.may_overlap(&read_a));
        assert!(write_a.may_overlap(&write_b));
        assert!(!Concurrency::Exclusive.may_overlap(&Concurrency::shared()));
        assert!(!Concurrency::shared().may_overlap(&Concurrency::Exclusive));
    }
}
