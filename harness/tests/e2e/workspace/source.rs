//! The workspace's sources as the rules read them: each crate's `src` files,
//! each split into its code (comments and literals blanked, lines kept) and
//! its string literals, and which files only tests compile.

use std::path::{Path, PathBuf};
use std::sync::LazyLock;

/// Every crate of the workspace, by folder: the root manifest's `members`
/// (all top-level folders, which `workspace.rs` holds).
pub static CRATES: LazyLock<Vec<&'static str>> = LazyLock::new(|| {
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let members = manifest
        .lines()
        .find_map(|l| l.strip_prefix("members = ["))
        .expect("the workspace lists its members on one line");
    members
        .split('"')
        .skip(1)
        .step_by(2)
        .map(|m| &*Box::leak(m.to_string().into_boxed_str()))
        .collect()
});

/// The workspace's root folder.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// One source file: its path from the root (`report/src/plot/scene.rs`),
/// its code, and its string literals with their line numbers.
pub struct Source {
    pub path: String,
    pub raw: String,
    pub code: String,
    pub strings: Vec<(usize, String)>,
}

impl Source {
    fn read(path: String) -> Source {
        let raw = std::fs::read_to_string(root().join(&path)).expect("a source file reads");
        let (code, strings) = lex(&raw);
        Source {
            path,
            raw,
            code,
            strings,
        }
    }
}

