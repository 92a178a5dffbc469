//! Every tool refuses paths that lead outside the workspace, touching nothing; glob and grep
//! honour .gitignore, skip binaries, cap their output and report invalid patterns.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::wildcard_enum_match_arm
)]

mod support;

use serde_json::json;
use support::{bench, code, text};

#[tokio::test]
async fn paths_outside_the_workspace_are_refused_and_nothing_is_touched() {
    let b = bench();
    std::os::unix::fs::symlink(b.outside.join("secret.txt"), b.path("link.txt")).unwrap();
    std::os::unix::fs::symlink(&b.outside, b.path("src/elsewhere")).unwrap();
    let secret = b.outside.join("secret.txt").display().to_string();
    let escapes = [
        "../outside/secret.txt",
        "src/../../outside/secret.txt",
        secret.as_str(),
        "link.txt",
        "src/elsewhere/secret.txt",
        "src/elsewhere/new.txt",
        "missing/../src/elsewhere/secret.txt",
        "src/missing/../elsewhere/new.txt",
    ];
    for path in escapes {
        for (tool, args) in [
            ("read", json!({"path": path})),
            ("write", json!({"path": path, "content": "pwned\n"})),
            (
                "edit",
                json!({"path": path, "edits": [{"old": "secret", "new": "pwned"}]}),
            ),
            ("glob", json!({"pattern": "*", "path": path})),
            ("grep", json!({"pattern": "secret", "path": path})),
        ] {
            let result = b.call(tool, args).await;
            assert_eq!(
                code(&result).as_deref(),
                Some("FS_OUTSIDE_WORKSPACE"),
                "{tool} {path}: {}",
                text(&result)
            );
            assert!(text(&result).contains("nothing was touched"));
        }
    }
    assert_eq!(
        std::fs::read_to_string(b.outside.join("secret.txt")).unwrap(),
        "secret\n"
    );
    assert!(!b.outside.join("new.txt").exists());
}

#[tokio::test]
async fn glob_honours_gitignore_and_lists_newest_first_with_a_cap() {
    let b = bench();
    b.write(".gitignore", "target/\n*.log\n");
    b.write("src/a.rs", "a");
    b.write("src/nested/b.rs", "b");
    b.write("target/debug/c.rs", "ignored");
    b.write("debug.log", "ignored");
    b.write(".env", "KEY=1");
    // b.rs is the newest, a.rs an hour older.
    let now = std::time::SystemTime::now();
    let touch = |path: &str, at: std::time::SystemTime| {
        std::fs::File::options()
            .write(true)
            .open(b.path(path))
            .unwrap()
            .set_modified(at)
            .unwrap();
    };
    touch("src/nested/b.rs", now);
    touch("src/a.rs", now - std::time::Duration::from_secs(3600));

    let deep = b.call("glob", json!({"pattern": "**/*.rs"})).await;
    assert_eq!(text(&deep), "src/nested/b.rs\nsrc/a.rs");
    let top = b
        .call("glob", json!({"pattern": "*.rs", "path": "src"}))
        .await;
    assert_eq!(text(&top), "src/a.rs");
    let hidden = b.call("glob", json!({"pattern": ".env"})).await;
    assert_eq!(text(&hidden), ".env");
    let none = b.call("glob", json!({"pattern": "*.py"})).await;
    assert!(text(&none).starts_with("No files under `.` match `*.py`"));

    for n in 0..205 {
        b.write(&format!("many/f{n:03}.txt"), "x");
    }
    let capped = b.call("glob", json!({"pattern": "many/*.txt"})).await;
    assert_eq!(capped.record().value.as_ref().unwrap()["omitted"], 5);
    assert!(text(&capped).ends_with("[5 more files match; narrow the pattern]"));
    let bad = b.call("glob", json!({"pattern": "src/[a"})).await;
    assert_eq!(code(&bad).as_deref(), Some("INVALID_ARGS"));
}

