#!/usr/bin/env bash
# Redraws the timelines of docs/timelines.md: runs each demo, copies its
# timeline.svg here and looks at it in Chromium (the PNG the page shows);
# the README's first run's explain page; and the PostgreSQL and Redis
# Cluster matrices' comparison pictures of docs/findings.md.
# Usage: docs/pictures/make.sh   (LOCKSTORM=path/to/lockstorm to skip cargo)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
read -r -a bin <<<"${LOCKSTORM:-cargo run --release --quiet --}"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

shoot() {
    local name=$1
    shift
    local code=0
    "${bin[@]}" run --results "$out/$name" "$@" >"$out/$name.txt" || code=$?
    # 0 valid, 1 invalid, 2 unknown are verdicts; anything else is a failure.
    if [ "$code" -gt 2 ]; then
        cat "$out/$name.txt" >&2
        exit "$code"
    fi
    local svg
    svg=$(ls "$out/$name"/*/latest/timeline.svg)
    local height
    height=$(grep -m1 -o '<svg[^>]*>' "$svg" | sed 's/.* height="\([0-9]*\)".*/\1/')
    chromium --headless --no-sandbox --disable-gpu --hide-scrollbars \
        --window-size="1400,$height" --screenshot="$here/$name.png" "file://$svg" 2>/dev/null
    echo "$name: $(head -1 "$out/$name.txt")"
}

shoot demo-2-pause --config single --nemesis pause --time-limit 15 --seed 3
shoot demo-3-fenced --config fenced --nemesis pause --time-limit 15 --seed 3
shoot demo-4-plain-del --config unsafe-del --nemesis none --time-limit 15 --seed 3 \
    --work-ms 2500 --no-validity-check
shoot demo-5-slow-work --config single --nemesis none --time-limit 15 --seed 3 \
    --work-ms 2500 --no-validity-check
shoot readme-redlock-pause --config redlock --nemesis pause --seed 751138
# Its explain page: the header, the contents, and the worst chain with its
# slice of the timeline.
page=$(ls "$out"/readme-redlock-pause/*/latest/explain.html)
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars \
    --window-size=1200,1500 --screenshot="$here/readme-explain.png" "file://$page" 2>/dev/null
shoot redlock-clock --config redlock --nemesis clock --time-limit 20 --seed 1
shoot replicated-failover --config replicated --nemesis failover --time-limit 30 --seed 1

# The matrix draws its own comparison.png.
"${bin[@]}" matrix --configs pg-row-lock,pg-advisory,pg-advisory-fenced \
    --nemeses none,pause,crash,kill,pause-node,terminate-session --runs 2 \
    --time-limit 15 --seed 1 --jobs 3 --results "$out/postgres-matrix" >"$out/postgres-matrix.txt"
cp "$out"/postgres-matrix/matrix-*/comparison.png "$here/postgres-matrix.png"
echo "postgres-matrix: $(tail -1 "$out/postgres-matrix.txt")"

"${bin[@]}" matrix --configs cluster,cluster-fenced,replicated \
    --nemeses none,pause,kill,pause-node,failover,manual-failover,takeover,partition,clock \
    --runs 3 --seed 1 --time-limit 24 --jobs 6 --results "$out/cluster-matrix" >"$out/cluster-matrix.txt"
cp "$out"/cluster-matrix/matrix-*/comparison.png "$here/cluster-matrix.png"
echo "cluster-matrix: $(tail -1 "$out/cluster-matrix.txt")"
