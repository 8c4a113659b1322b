//! No import circle inside a crate. The file graph of each crate's `src` has
//! an edge for each `crate::…`, `super::…` or `self::…` path a file names
//! outside its `#[cfg(test)]` code (to the file of the longest module the
//! path names). Lifted to sibling modules (a file and the files under it are
//! one unit to their siblings), it must have no circle, or ARCHITECTURE.md's
//! "sibling modules import one way" is false.

use super::source::{self, Source};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

type Module = Vec<String>;

/// Each file of a crate and the module it is (`lib.rs` the root).
fn modules(krate: &str, sources: &[Source]) -> BTreeMap<Module, String> {
    let prefix = format!("{krate}/src/");
    sources
        .iter()
        .filter(|s| !s.path.ends_with("/main.rs"))
        .map(|s| {
            let rel = s
                .path
                .strip_prefix(&prefix)
                .unwrap()
                .trim_end_matches(".rs");
            let mut module: Module = rel.split('/').map(String::from).collect();
            if matches!(module.last().map(String::as_str), Some("mod" | "lib")) {
                module.pop();
            }
            (module, s.path.clone())
        })
        .collect()
}

/// The file graph of one crate: each file and the files it names.
fn files(krate: &str) -> (BTreeMap<Module, String>, BTreeMap<String, BTreeSet<String>>) {
    let sources = source::files(krate);
    let tests_only = source::test_only(&sources);
    let modules: BTreeMap<Module, String> = modules(krate, &sources)
        .into_iter()
        .filter(|(_, path)| !tests_only.contains(path))
        .collect();
    let mut graph = BTreeMap::new();
    for (module, path) in &modules {
        let source = sources.iter().find(|s| &s.path == path).unwrap();
        let mut targets = BTreeSet::new();
        for (scope, named) in paths(&source.code, module) {
            if let Some(target) = resolve(&modules, &scope, &named) {
                if target != *path {
                    targets.insert(target);
                }
            }
        }
        graph.insert(path.clone(), targets);
    }
    (modules, graph)
}

/// A sibling edge: two modules under one parent (each with the modules
/// under it), and the file edges that make it.
type Siblings = BTreeMap<(String, String), Vec<(String, String)>>;

/// The crate's file edges lifted to siblings: a file edge joins the two
/// modules under the deepest module that holds both files. A module's use
/// of its own parent or children is no sibling edge (they are one unit to
/// everything outside), so a trait in `mod.rs` that its children implement
/// is fine; `scene.rs` and `keys.rs` naming each other are not.
fn siblings(krate: &str) -> Siblings {
    let (modules, graph) = files(krate);
    let module_of: BTreeMap<&String, &Module> = modules.iter().map(|(m, p)| (p, m)).collect();
    let mut out = Siblings::new();
    for (from, targets) in &graph {
        for to in targets {
            let (a, b) = (module_of[from], module_of[to]);
            let k = a.iter().zip(b).take_while(|(x, y)| x == y).count();
            if k == a.len() || k == b.len() {
                continue;
            }
            let name = |m: &Module| format!("{krate}::{}", m[..=k].join("::"));
            out.entry((name(a), name(b)))
                .or_default()
                .push((from.clone(), to.clone()));
        }
    }
    out
}

/// The file of the longest module a path names, read from its scope.
fn resolve(modules: &BTreeMap<Module, String>, scope: &Module, named: &[String]) -> Option<String> {
    let mut base = match named.first().map(String::as_str) {
        Some("crate") => Vec::new(),
        Some("self" | "super") => scope.clone(),
        _ => return None,
    };
    let mut rest = named
        .iter()
        .skip(usize::from(named[0] == "crate"))
        .peekable();
    while let Some(s) = rest.next_if(|s| *s == "super" || *s == "self") {
        if s == "super" {
            base.pop()?;
        }
    }
    let mut best = base.clone();
    for seg in rest {
        base.push(seg.clone());
        if modules.contains_key(&base) {
            best = base.clone();
        }
    }
    // An inline module belongs to its file: go up to the nearest file.
    while !modules.contains_key(&best) {
        best.pop()?;
    }
    modules.get(&best).cloned()
}

/// Every `crate::`, `super::` and `self::` path in a file's code outside
/// `#[cfg(test)]` items, with the module it is read in (inline modules
/// included), braces expanded.
fn paths(code: &str, module: &Module) -> Vec<(Module, Vec<String>)> {
    let b = code.as_bytes();
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut out = Vec::new();
    let mut scope = module.clone();
    // The brace depth each inline module's body opened at.
    let mut inline: Vec<usize> = Vec::new();
    let mut depth = 0;
    let mut i = 0;
    while i < b.len() {
        let rest = &code[i..];
        if rest.starts_with("#[cfg(test)]") {
            i = source::skip_item(b, i + "#[cfg(test)]".len());
            continue;
        }
        match b[i] {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if inline.last() == Some(&depth) {
                    inline.pop();
                    scope.pop();
                }
            }
            _ => {}
        }
        let starts_word = i == 0 || !(ident(b[i - 1]) || b[i - 1] == b'$');
        if starts_word && rest.starts_with("mod ") {
            let name: String = rest[4..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            let after = rest[4 + name.len()..].trim_start();
            if after.starts_with('{') {
                scope.push(name);
                inline.push(depth);
            }
        }
        if starts_word {
            for head in ["crate", "super", "self"] {
                if rest.starts_with(head) && rest[head.len()..].trim_start().starts_with("::") {
                    let (found, end) = tree(code, i);
                    out.extend(found.into_iter().map(|p| (scope.clone(), p)));
                    i = end - 1;
                    break;
                }
            }
        }
        i += 1;
    }
    out
}

