//! What `ProtectedPaths` keeps out of reach stays out of reach through every file tool:
//! every `.git` (nested too) cannot be written or edited unless the embedder allows it;
//! hidden paths (credentials under a home folder, deny-read globs such as `**/.env`) cannot
//! be read, and `grep` and `glob` see nothing of them — named directly, through a folder or
//! through a symlink — until they are shown again.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::wildcard_enum_match_arm
)]

mod support;

use std::path::Path;

use serde_json::json;
use support::{Bench, bench_with, code, text};
use toolrail_tools_core::ProtectedPaths;

const CONFIG: &str = "[core]\n\tbare = false\n";

fn plant_repositories(b: &Bench) {
    b.write(".git/config", CONFIG);
    b.write(".git/hooks/README", "hooks\n");
    b.write("sub/.git/config", CONFIG);
    std::os::unix::fs::symlink(".git", b.path("gitlink")).unwrap();
}

/// Every way into a `.git` a model could try: edit the config (a `core.fsmonitor` runs on
/// the next `git status`), plant a hook, the same in a nested repository, through a symlink.
async fn git_changes(b: &Bench) -> Vec<(String, Option<String>, String)> {
    for path in [".git/config", "sub/.git/config"] {
        let read = b.call("read", json!({"path": path})).await;
        assert!(
            !read.record().is_error(),
            "reading .git is allowed: {}",
            text(&read)
        );
    }
    let mut outcomes = Vec::new();
    for (tool, args) in [
        (
            "edit",
            json!({"path": ".git/config", "edits": [{"old": "bare = false", "new": "bare = false\n\tfsmonitor = ./x"}]}),
        ),
        (
            "write",
            json!({"path": ".git/hooks/pre-commit", "content": "#!/bin/sh\nexit 0\n"}),
        ),
        (
            "edit",
            json!({"path": "sub/.git/config", "edits": [{"old": "bare = false", "new": "bare = true"}]}),
        ),
        (
            "write",
            json!({"path": "sub/.git/config", "content": "[core]\n\tfsmonitor = ./x\n"}),
        ),
        (
            "write",
            json!({"path": "gitlink/hooks/post-checkout", "content": "#!/bin/sh\n"}),
        ),
    ] {
        let result = b.call(tool, args.clone()).await;
        outcomes.push((
            format!("{tool} {}", args["path"].as_str().unwrap()),
            code(&result),
            text(&result),
        ));
    }
    outcomes
}

#[tokio::test]
async fn every_git_folder_is_refused_to_write_and_edit() {
    let b = bench_with(|_, files| files);
    plant_repositories(&b);
    for (what, code, text) in git_changes(&b).await {
        assert_eq!(code.as_deref(), Some("FS_PROTECTED"), "{what}: {text}");
        assert!(
            text.contains("inside a `.git` folder") && text.contains("nothing was written"),
            "{what}: {text}"
        );
    }
    assert_eq!(String::from_utf8(b.read(".git/config")).unwrap(), CONFIG);
    assert_eq!(
        String::from_utf8(b.read("sub/.git/config")).unwrap(),
        CONFIG
    );
    assert!(!b.path(".git/hooks/pre-commit").exists());
    assert!(!b.path(".git/hooks/post-checkout").exists());
}

#[tokio::test]
async fn an_embedder_can_allow_git_writes() {
    let b = bench_with(|_, files| files.with_protected(ProtectedPaths::none().allow_git_writes()));
    plant_repositories(&b);
    for (what, code, text) in git_changes(&b).await {
        assert_eq!(code, None, "{what}: {text}");
    }
    assert!(b.path(".git/hooks/pre-commit").exists());
    assert!(b.path(".git/hooks/post-checkout").exists());
}

const KEY: &str = "-----BEGIN OPENSSH PRIVATE KEY-----\nsecret-key-material\n";
const CREDENTIALS: &str = "[default]\naws_secret_access_key = secret-key-material\n";

/// A home folder inside the workspace holding an SSH key and AWS credentials, hidden by
/// `ProtectedPaths::for_home` (then `adjust`ed), a symlink to the key, and a plain file.
fn home_bench(adjust: impl FnOnce(ProtectedPaths, &Path) -> ProtectedPaths) -> Bench {
    bench_with(|root, files| {
        let home = root.join("home");
        std::fs::create_dir_all(home.join(".ssh")).unwrap();
        std::fs::create_dir_all(home.join(".aws")).unwrap();
        std::fs::write(home.join(".ssh/id_ed25519"), KEY).unwrap();
        std::fs::write(home.join(".aws/credentials"), CREDENTIALS).unwrap();
        std::fs::write(
            home.join("notes.txt"),
            "no secret-key-material here? yes: secret-key-material\n",
        )
        .unwrap();
        std::os::unix::fs::symlink(home.join(".ssh/id_ed25519"), root.join("key")).unwrap();
        files.with_protected(adjust(ProtectedPaths::for_home(&home), &home))
    })
}

