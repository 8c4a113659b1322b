"""Writes docs/ci.md's commands and files into a folder, as a team would
have them: install.sh, the gate script (the page's marked shell blocks),
the expectations file it shows, workflow.sh (the workflow's `run:` steps
that run the gate, as written), and the protocol page's example adapter as
my_adapter.py. `.ci/run` runs them (the step `ci_page`)."""
import re
import sys
from pathlib import Path

ci_page, protocol, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
blocks = re.findall(r"<!-- ci-page: (\S+)(?: (\S+))? -->\n```\w*\n(.*?)```", ci_page.read_text(), re.S)
wanted = {"install", "gate", "expectations", "workflow"}
found = {kind for kind, _, _ in blocks}
if found != wanted:
    sys.exit(f"{ci_page}: marked blocks {sorted(found)}, expected {sorted(wanted)}")
for kind, name, text in blocks:
    if kind == "workflow":
        gate = next(n for k, n, _ in blocks if k == "gate")
        steps = [l.split("- run:", 1)[1].strip() for l in text.splitlines() if "- run:" in l and gate in l]
        if not steps:
            sys.exit(f"{ci_page}: the workflow runs no {gate}")
        (out / "workflow.sh").write_text("set -euxo pipefail\n" + "\n".join(steps) + "\n")
    elif kind == "expectations" or name:
        (out / name).write_text(text)
    else:
        (out / f"{kind}.sh").write_text("set -euxo pipefail\n" + text)
example = re.search(r"<!-- example-adapter -->\n```python\n(.*?)```", protocol.read_text(), re.S)
if not example:
    sys.exit(f"{protocol}: no marked example adapter")
(out / "my_adapter.py").write_text(example.group(1))
