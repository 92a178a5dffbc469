//! A workspace on disk beside a folder outside it, the file tools over it, and a pipeline
//! that runs their calls into a memory log.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::Value;
use toolrail_fs_tools::FileTools;
use toolrail_tools_core::log::{ErrorCode, Event, MemorySink};
use toolrail_tools_core::{
    CallRequest, CommittedResult, Pipeline, PipelineConfig, RegistryBuilder, ToolSet,
    WorkspaceRoots, pipeline::BatchControl,
};

pub(crate) struct Bench {
    _dir: tempfile::TempDir,
    pub root: PathBuf,
    pub outside: PathBuf,
    pub files: FileTools,
    pub tools: ToolSet,
    pub sink: Arc<MemorySink>,
    pub pipeline: Pipeline,
    next_id: AtomicU64,
}

pub(crate) fn bench() -> Bench {
    bench_with(|_, files| files)
}

/// A bench whose file tools `configure` shapes, given the workspace root (canonical, and
/// existing: files the configuration names can be planted first) and the plain tools.
pub(crate) fn bench_with(configure: impl FnOnce(&Path, FileTools) -> FileTools) -> Bench {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("workspace");
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(root.join("src")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), "secret\n").unwrap();
    let roots = WorkspaceRoots::new([&root]).unwrap();
    let real_root = roots.as_slice()[0].clone();
    let files = configure(&real_root, FileTools::new(roots));
    with_files(dir, root, outside, files)
}

pub(crate) fn with_files(
    dir: tempfile::TempDir,
    root: PathBuf,
    outside: PathBuf,
    files: FileTools,
) -> Bench {
    let mut builder = RegistryBuilder::new();
    for tool in files.tools() {
        builder = builder.external(toolrail_tools_core::log::ToolSource::Builtin, tool);
    }
    let (registry, _) = builder.build().unwrap();
    let sink = Arc::new(MemorySink::new());
    let pipeline = Pipeline::builder(sink.clone())
        .config(PipelineConfig {
            workspace: Some(Arc::from(root.as_path())),
            ..PipelineConfig::default()
        })
        .build();
    let root = std::fs::canonicalize(&root).unwrap();
    Bench {
        _dir: dir,
        root,
        outside,
        files,
        tools: registry.snapshot(),
        sink,
        pipeline,
        next_id: AtomicU64::new(0),
    }
}

impl Bench {
    pub(crate) async fn call(&self, tool: &str, args: Value) -> CommittedResult {
        let id = format!("c{}", self.next_id.fetch_add(1, Ordering::Relaxed));
        self.pipeline
            .execute_one(
                &self.tools,
                CallRequest::new(id, 0, tool, args.to_string()),
                &BatchControl::default(),
            )
            .await
            .unwrap()
    }

    pub(crate) fn write(&self, relative: &str, content: impl AsRef<[u8]>) {
        let path = self.root.join(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }

    pub(crate) fn read(&self, relative: &str) -> Vec<u8> {
        std::fs::read(self.root.join(relative)).unwrap()
    }

    pub(crate) fn events(&self) -> Vec<Event> {
        self.sink.events()
    }

    pub(crate) fn path(&self, relative: &str) -> PathBuf {
        self.root.join(relative)
    }
}

pub(crate) fn text(result: &CommittedResult) -> String {
    result.record().text()
}

pub(crate) fn code(result: &CommittedResult) -> Option<String> {
    result.record().error_code().map(ErrorCode::to_string)
}