#[tokio::test]
async fn credentials_under_a_hidden_home_are_out_of_reach() {
    let b = home_bench(|protected, _| protected);
    let absolute = b.path("home/.ssh/id_ed25519").display().to_string();
    for path in [
        "home/.ssh/id_ed25519",
        "home/.aws/credentials",
        "key",
        absolute.as_str(),
    ] {
        let read = b.call("read", json!({"path": path})).await;
        assert_eq!(
            code(&read).as_deref(),
            Some("FS_PROTECTED"),
            "{path}: {}",
            text(&read)
        );
        assert!(
            text(&read).contains("is hidden from tools"),
            "{}",
            text(&read)
        );
        assert!(!text(&read).contains("secret-key-material"));
    }
    let planted = b
        .call(
            "write",
            json!({"path": "home/.ssh/authorized_keys", "content": "ssh-ed25519 AAAA\n"}),
        )
        .await;
    assert_eq!(code(&planted).as_deref(), Some("FS_PROTECTED"));
    assert!(!b.path("home/.ssh/authorized_keys").exists());

    // Searching everything finds only the plain file, and says hidden paths were left out.
    let everything = b
        .call("grep", json!({"pattern": "secret-key-material"}))
        .await;
    assert_eq!(
        text(&everything),
        "home/notes.txt\n     1: no secret-key-material here? yes: secret-key-material\n[2 paths hidden from tools left out]"
    );
    assert_eq!(everything.record().value.as_ref().unwrap()["hidden"], 2);
    for path in [
        "home/.ssh",
        "home/.aws/credentials",
        "key",
        absolute.as_str(),
    ] {
        let named = b
            .call("grep", json!({"pattern": "secret", "path": path}))
            .await;
        assert_eq!(code(&named), None, "{}", text(&named));
        assert!(
            !text(&named).contains("secret-key-material"),
            "{path}: {}",
            text(&named)
        );
        assert!(
            text(&named).contains("[1 path hidden from tools left out]"),
            "{}",
            text(&named)
        );
    }
    let listed = b.call("glob", json!({"pattern": "**/*"})).await;
    let paths = listed.record().value.as_ref().unwrap()["paths"].clone();
    assert!(
        paths.as_array().unwrap().iter().all(|path| {
            let path = path.as_str().unwrap();
            !path.contains(".ssh") && !path.contains(".aws")
        }),
        "{paths}"
    );
    let inside = b
        .call("glob", json!({"pattern": "*", "path": "home/.ssh"}))
        .await;
    assert_eq!(inside.record().value.as_ref().unwrap()["paths"], json!([]));
}

#[tokio::test]
async fn credentials_shown_again_can_be_read_and_searched() {
    let b = home_bench(|protected, home| {
        protected
            .unhide(home.join(".ssh"))
            .unhide(home.join(".aws"))
    });
    for path in ["home/.ssh/id_ed25519", "key"] {
        let read = b.call("read", json!({"path": path})).await;
        assert_eq!(code(&read), None, "{}", text(&read));
        assert!(text(&read).contains("secret-key-material"));
    }
    let everything = b
        .call(
            "grep",
            json!({"pattern": "secret-key-material", "output": "files"}),
        )
        .await;
    assert_eq!(
        text(&everything),
        "home/.aws/credentials\nhome/.ssh/id_ed25519\nhome/notes.txt"
    );
    let listed = b.call("glob", json!({"pattern": "home/.*/*"})).await;
    let mut paths: Vec<String> = listed.record().value.as_ref().unwrap()["paths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|path| path.as_str().unwrap().to_owned())
        .collect();
    paths.sort();
    assert_eq!(paths, ["home/.aws/credentials", "home/.ssh/id_ed25519"]);
}

#[tokio::test]
async fn a_deny_read_glob_hides_dot_env_from_every_tool() {
    let b = bench_with(|root, files| {
        std::fs::write(root.join(".env"), "API_TOKEN=hunter2\n").unwrap();
        std::fs::create_dir_all(root.join("app")).unwrap();
        std::fs::write(root.join("app/.env"), "API_TOKEN=hunter3\n").unwrap();
        std::fs::write(root.join(".env.example"), "API_TOKEN=changeme\n").unwrap();
        std::os::unix::fs::symlink(".env", root.join("envlink")).unwrap();
        files.with_protected(ProtectedPaths::none().hide_matching("**/.env").unwrap())
    });
    for path in [".env", "app/.env", "envlink"] {
        let read = b.call("read", json!({"path": path})).await;
        assert_eq!(
            code(&read).as_deref(),
            Some("FS_PROTECTED"),
            "{path}: {}",
            text(&read)
        );
        assert!(
            text(&read).contains("by a deny rule for reading"),
            "{}",
            text(&read)
        );
        let direct = b
            .call("grep", json!({"pattern": "API_TOKEN", "path": path}))
            .await;
        assert!(
            !text(&direct).contains("hunter"),
            "{path}: {}",
            text(&direct)
        );
        assert!(
            text(&direct).starts_with("No matches"),
            "{path}: {}",
            text(&direct)
        );
    }
    let folder = b
        .call("grep", json!({"pattern": "API_TOKEN", "path": "."}))
        .await;
    assert_eq!(
        text(&folder),
        ".env.example\n     1: API_TOKEN=changeme\n[2 paths hidden from tools left out]"
    );
    let listed = b.call("glob", json!({"pattern": "**/.env*"})).await;
    assert_eq!(
        listed.record().value.as_ref().unwrap()["paths"],
        json!([".env.example"])
    );
    assert!(
        text(&listed).ends_with("[2 paths hidden from tools left out]"),
        "{}",
        text(&listed)
    );
    let overwrite = b
        .call(
            "write",
            json!({"path": ".env", "content": "API_TOKEN=mine\n"}),
        )
        .await;
    assert_eq!(code(&overwrite).as_deref(), Some("FS_PROTECTED"));
    assert_eq!(b.read(".env"), b"API_TOKEN=hunter2\n");
}