/// Every `.rs` file under `<krate>/src`, sorted, paths from the root.
pub fn files(krate: &str) -> Vec<Source> {
    let mut paths = Vec::new();
    walk(&root().join(krate).join("src"), &mut paths);
    paths.sort();
    paths
        .into_iter()
        .map(|p| {
            let rel = p
                .strip_prefix(root())
                .unwrap()
                .to_string_lossy()
                .into_owned();
            Source::read(rel)
        })
        .collect()
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a source folder reads") {
        let path = entry.unwrap().path();
        if path.is_dir() {
            walk(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The files a crate compiles only for its tests: out-of-line modules
/// declared under `#[cfg(test)]` (by name, or by `#[path]`).
pub fn test_only(sources: &[Source]) -> Vec<String> {
    let mut out = Vec::new();
    for source in sources {
        let dir = Path::new(&source.path).parent().unwrap();
        let own = if source.path.ends_with("/mod.rs") || source.path.ends_with("/lib.rs") {
            dir.to_path_buf()
        } else {
            dir.join(Path::new(&source.path).file_stem().unwrap())
        };
        let lines: Vec<&str> = source.raw.lines().map(str::trim).collect();
        for (i, line) in lines.iter().enumerate() {
            if *line != "#[cfg(test)]" {
                continue;
            }
            let mut path_attr = None;
            let mut j = i + 1;
            while j < lines.len() && lines[j].starts_with("#[") {
                if let Some(p) = lines[j].strip_prefix("#[path = \"") {
                    path_attr = Some(p.trim_end_matches("\"]").to_string());
                }
                j += 1;
            }
            let Some(item) = lines.get(j) else { continue };
            let item = item
                .trim_start_matches("pub ")
                .trim_start_matches("pub(crate) ");
            let Some(name) = item.strip_prefix("mod ").and_then(|m| m.strip_suffix(';')) else {
                continue;
            };
            match path_attr {
                Some(p) => out.push(dir.join(p).to_string_lossy().into_owned()),
                None => {
                    out.push(
                        own.join(format!("{name}.rs"))
                            .to_string_lossy()
                            .into_owned(),
                    );
                    out.push(own.join(name).join("mod.rs").to_string_lossy().into_owned());
                }
            }
        }
    }
    out
}

/// Splits Rust source into its code, with comments and the contents of
/// string and char literals blanked (newlines kept, so offsets and lines
/// stay those of the file), and its string literals with their lines.
pub fn lex(text: &str) -> (String, Vec<(usize, String)>) {
    let c: Vec<char> = text.chars().collect();
    let mut code = String::with_capacity(text.len());
    let mut strings = Vec::new();
    let mut line = 1;
    let blank = |ch: char, code: &mut String, line: &mut usize| {
        if ch == '\n' {
            *line += 1;
            code.push('\n');
        } else {
            // Keep byte offsets: a blank for each byte of the character.
            code.extend(std::iter::repeat_n(' ', ch.len_utf8()));
        }
    };
    let ident = |ch: char| ch.is_alphanumeric() || ch == '_';
    let mut i = 0;
    while i < c.len() {
        let prev = if i > 0 { c[i - 1] } else { ' ' };
        if c[i] == '/' && c.get(i + 1) == Some(&'/') {
            while i < c.len() && c[i] != '\n' {
                blank(c[i], &mut code, &mut line);
                i += 1;
            }
        } else if c[i] == '/' && c.get(i + 1) == Some(&'*') {
            let mut depth = 0;
            loop {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    blank(c[i], &mut code, &mut line);
                    i += 1;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    blank(c[i], &mut code, &mut line);
                    i += 1;
                }
                blank(c[i], &mut code, &mut line);
                i += 1;
                if depth == 0 || i >= c.len() {
                    break;
                }
            }
        } else if c[i] == 'r'
            && !(ident(prev) && !(prev == 'b' && (i < 2 || !ident(c[i - 2]))))
            && raw_hashes(&c, i + 1).is_some()
        {
            let hashes = raw_hashes(&c, i + 1).unwrap();
            code.push('r');
            code.extend(std::iter::repeat_n('#', hashes));
            code.push('"');
            i += 2 + hashes;
            let start = line;
            let mut s = String::new();
            while i < c.len()
                && !(c[i] == '"' && (0..hashes).all(|k| c.get(i + 1 + k) == Some(&'#')))
            {
                s.push(c[i]);
                blank(c[i], &mut code, &mut line);
                i += 1;
            }
            code.push('"');
            code.extend(std::iter::repeat_n('#', hashes));
            i += 1 + hashes;
            strings.push((start, s));
        } else if c[i] == '"' {
            code.push('"');
            i += 1;
            let start = line;
            let mut s = String::new();
            while i < c.len() && c[i] != '"' {
                if c[i] == '\\' {
                    s.push(c[i]);
                    blank(c[i], &mut code, &mut line);
                    i += 1;
                }
                s.push(c[i]);
                blank(c[i], &mut code, &mut line);
                i += 1;
            }
            code.push('"');
            i += 1;
            strings.push((start, s));
        } else if c[i] == '\'' && (c.get(i + 1) == Some(&'\\') || c.get(i + 2) == Some(&'\'')) {
            // A char literal; a lifetime (`'a`) has no closing quote.
            code.push('\'');
            i += 1;
            while i < c.len() && c[i] != '\'' {
                if c[i] == '\\' {
                    blank(c[i], &mut code, &mut line);
                    i += 1;
                }
                blank(c[i], &mut code, &mut line);
                i += 1;
            }
            code.push('\'');
            i += 1;
        } else {
            if c[i] == '\n' {
                line += 1;
            }
            code.push(c[i]);
            i += 1;
        }
    }
    (code, strings)
}

/// At `r`'s next character: `#`s then `"` open a raw string; how many `#`.
fn raw_hashes(c: &[char], from: usize) -> Option<usize> {
    let hashes = c[from..].iter().take_while(|&&ch| ch == '#').count();
    (c.get(from + hashes) == Some(&'"')).then_some(hashes)
}

#[test]
fn the_lexer_blanks_comments_and_literals_and_keeps_offsets() {
    let text = "let a = \"x{\\\"y\"; // crate::no\nlet b = r#\"a\"b\"#; /* super:: /* */ */ 'c' '\\n' &'a str é\n";
    let (code, strings) = lex(text);
    assert_eq!(code.len(), text.len());
    assert_eq!(code.lines().count(), text.lines().count());
    assert!(!code.contains("crate") && !code.contains("super") && !code.contains('{'));
    assert!(code.contains("&'a str"));
    assert_eq!(
        strings,
        [(1, "x{\\\"y".to_string()), (2, "a\"b".to_string())]
    );
}

/// Past the item after a `#[cfg(test)]` (its other attributes, then to its
/// `;` or its body's closing brace).
pub fn skip_item(b: &[u8], mut i: usize) -> usize {
    let mut depth = 0usize;
    let mut brackets = 0usize;
    while i < b.len() {
        match b[i] {
            b'[' => brackets += 1,
            b']' => brackets = brackets.saturating_sub(1),
            b';' if depth == 0 && brackets == 0 => return i + 1,
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    i
}
