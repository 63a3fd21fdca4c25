//! docs/architecture.md's module table against the code: every module of the crate has a
//! row, and each row's "may import" column names exactly the modules the module's code
//! (tests aside) reaches with `crate::…` — no arrow the code does not have, none missing.
//!
//! The table is the map a newcomer reads before a change; it drifted twice while nobody
//! checked it, which is why it is checked here and not by review.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// A row's module names (first column) and what it may import (third column).
struct Row {
    modules: Vec<String>,
    /// `None` when the row says "everything" (the top of the picture: `app`, `cli`).
    may_import: Option<BTreeSet<String>>,
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The crate's modules as `src/lib.rs` declares them, plus `main` and `bin` (the binaries,
/// which reach the library as `phasescope::…`).
fn declared_modules() -> BTreeSet<String> {
    let lib = fs::read_to_string(root().join("src/lib.rs")).unwrap();
    let mut modules: BTreeSet<String> = lib
        .lines()
        .filter_map(|line| {
            let line = line.trim();
            let rest = line
                .strip_prefix("pub mod ")
                .or_else(|| line.strip_prefix("mod "))?;
            Some(rest.trim_end_matches(';').trim().to_string())
        })
        .collect();
    modules.insert("main".into());
    modules.insert("bin".into());
    modules
}

/// Names written in backticks in `cell`, each cut to its first path segment.
fn backticked(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(|name| name.split("::").next().unwrap_or(name).to_string())
        .collect()
}

fn table(modules: &BTreeSet<String>) -> Vec<Row> {
    let doc = fs::read_to_string(root().join("docs/architecture.md")).unwrap();
    let section = doc
        .split("## What each module owns")
        .nth(1)
        .expect("docs/architecture.md has a section \"What each module owns\"");
    let section = section.split("\n## ").next().unwrap_or(section);
    section
        .lines()
        .filter(|line| line.starts_with("| `"))
        .map(|line| {
            let cells: Vec<&str> = line.trim_matches('|').split(" | ").collect();
            assert_eq!(
                cells.len(),
                3,
                "a row of the module table has three cells: {line}"
            );
            let may = cells[2].trim();
            let may_import = if may.starts_with("everything") {
                None
            } else {
                Some(
                    backticked(may)
                        .into_iter()
                        .filter(|name| modules.contains(name))
                        .collect(),
                )
            };
            Row {
                modules: backticked(cells[0]),
                may_import,
            }
        })
        .collect()
}

/// The files of a module: `src/NAME.rs` and everything under `src/NAME/`.
fn files_of(module: &str) -> Vec<PathBuf> {
    let src = root().join("src");
    let mut files = Vec::new();
    let single = src.join(format!("{module}.rs"));
    if single.is_file() {
        files.push(single);
    }
    let dir = src.join(module);
    if dir.is_dir() {
        walk(&dir, &mut files);
    }
    files
}

fn walk(dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            walk(&path, files);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            files.push(path);
        }
    }
}

/// The code of a file without its comments and unit tests: a comment may name a path it
/// does not use, and a test module may build fixtures from any module, which is no arrow
/// of the design.
fn without_tests(text: &str) -> String {
    let lines: Vec<&str> = text
        .lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect();
    let mut kept = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let is_test_attr = lines[i].trim() == "#[cfg(test)]";
        let next_is_mod = lines
            .get(i + 1)
            .is_some_and(|next| next.trim_start().starts_with("mod "));
        if is_test_attr && next_is_mod {
            if lines[i + 1].trim_end().ends_with(';') {
                i += 2;
                continue;
            }
            // Skip the module's braces.
            let mut depth = 0i32;
            let mut j = i + 1;
            while j < lines.len() {
                depth += lines[j].matches('{').count() as i32;
                depth -= lines[j].matches('}').count() as i32;
                j += 1;
                if depth <= 0 && lines[j - 1].contains('}') {
                    break;
                }
            }
            i = j;
            continue;
        }
        kept.push(lines[i]);
        i += 1;
    }
    kept.join("\n")
}

/// The top-level modules `code` reaches through `prefix` (`crate` or `phasescope`):
/// `prefix::name…` paths and `use prefix::{a, b::c}` groups.
fn reached(code: &str, prefix: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let needle = format!("{prefix}::");
    let mut rest = code;
    while let Some(at) = rest.find(&needle) {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + needle.len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let end = matching_brace(group);
            for item in top_level_items(&group[..end]) {
                names.insert(first_segment(item));
            }
        } else {
            names.insert(first_segment(rest));
        }
    }
    names.retain(|name| !name.is_empty() && name != "self");
    names
}

fn first_segment(path: &str) -> String {
    path.trim_start()
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

/// The byte index of the `}` closing a group whose `{` was just before `text`.
fn matching_brace(text: &str) -> usize {
    let mut depth = 1;
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return i;
                }
            }
            _ => {}
        }
    }
    text.len()
}

/// The comma-separated items of a `use` group at its own level.
fn top_level_items(group: &str) -> Vec<&str> {
    let mut items = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&group[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&group[start..]);
    items
        .into_iter()
        .filter(|item| !item.trim().is_empty())
        .collect()
}

