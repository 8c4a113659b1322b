//! ARCHITECTURE.md stays true where a test can see it: every path it names
//! exists, its arrows are the crates' dependencies as cargo has them, and
//! it stays a map (at most 300 lines), not an inventory.

use super::source;
use std::collections::BTreeMap;

/// Every backticked path in ARCHITECTURE.md: a token with a `/` (a path
/// from the workspace's root) or a file name ending in `.rs`, without
/// spaces or placeholders.
fn page_paths(page: &str) -> Vec<String> {
    page.split('`')
        .skip(1)
        .step_by(2)
        .filter(|t| !t.contains([' ', '<', '{', '*', '…', '|', '=', ':']))
        .filter(|t| !t.starts_with('/') && !t.starts_with('-'))
        .filter(|t| t.contains('/') || t.ends_with(".rs"))
        .map(String::from)
        .collect()
}

#[test]
fn the_map_names_only_paths_that_exist_and_stays_short() {
    let page = std::fs::read_to_string(source::root().join("ARCHITECTURE.md")).unwrap();
    let paths = page_paths(&page);
    assert!(
        paths.len() > 20,
        "the page names {} paths: {paths:?}",
        paths.len()
    );
    let every_file: Vec<String> = source::CRATES
        .iter()
        .flat_map(|k| source::files(k))
        .map(|s| s.path)
        .collect();
    let missing: Vec<&String> = paths
        .iter()
        .filter(|p| match p.contains('/') {
            true => !source::root().join(p).exists(),
            // A bare file name: some crate's source file has it.
            false => !every_file.iter().any(|f| f.ends_with(&format!("/{p}"))),
        })
        .collect();
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md names paths that do not exist: {missing:?}"
    );
    let lines = page.lines().count();
    assert!(
        lines <= 300,
        "ARCHITECTURE.md has {lines} lines: it is a map, keep it under 300 (detail goes in the modules' `//!` headers)"
    );
}

#[test]
fn the_maps_arrows_are_the_crates_dependencies() {
    let page = std::fs::read_to_string(source::root().join("ARCHITECTURE.md")).unwrap();
    let block = page
        .split("## Code map")
        .nth(1)
        .and_then(|s| s.split("```").nth(1))
        .expect("the code map opens with a block of arrows");
    // `name (package) → a, b` and `a, b, c: no workspace crate`.
    let mut drawn: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in block.lines() {
        if let Some((from, to)) = line.split_once('→') {
            let package = from.split_whitespace().last().unwrap();
            let package = package.trim_matches(|c| c == '(' || c == ')');
            let mut to: Vec<String> = to.split(',').map(|t| t.trim().to_string()).collect();
            to.sort();
            drawn.insert(package.to_string(), to);
        } else if let Some((leaves, _)) = line.split_once(": no workspace crate") {
            for leaf in leaves.split(',') {
                drawn.insert(leaf.trim().to_string(), Vec::new());
            }
        }
    }
    let mut edges = super::workspace_edges(&super::metadata());
    edges.values_mut().for_each(|deps| deps.sort());
    // testkit is drawn as a dev-dependency, on a line of its own.
    edges.remove("testkit");
    assert_eq!(
        drawn, edges,
        "ARCHITECTURE.md's arrows (left) differ from cargo metadata (right)"
    );
}