#[tokio::test]
async fn grep_finds_groups_counts_and_skips_what_it_should() {
    let b = bench();
    b.write(".gitignore", "ignored/\n");
    b.write("src/a.rs", "fn alpha() {}\nlet x = 1;\nfn beta() {}\n");
    b.write("src/b.rs", "// nothing here\nFN GAMMA\n");
    b.write("ignored/c.rs", "fn hidden() {}\n");
    b.write("blob.bin", b"fn in\0binary\n");

    let content = b.call("grep", json!({"pattern": "fn \\w+"})).await;
    assert_eq!(
        text(&content),
        "src/a.rs\n     1: fn alpha() {}\n     3: fn beta() {}"
    );
    let value = content.record().value.as_ref().unwrap();
    assert_eq!(
        (value["files"].clone(), value["matches"].clone()),
        (json!(1), json!(2))
    );
    assert_eq!(
        serde_json::to_value(content.record().details.as_ref().unwrap()).unwrap()["type"],
        "search"
    );

    let context = b
        .call(
            "grep",
            json!({"pattern": "let", "context": 1, "path": "src"}),
        )
        .await;
    assert_eq!(
        text(&context),
        "src/a.rs\n     1- fn alpha() {}\n     2: let x = 1;\n     3- fn beta() {}"
    );
    let insensitive = b
        .call(
            "grep",
            json!({"pattern": "fn \\w+", "case_insensitive": true, "output": "count"}),
        )
        .await;
    assert_eq!(text(&insensitive), "src/a.rs: 2\nsrc/b.rs: 1");
    let files = b
        .call("grep", json!({"pattern": "fn", "output": "files", "glob": "**/b.rs", "case_insensitive": true}))
        .await;
    assert_eq!(text(&files), "src/b.rs");
    let one_file = b
        .call("grep", json!({"pattern": "beta", "path": "src/a.rs"}))
        .await;
    assert_eq!(text(&one_file), "src/a.rs\n     3: fn beta() {}");
    let nothing = b.call("grep", json!({"pattern": "zeta"})).await;
    assert!(text(&nothing).starts_with("No matches for `zeta`"));
}

#[tokio::test]
async fn grep_caps_its_output_and_refuses_bad_patterns_with_the_position() {
    let b = bench();
    for n in 0..30 {
        let lines: String = (0..10).map(|line| format!("hit {n} {line}\n")).collect();
        b.write(&format!("f{n:02}.txt"), lines);
    }
    let capped = b.call("grep", json!({"pattern": "hit"})).await;
    let value = capped.record().value.as_ref().unwrap();
    assert_eq!(value["matches"], 300);
    assert_eq!(value["omitted_matches"], 100);
    assert_eq!(value["omitted_files"], 10);
    assert!(
        text(&capped)
            .ends_with("[100 more matching lines in 10 more files not shown; narrow the search]")
    );

    let bad = b.call("grep", json!({"pattern": "fn (unclosed"})).await;
    assert_eq!(code(&bad).as_deref(), Some("INVALID_ARGS"));
    let message = text(&bad);
    assert!(
        message.contains(
            "/pattern: not a valid regular expression: unclosed group at character 4 (`(`)"
        ),
        "the error names what and where: {message}"
    );
}

/// A name that is not UTF-8 is listed and searched (shown with U+FFFD), with a note that
/// it cannot be opened by that name; opening it by that name says why it failed.
#[tokio::test]
async fn names_that_are_not_utf8_are_shown_lossily_and_said_to_be() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let b = bench();
    b.write("src/good.rs", "fn alpha() {}\n");
    let bad_file = b.path("src").join(OsStr::from_bytes(b"bad\xff.rs"));
    std::fs::write(&bad_file, "fn zed() {}\n").unwrap();
    let bad_dir = b.path("").join(OsStr::from_bytes(b"d\xfe"));
    std::fs::create_dir(&bad_dir).unwrap();
    std::fs::write(bad_dir.join("x.rs"), "fn zed() {}\n").unwrap();
    let note = "a `\u{fffd}` in a name may stand for bytes that are not UTF-8";

    let listed = b.call("glob", json!({"pattern": "**/*.rs"})).await;
    assert_eq!(code(&listed), None);
    let paths = &listed.record().value.as_ref().unwrap()["paths"];
    let mut paths: Vec<&str> = paths
        .as_array()
        .unwrap()
        .iter()
        .map(|path| path.as_str().unwrap())
        .collect();
    paths.sort_unstable();
    assert_eq!(
        paths,
        ["d\u{fffd}/x.rs", "src/bad\u{fffd}.rs", "src/good.rs"]
    );
    assert!(text(&listed).contains(note), "{}", text(&listed));

    let found = b.call("grep", json!({"pattern": "zed"})).await;
    assert!(
        text(&found).contains("src/bad\u{fffd}.rs\n     1: fn zed() {}"),
        "{}",
        text(&found)
    );
    assert!(text(&found).contains(note), "{}", text(&found));
    let plain = b.call("grep", json!({"pattern": "alpha"})).await;
    assert!(!text(&plain).contains(note), "no note without such a name");

    let opened = b.call("read", json!({"path": "src/bad\u{fffd}.rs"})).await;
    assert_eq!(code(&opened).as_deref(), Some("FS_NOT_FOUND"));
    assert!(text(&opened).contains(note), "{}", text(&opened));
    assert_eq!(
        std::fs::read(&bad_file).unwrap(),
        b"fn zed() {}\n",
        "the file is untouched"
    );
}
