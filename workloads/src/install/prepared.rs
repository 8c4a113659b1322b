//! An environment the user prepared instead of the one lockstorm installs:
//! `LOCKSTORM_PYTHON` (a Python that has the pinned packages) and
//! `LOCKSTORM_NODE_MODULES` (a `node_modules` folder that has them), for
//! machines that cannot reach the package registries. Each is checked
//! against the pins before it is used, so a missing or different package is
//! one line, not an adapter's import error mid-run.

use super::SetupFailed;
use std::path::{Path, PathBuf};
use std::process::Command;

/// How many wrong packages a message lists before it counts the rest.
const LISTED: usize = 5;

/// How long the pin check of a user's Python may take (it imports nothing).
const CHECK_WITHIN: std::time::Duration = std::time::Duration::from_secs(60);

/// `LOCKSTORM_PYTHON`, if set: the Python to run the Python adapters with.
pub fn python() -> Option<PathBuf> {
    std::env::var_os("LOCKSTORM_PYTHON")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// `LOCKSTORM_NODE_MODULES`, if set: the folder the Node adapters find their
/// packages in (as `NODE_PATH`), made absolute since adapters run elsewhere.
pub fn node_modules() -> Option<PathBuf> {
    let dir = PathBuf::from(std::env::var_os("LOCKSTORM_NODE_MODULES").filter(|v| !v.is_empty())?);
    Some(std::path::absolute(&dir).unwrap_or(dir))
}

/// Reads each `name==version` pin of `requirements` from the Python's
/// installed distributions (their metadata: quick, and what `pip` itself
/// consults), printing the wrong ones.
const CHECK_PINS: &str = r#"
import sys, importlib.metadata as m
wrong = []
for line in open(sys.argv[1]):
    line = line.split('#')[0].strip()
    if not line:
        continue
    name, _, want = line.partition('==')
    try:
        have = m.version(name)
    except m.PackageNotFoundError:
        wrong.append(name + '==' + want + ' (missing)')
        continue
    if have != want:
        wrong.append(name + '==' + want + ' (it has ' + have + ')')
print('\n'.join(wrong))
"#;

/// Checks that `python` has every pin of `requirements`.
pub fn check_python(python: &Path, requirements: &Path) -> Result<(), SetupFailed> {
    let named = format!("LOCKSTORM_PYTHON={}", python.display());
    let out = process::output_within(
        Command::new(python)
            .args(["-c", CHECK_PINS])
            .arg(requirements),
        CHECK_WITHIN,
    )
    .map_err(|e| {
        SetupFailed::theirs(format!(
            "cannot run {named}: {e}; name a Python that has the packages of {}, or unset it",
            requirements.display()
        ))
    })?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(SetupFailed::theirs(format!(
            "{named} could not read its packages ({}): {}",
            out.status,
            super::step::last_words(&stderr)
        )));
    }
    let wrong: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(String::from)
        .collect();
    match wrong.is_empty() {
        true => Ok(()),
        false => Err(SetupFailed::theirs(format!(
            "{named} lacks the pinned packages {}: install them with `{} -m pip install -r {}`, or unset LOCKSTORM_PYTHON to have lockstorm set up its own venv",
            listed(&wrong),
            python.display(),
            requirements.display()
        ))),
    }
}

/// Checks that `modules` has every package of the lockfile `lock`
/// (`package-lock.json` v2/v3) at its locked version, as `npm ci
/// --omit=dev` would install them.
pub fn check_node_modules(modules: &Path, lock: &str, lock_path: &Path) -> Result<(), SetupFailed> {
    let named = format!("LOCKSTORM_NODE_MODULES={}", modules.display());
    if !modules.is_dir() {
        return Err(SetupFailed::theirs(format!(
            "{named} is not a folder: name the node_modules folder `npm ci` made from {}, or unset it",
            lock_path.display()
        )));
    }
    let lock: serde_json::Value = serde_json::from_str(lock).expect("the shipped lockfile parses");
    let packages = lock["packages"].as_object().expect("a v2 or v3 lockfile");
    let mut wrong = Vec::new();
    for (key, entry) in packages {
        // "" is the adapters' own package; dev and optional ones are not
        // what the adapters need.
        let Some(path) = key.strip_prefix("node_modules/") else {
            continue;
        };
        if entry["dev"].as_bool() == Some(true) || entry["optional"].as_bool() == Some(true) {
            continue;
        }
        let want = entry["version"].as_str().unwrap_or("");
        let name = path.rsplit("node_modules/").next().unwrap_or(path);
        let have = std::fs::read_to_string(modules.join(path).join("package.json"))
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .and_then(|v| v["version"].as_str().map(String::from));
        match have {
            None => wrong.push(format!("{name}@{want} (missing)")),
            // As npm's semver reads a version: a leading `v` or `=` is not
            // part of it (redlock's own package.json says `v5.0.0-beta.2`).
            Some(have) if have.trim_start_matches(['v', '=']) != want => {
                wrong.push(format!("{name}@{want} (it has {have})"))
            }
            Some(_) => {}
        }
    }
    match wrong.is_empty() {
        true => Ok(()),
        false => Err(SetupFailed::theirs(format!(
            "{named} lacks the pinned packages {}: make it with `npm ci --omit=dev` next to {}, or unset LOCKSTORM_NODE_MODULES to have lockstorm set up its own",
            listed(&wrong),
            lock_path.display()
        ))),
    }
}

/// The first few, and how many more.
fn listed(wrong: &[String]) -> String {
    let mut text = wrong[..wrong.len().min(LISTED)].join(", ");
    if wrong.len() > LISTED {
        text.push_str(&format!(" and {} more", wrong.len() - LISTED));
    }
    text
}