/// A use tree from `i` (`a::b::{c, d::{self, e}}`): its paths, each from its
/// head, and where it ended.
fn tree(code: &str, mut i: usize) -> (Vec<Vec<String>>, usize) {
    let b = code.as_bytes();
    let skip_ws = |i: &mut usize| {
        while *i < b.len() && b[*i].is_ascii_whitespace() {
            *i += 1;
        }
    };
    let mut prefix = Vec::new();
    loop {
        skip_ws(&mut i);
        if i < b.len() && b[i] == b'{' {
            let mut out = Vec::new();
            i += 1;
            loop {
                skip_ws(&mut i);
                if i >= b.len() || b[i] == b'}' {
                    return (out, i + 1);
                }
                let (inner, end) = tree(code, i);
                for p in inner {
                    let mut full = prefix.clone();
                    full.extend(p.into_iter().filter(|s| s != "self"));
                    out.push(full);
                }
                i = end;
                // Past `as name` to the next element or the closing brace.
                let mut level = 0;
                while i < b.len() && !(level == 0 && (b[i] == b',' || b[i] == b'}')) {
                    level += usize::from(b[i] == b'{');
                    level -= usize::from(b[i] == b'}' && level > 0);
                    i += 1;
                }
                if i < b.len() && b[i] == b',' {
                    i += 1;
                }
            }
        }
        let start = i;
        while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b'*') {
            i += 1;
        }
        if i > start && b[start] != b'*' {
            prefix.push(code[start..i].to_string());
        }
        let mut j = i;
        skip_ws(&mut j);
        if code[j..].starts_with("::") {
            i = j + 2;
        } else {
            return (vec![prefix], i);
        }
    }
}

/// The circles of a graph: each strongly connected set of more than one
/// node.
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<BTreeSet<String>> {
    let reach = |from: &String| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.clone()];
        while let Some(f) = todo.pop() {
            for t in graph.get(&f).into_iter().flatten() {
                if seen.insert(t.clone()) {
                    todo.push(t.clone());
                }
            }
        }
        seen
    };
    let mut out: Vec<BTreeSet<String>> = Vec::new();
    for node in graph.keys() {
        if out.iter().any(|set| set.contains(node)) || !reach(node).contains(node) {
            continue;
        }
        // Its set: what it reaches that reaches it back.
        out.push(
            reach(node)
                .into_iter()
                .filter(|f| reach(f).contains(node))
                .collect(),
        );
    }
    out
}

/// The sibling graph of a crate, by module.
fn sibling_graph(edges: &Siblings) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (a, b) in edges.keys() {
        graph.entry(a.clone()).or_default().insert(b.clone());
    }
    graph
}

fn shortest_circle(graph: &BTreeMap<String, BTreeSet<String>>, from: &String) -> Vec<String> {
    let mut back: BTreeMap<String, String> = BTreeMap::new();
    let mut queue = VecDeque::from([from.clone()]);
    while let Some(f) = queue.pop_front() {
        for t in graph.get(&f).into_iter().flatten() {
            if t == from {
                // Back from `f` to `from` along the search's steps.
                let mut circle = vec![f.clone()];
                while let Some(p) = back.get(circle.last().unwrap()) {
                    circle.push(p.clone());
                }
                circle.reverse();
                return circle;
            }
            if !back.contains_key(t) && t != from {
                back.insert(t.clone(), f.clone());
                queue.push_back(t.clone());
            }
        }
    }
    vec![from.clone()]
}

#[test]
fn no_crate_has_an_import_circle() {
    let mut found = Vec::new();
    for krate in source::CRATES.iter() {
        let edges = siblings(krate);
        let graph = sibling_graph(&edges);
        for set in circles(&graph) {
            let circle = shortest_circle(&graph, set.first().unwrap());
            let steps: Vec<String> = circle
                .iter()
                .zip(circle.iter().cycle().skip(1))
                .map(|(a, b)| {
                    let by: Vec<String> = edges[&(a.clone(), b.clone())]
                        .iter()
                        .map(|(f, t)| format!("{f} names {t}"))
                        .collect();
                    format!("  {a} → {b}: {}", by.join(", "))
                })
                .collect();
            found.push(format!("{set:?}, e.g.\n{}", steps.join("\n")));
        }
    }
    assert!(
        found.is_empty(),
        "import circles (move the shared definition to where both sides can import it):\n{}",
        found.join("\n\n")
    );
}

#[test]
fn the_import_reader_expands_trees_and_skips_tests() {
    let code = "use crate::a::{b, c::{self, D}, e as f};\nuse super::g::*;\n\
                #[cfg(test)]\nmod tests { use crate::h; }\nmod inner { use super::super::i; }\n\
                fn x() { crate::j::k(); }";
    let (code, _) = source::lex(code);
    let module = vec!["m".to_string()];
    let found: Vec<String> = paths(&code, &module)
        .into_iter()
        .map(|(scope, p)| format!("{}:{}", scope.join("::"), p.join("::")))
        .collect();
    assert_eq!(
        found,
        [
            "m:crate::a::b",
            "m:crate::a::c",
            "m:crate::a::c::D",
            "m:crate::a::e",
            "m:super::g",
            "m::inner:super::super::i",
            "m:crate::j::k",
        ]
    );
}
