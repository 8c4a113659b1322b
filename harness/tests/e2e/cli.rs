//! The command line: bad input is one clear line with the documented exit
//! code and nothing left behind; `--help` lists what the registries hold,
//! and docs/options.md is what `--help` says.

use crate::common;

use common::{lockstorm, lockstorm_with};

#[test]
fn an_unknown_config_exits_254_naming_the_valid_ones() {
    let tmp = common::tmp();
    let out = lockstorm(&[
        "--config",
        "redlok",
        "--results",
        tmp.path().to_str().unwrap(),
    ]);
    assert_eq!(out.code, 254);
    assert_eq!(out.stderr.trim().lines().count(), 1, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("single, replicated, cluster, cluster-fenced, redlock, redlock-rslock, fenced, watchdog, pg-row-lock, pg-advisory, pg-advisory-fenced, etcd, etcd-fenced, zookeeper, zookeeper-fenced, unsafe-del, unsafe-get-del, unsafe-setnx, unsafe-key-per-worker, no-lock"),
        "{}",
        out.stderr
    );
    assert_eq!(
        std::fs::read_dir(tmp.path()).unwrap().count(),
        0,
        "a run folder was created"
    );
}

#[test]
fn an_unknown_nemesis_exits_254_naming_the_valid_ones() {
    let out = lockstorm(&["run", "--nemesis", "pause,gc"]);
    assert_eq!(out.code, 254);
    assert_eq!(out.stderr.trim().lines().count(), 1, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("none, pause, pause-node, crash, kill, failover, manual-failover, takeover, clock, partition, delay, lose-reply, terminate-session, all"),
        "{}",
        out.stderr
    );
}

#[test]
fn a_missing_redis_server_exits_254_saying_how_to_install_it() {
    let tmp = common::tmp();
    let out = lockstorm_with(
        &[
            "--results",
            tmp.path().to_str().unwrap(),
            "--time-limit",
            "1",
            // Local: `auto` would go on to Docker where a daemon answers.
            "--backend",
            "local",
        ],
        &[("LOCKSTORM_REDIS_SERVER", "/nonexistent/redis-server")],
    );
    assert_eq!(out.code, 254, "{}", out.stderr);
    assert_eq!(out.stderr.trim().lines().count(), 1, "{}", out.stderr);
    assert!(
        out.stderr.contains("apt-get install -y redis-server"),
        "{}",
        out.stderr
    );
    common::assert_no_process_left(tmp.path());
}

#[test]
fn check_of_a_missing_path_exits_254() {
    let out = lockstorm(&["check", "/nonexistent/run"]);
    assert_eq!(out.code, 254);
    assert_eq!(out.stderr.trim().lines().count(), 1, "{}", out.stderr);
    assert!(out.stderr.contains("/nonexistent/run"), "{}", out.stderr);
}

#[test]
fn report_of_a_missing_folder_exits_254() {
    let out = lockstorm(&["report", "/nonexistent/results"]);
    assert_eq!(out.code, 254, "{}", out.stderr);
    assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
    assert!(
        out.stderr.contains("/nonexistent/results"),
        "{}",
        out.stderr
    );
}

#[test]
fn check_reads_a_bare_history_with_a_promise() {
    let tmp = common::tmp();
    // Two holders at once: an overlap, which only mutual exclusion forbids.
    let history = common::overlap_history(tmp.path());
    let path = history.to_str().unwrap();
    let me = lockstorm(&["check", path]);
    assert_eq!(me.code, 1, "{}", me.stdout);
    assert!(me.stdout.contains("lock-overlap 1"), "{}", me.stdout);
    let ds = lockstorm(&["check", "--promise", "data-safety", path]);
    assert_eq!(ds.code, 0, "{}", ds.stdout);
}

#[test]
fn check_reads_a_jepsen_edn_history_and_names_a_bad_line() {
    let tmp = common::tmp();
    let history = tmp.path().join("h.edn");
    // Jepsen's layout: one vector of op maps; two processes hold the lock at once.
    let edn = r#"[{:type :invoke, :f :acquire, :process 0, :time 10, :index 0}
 {:type :ok, :f :acquire, :process 0, :time 20, :index 1}
 {:type :invoke, :f :acquire, :process 1, :time 30, :index 2}
 {:type :ok, :f :acquire, :process 1, :time 40, :index 3}
 {:type :info, :f :start-pause, :process :nemesis, :time 45, :value {:target "worker-0"}}]"#;
    std::fs::write(&history, edn).unwrap();
    let path = history.to_str().unwrap();
    let out = lockstorm(&[
        "check",
        "--format",
        "edn",
        "--promise",
        "mutual-exclusion",
        path,
    ]);
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("lock-overlap 1"), "{}", out.stdout);

    std::fs::write(&history, edn.replace(":time 30", ":time :soon")).unwrap();
    let out = lockstorm(&["check", "--format", "edn", path]);
    assert_eq!(out.code, 254, "{}", out.stderr);
    assert_eq!(out.stderr.trim().lines().count(), 1, "{}", out.stderr);
    assert!(out.stderr.contains("line 3"), "{}", out.stderr);
}

