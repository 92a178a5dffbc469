//! `toolrail demo`: the main job with nothing to set up. A bundled sample project (a small
//! Python calculator with a bug) is copied into a fresh workspace and a bundled scenario
//! runs on the scripted model with the real tools: a plan with `todo_write`; `glob`, `grep`
//! and two `read`s in parallel; an `edit` that asks and is approved; the project's tests
//! through sandboxed `bash`; a `curl` a rule denies. Each card prints as its call commits;
//! then the summary and the paths of the log and the page.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::Result;
use toolrail_runtime::scenario::{RunOptions, Scenario};

use crate::run::{execute_scenario, expectations_met};
use crate::session::{summary_of, write_page};
use crate::{absolute_dir, bad_input, runs_dir};

#[derive(clap::Args)]
pub(crate) struct DemoArgs {
    /// Where the session goes (default: a new folder under ~/.local/state/toolrail/runs).
    #[arg(long)]
    session_dir: Option<PathBuf>,
}

const SCENARIO: &str = include_str!("../demo/scenario.json");

/// The sample project, file by file.
const PROJECT: [(&str, &str); 3] = [
    ("README.md", include_str!("../demo/project/README.md")),
    ("calc.py", include_str!("../demo/project/calc.py")),
    ("test_calc.py", include_str!("../demo/project/test_calc.py")),
];

pub(crate) fn run(args: DemoArgs) -> Result<()> {
    let scenario =
        Scenario::from_json(SCENARIO).map_err(|error| bad_input!("the bundled demo: {error}"))?;
    let session_dir = match args.session_dir {
        Some(dir) => absolute_dir("--session-dir", &dir)?,
        None => runs_dir("demo")?,
    };
    let extra_files: BTreeMap<String, String> = PROJECT
        .iter()
        .map(|(path, text)| ((*path).to_owned(), (*text).to_owned()))
        .collect();
    println!(
        "toolrail demo: a scripted model fixes a bug in a small Python project, with the real\n\
         file tools, sandboxed bash, permission rules and a scripted approver.\n\
         workspace: {}\n",
        session_dir.join("workspace").display()
    );
    let options = RunOptions {
        extra_files,
        ..RunOptions::default()
    };
    let finished = execute_scenario(&scenario, &session_dir, false, options)?;
    let page = session_dir.join("session.html");
    write_page(&page, "toolrail demo", &finished.events)?;
    println!("\n{}", summary_of(&finished.events).line());
    println!("log:  {}", finished.log.display());
    println!("page: {}", page.display());
    println!("replay it with: toolrail replay {}", finished.log.display());
    expectations_met(&finished.mismatches)
}
