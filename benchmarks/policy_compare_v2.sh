#!/usr/bin/env bash
# PARPO study v2 (issue 17), in the issue's order: every step appends one line per run to
# benchmarks/results/policy_compare_v2.jsonl and skips the runs already there, so the study
# continues where it stopped (a run cut off midway is redone). One process, one torch thread.
#   nice -n 10 benchmarks/policy_compare_v2.sh [WORKDIR]      (WORKDIR: data and runs, /tmp/pc-v2)
set -euo pipefail
cd "$(dirname "$0")/.."
W=${1:-/tmp/pc-v2}
S=(0 1 2 3 4)
pc() { OMP_NUM_THREADS=1 .venv/bin/python benchmarks/policy_compare.py --study 2 --workdir "$W" --seeds "${S[@]}" "$@"; }

pc --setting synthetic-g8 --algos parpo gdpo grpo
pc --setting hetero --algos parpo gdpo grpo
pc --setting hetero --algos parpo gdpo grpo --variant personal-off --override policy.personal_features=false
pc --setting hetero --algos parpo --variant baseline-only --override advantage.anchor_terms=baseline
pc --setting hetero --algos parpo --variant scale-only --override advantage.anchor_terms=scale
pc --setting hetero --algos gdpo --variant gdpo-user --override advantage.estimator=gdpo_user
pc --setting hetero --algos parpo --variant personal-off-baseline-only --override policy.personal_features=false advantage.anchor_terms=baseline
pc --setting hetero --algos parpo --variant personal-off-scale-only --override policy.personal_features=false advantage.anchor_terms=scale
pc --setting drift --algos parpo gdpo grpo
pc --setting ml100k --algos parpo gdpo grpo
{ head -n 4 benchmarks/results/policy_compare_v2.md; .venv/bin/python benchmarks/policy_compare.py --study 2 --summarise; } > "$W/policy_compare_v2.md"
mv "$W/policy_compare_v2.md" benchmarks/results/policy_compare_v2.md  # keeps the file's 4-line header