/// The lines of `--<option>` in a long `--help`: its header and its text,
/// up to the next option.
fn option_text<'a>(help: &'a str, option: &str) -> Vec<&'a str> {
    let header = |l: &str| {
        let t = l.trim_start();
        t.starts_with('-') && l.len() - t.len() < 10
    };
    let mut lines = help
        .lines()
        .skip_while(|l| !(header(l) && l.split([' ', ',']).any(|w| w == format!("--{option}"))));
    let first = lines
        .next()
        .unwrap_or_else(|| panic!("--{option} is not in the help:\n{help}"));
    std::iter::once(first)
        .chain(lines.take_while(|l| !header(l)))
        .collect()
}

/// The words of an option's text, a word being what a name is made of.
fn words(lines: &[&str]) -> std::collections::BTreeSet<String> {
    lines
        .iter()
        .flat_map(|l| l.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-')))
        .filter(|w| !w.is_empty())
        .map(String::from)
        .collect()
}

fn help_of(command: &[&str]) -> String {
    let mut args = command.to_vec();
    args.push("--help");
    let out = lockstorm(&args);
    assert_eq!(out.code, 0, "{}", out.stderr);
    out.stdout
}

/// Each name must be a word of `--<option>`'s text in `command`'s help (a
/// scenario, `partition+clock`, a run of words).
fn assert_lists(command: &[&str], option: &str, names: &[&str]) {
    let help = help_of(command);
    let text = option_text(&help, option);
    let words = words(&text);
    let joined = text.join(" ");
    for name in names {
        let listed = match name.contains('+') {
            true => joined.contains(name),
            false => words.contains(*name),
        };
        assert!(
            listed,
            "`lockstorm {} --help` does not list {name} under --{option}:\n{}",
            command.join(" "),
            text.join("\n")
        );
    }
}

#[test]
fn help_lists_every_fault_config_point_and_client_from_the_registries() {
    let faults = nemesis::Fault::ALL.map(nemesis::Fault::name);
    let scenarios = nemesis::Action::SCENARIOS.map(nemesis::Action::name);
    let configs = workloads::Config::ALL.map(workloads::Config::name);
    let points = checker::Point::ALL.map(checker::Point::name);
    let clients: Vec<&str> = workloads::install::SHIPPED.iter().map(|s| s.name).collect();
    assert!(faults.contains(&"crash"), "the registry has crash");
    for command in [&["run"][..], &[]] {
        assert_lists(command, "nemesis", &faults);
        assert_lists(command, "nemesis", &scenarios);
        assert_lists(command, "config", &configs);
        assert_lists(command, "at", &points);
        assert_lists(command, "client", &clients);
    }
    assert_lists(&["matrix"], "configs", &configs);
    assert_lists(&["matrix"], "nemeses", &faults);
    assert_lists(&["matrix"], "nemeses", &points);
    assert_lists(&["matrix"], "clients", &clients);
    assert_lists(&["client-test"], "client", &clients);
}

/// docs/options.md between these lines is rendered from the command line.
const BEGIN: &str = "<!-- options: generated from `lockstorm --help` by the test options_reference; do not edit -->";
const END: &str = "<!-- options: end -->";

/// `|` ends a table cell; a cell is one line.
fn cell(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

fn is_help_or_version(arg: &clap::Arg) -> bool {
    matches!(arg.get_id().as_str(), "help" | "version")
}

/// One row per option: its spelling, its default, and its help with the
/// values it takes.
fn options_table(cmd: &clap::Command) -> String {
    let mut rows = vec![
        "| option | default | meaning |".to_string(),
        "|---|---|---|".to_string(),
    ];
    for arg in cmd
        .get_arguments()
        .filter(|a| !a.is_hide_set() && !is_help_or_version(a))
    {
        let takes_values = arg.get_action().takes_values();
        let value = arg
            .get_value_names()
            .filter(|_| takes_values)
            .map(|names| names.iter().map(|n| format!(" <{n}>")).collect::<String>())
            .unwrap_or_default();
        let spelling = match arg.get_long() {
            Some(long) => format!("`--{long}{value}`"),
            None => format!("`{}`", value.trim()),
        };
        let default: Vec<String> = arg
            .get_default_values()
            .iter()
            .filter(|_| takes_values)
            .map(|v| format!("`{}`", v.to_string_lossy()))
            .collect();
        let mut meaning = arg
            .get_long_help()
            .or(arg.get_help())
            .map(|h| h.to_string())
            .unwrap_or_default();
        let values: Vec<String> = arg
            .get_possible_values()
            .iter()
            .filter(|v| !v.is_hide_set())
            .map(|v| match v.get_help() {
                Some(help) => format!("`{}`: {help}", v.get_name()),
                None => format!("`{}`", v.get_name()),
            })
            .collect();
        if !values.is_empty() && takes_values {
            let one_of = format!("One of: {}", values.join("; "));
            meaning = match meaning.is_empty() {
                true => one_of,
                false => format!("{meaning}. {one_of}"),
            };
        }
        rows.push(format!(
            "| {spelling} | {} | {} |",
            default.join(", "),
            cell(&meaning)
        ));
    }
    rows.join("\n")
}

/// A command's section: its name, what it does, its usage, its options, and
/// then each of its commands that is not hidden.
fn render(cmd: &clap::Command, path: &str, run: &str, out: &mut String) {
    let about = cmd
        .get_long_about()
        .or(cmd.get_about())
        .map(|a| a.to_string())
        .unwrap_or_default();
    let usage = cmd.clone().render_usage().to_string();
    let usage = usage.trim().trim_start_matches("Usage:").trim();
    out.push_str(&format!("\n## `{path}`\n\n{}\n\n```text\n", about.trim()));
    for line in usage.lines() {
        out.push_str(line.trim());
        out.push('\n');
    }
    out.push_str("```\n");
    let subcommands: Vec<&clap::Command> = cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
        .collect();
    if !subcommands.is_empty() {
        out.push_str("\n| command | what it does |\n|---|---|\n");
        for sub in &subcommands {
            let about = sub.get_about().map(|a| a.to_string()).unwrap_or_default();
            out.push_str(&format!(
                "| [`{} {}`](#{}-{}) | {} |\n",
                path,
                sub.get_name(),
                path.replace(' ', "-"),
                sub.get_name(),
                cell(&about)
            ));
        }
    }
    let table = options_table(cmd);
    if table.lines().count() > 2 {
        if table == run && cmd.get_name() != "run" {
            out.push_str(&format!(
                "\nIts options are [`{path} run`](#{}-run)'s: with no command, it runs `run`.\n",
                path.replace(' ', "-")
            ));
        } else {
            out.push_str(&format!("\n{table}\n"));
        }
    }
    for sub in subcommands {
        render(sub, &format!("{path} {}", sub.get_name()), run, out);
    }
}

fn options_reference() -> String {
    let mut cmd = lockstorm::cli::command();
    cmd.build();
    let run = cmd.find_subcommand("run").expect("a run command").clone();
    let mut out = String::new();
    render(&cmd, "lockstorm", &options_table(&run), &mut out);
    out
}

#[test]
fn options_reference_in_the_docs_is_the_command_lines_help() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/options.md");
    let page = std::fs::read_to_string(path).unwrap();
    let (head, rest) = page
        .split_once(BEGIN)
        .expect("docs/options.md has its BEGIN line");
    let (body, tail) = rest
        .split_once(END)
        .expect("docs/options.md has its END line");
    let generated = options_reference();
    if std::env::var_os("LOCKSTORM_UPDATE_DOCS").is_some() {
        std::fs::write(path, format!("{head}{BEGIN}\n{generated}\n{END}{tail}")).unwrap();
    } else if body.trim() != generated.trim() {
        let line = body
            .trim()
            .lines()
            .zip(generated.trim().lines())
            .position(|(a, b)| a != b)
            .map_or("in its length".into(), |n| format!("from line {}", n + 1));
        panic!(
            "docs/options.md differs from `--help` ({line} of its generated part): regenerate it with `LOCKSTORM_UPDATE_DOCS=1 cargo test -p lockstorm --test e2e options_reference`"
        );
    }
    // And what the page says is what the binary prints: every option of
    // every command it names is in that command's own --help.
    for section in generated.split("\n## `lockstorm").skip(1) {
        let name = section.split('`').next().unwrap();
        let command: Vec<&str> = name.split_whitespace().collect();
        let help = help_of(&command);
        for option in section.lines().filter_map(|l| l.strip_prefix("| `--")) {
            let long = option.split([' ', '`']).next().unwrap();
            assert!(
                help.contains(&format!("--{long}")),
                "`lockstorm{name} --help` lacks --{long}"
            );
        }
    }
}