/// What each module's code imports from the crate's other modules.
fn imports(modules: &BTreeSet<String>) -> BTreeMap<String, BTreeSet<String>> {
    let mut out = BTreeMap::new();
    for module in modules {
        let (files, prefix) = match module.as_str() {
            "main" => (vec![root().join("src/main.rs")], "phasescope"),
            "bin" => {
                let mut files = Vec::new();
                walk(&root().join("src/bin"), &mut files);
                (files, "phasescope")
            }
            _ => (files_of(module), "crate"),
        };
        assert!(!files.is_empty(), "module {module} has no files");
        let mut reached_all = BTreeSet::new();
        for file in files {
            if file.file_name().is_some_and(|name| name == "tests.rs") {
                continue;
            }
            let text = fs::read_to_string(&file).unwrap();
            reached_all.extend(reached(&without_tests(&text), prefix));
        }
        reached_all.remove(module);
        reached_all.retain(|name| modules.contains(name));
        out.insert(module.clone(), reached_all);
    }
    out
}

#[test]
fn the_module_table_matches_the_code() {
    let modules = declared_modules();
    let rows = table(&modules);
    let imports = imports(&modules);
    let mut problems = Vec::new();

    let mut in_table = BTreeSet::new();
    for row in &rows {
        for module in &row.modules {
            if !modules.contains(module) {
                problems.push(format!(
                    "the table has a row for `{module}`, which is no module"
                ));
                continue;
            }
            in_table.insert(module.clone());
            let Some(allowed) = &row.may_import else {
                continue;
            };
            let used = &imports[module];
            for name in used.difference(allowed) {
                problems.push(format!(
                    "`{module}` imports `{name}`, which its row does not allow"
                ));
            }
            // A row shared by several modules lists what any of them imports.
            let used_by_row: BTreeSet<String> = row
                .modules
                .iter()
                .filter_map(|m| imports.get(m))
                .flatten()
                .cloned()
                .collect();
            if row.modules.first() == Some(module) {
                for name in allowed.difference(&used_by_row) {
                    problems.push(format!(
                        "the row of `{}` allows `{name}`, which its code never imports",
                        row.modules.join("`, `")
                    ));
                }
            }
        }
    }
    for module in modules.difference(&in_table) {
        problems.push(format!("`{module}` has no row in the module table"));
    }
    assert!(
        problems.is_empty(),
        "docs/architecture.md's module table and the code disagree:\n  {}",
        problems.join("\n  ")
    );
}

#[test]
fn the_import_reader_sees_groups_paths_and_skips_tests() {
    let code = "//! see crate::doc\nuse crate::{a::B, c, d::{e, f}};\nfn x() { crate::g::h(); my_crate::z(); }\n\
                #[cfg(test)]\nmod tests {\n    use crate::t;\n    fn y() { { } }\n}\nuse crate::after;\n";
    let seen = reached(&without_tests(code), "crate");
    let expected: BTreeSet<String> = ["a", "c", "d", "g", "after"]
        .into_iter()
        .map(String::from)
        .collect();
    assert_eq!(seen, expected);
}

/// `report`'s folders import one another down one list (docs/architecture.md, below the
/// table): `source` reads, `compare` builds on what was read, `export` on both (the
/// differential flame graphs are coloured by the comparison's function rows), `render`
/// prints all of it; none reaches back up, so no circle can form between them. `file` (where
/// every output is written) is below them all. Each folder may reach the ones listed for
/// it, and at least one file reaches each arrow the rule allows but `file`, so that the
/// rule stays the code's and not a wish.
#[test]
fn the_report_folders_import_down_their_list() {
    let allowed: [(&str, &[&str]); 4] = [
        ("source", &["file"]),
        ("compare", &["source", "file"]),
        ("export", &["compare", "source", "file"]),
        ("render", &["compare", "source", "export", "file"]),
    ];
    let folders: Vec<&str> = allowed.iter().map(|(f, _)| *f).collect();
    for (folder, may) in allowed {
        let mut seen = BTreeSet::new();
        let mut dir = Vec::new();
        walk(&root().join("src/report").join(folder), &mut dir);
        assert!(!dir.is_empty(), "src/report/{folder}/ has files");
        for file in dir {
            let code = without_tests(&fs::read_to_string(&file).unwrap());
            for name in reached(&code, "crate::report") {
                let name = if folders.contains(&name.as_str()) || name == "file" {
                    name
                } else {
                    continue;
                };
                if name == folder {
                    continue;
                }
                assert!(
                    may.contains(&name.as_str()),
                    "{} reaches report::{name}, which lies above {folder} or beside it",
                    file.display()
                );
                seen.insert(name);
            }
        }
        for name in may.iter().filter(|n| **n != "file") {
            if folder == "source" {
                continue;
            }
            assert!(
                seen.contains(*name),
                "no file of report::{folder} reaches report::{name}: take it out of the rule"
            );
        }
    }
}
