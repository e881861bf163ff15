"""Evaluation: ``evaluate_policy`` and ``compare`` on held-out tasks, ``ope`` from served logs,
``report`` (the jobs of ``parpo policy eval``, ``parpo eval compare|ope|report``). Each result is
also recorded in the evaluated version's add-only ``evals/``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from parpo.evaluation.sample import EvalSample


@dataclass(frozen=True)
class Recorded:
    """An evaluation's ``result`` and the ``evals/`` file of the version it was recorded in."""

    path: Path
    result: dict[str, Any]


@dataclass(frozen=True)
class Report:
    """The offline report: ``html`` (self-contained, with figures) and its markdown ``summary``."""

    html: Path
    summary: Path


def eval_sample(tasks: int | None, full: bool, flags: tuple[str, str] = ("tasks", "full")) -> EvalSample:
    """The held-out tasks evaluated: ``tasks`` per part (warm, cold; a hash-stable sample,
    default 2000), or every task and plan selection with ``full``. ``flags`` name the two
    options in the error."""
    from parpo.evaluation.sample import EvalSample
    from parpo_core.errors import UserError

    if full and tasks is not None:
        raise UserError(f"{flags[0]} and {flags[1]} exclude each other: {flags[1]} evaluates every task")
    if full:
        return EvalSample.full()
    return EvalSample() if tasks is None else EvalSample(warm=tasks, cold=tasks)


def evaluate_policy(
    *,
    registry: str | Path,
    data: str | Path,
    version: str | None = None,
    greedy: bool = True,
    seed: int = 0,
    tasks: int | None = None,
    full: bool = False,
) -> Recorded:
    """Evaluate policy ``version`` (default: production) on the warm and cold held-out tasks of
    the dataset it was trained on, next to the reference agents (and the oracle where the truth
    is known), acting greedily unless ``greedy`` is False (then sampled with ``seed``)."""
    from parpo.evaluation.policy_eval import evaluate_policy as run

    path, result = run(registry, data, version, greedy=greedy, seed=seed, sample=eval_sample(tasks, full))
    return Recorded(path, result)


def compare(
    *,
    registry: str | Path,
    data: str | Path,
    versions: Sequence[str],
    greedy: bool = True,
    seed: int = 0,
    n_boot: int = 1000,
    tasks: int | None = None,
    full: bool = False,
) -> list[Recorded]:
    """Evaluate two or more policy ``versions`` on the same held-out tasks and record, for each,
    its paired differences against the others (mean over tasks, 95% bootstrap interval over
    ``n_boot`` resamples). One ``Recorded`` per version, in the order given."""
    from parpo.evaluation.compare import compare_policies

    paths, results = compare_policies(
        registry, data, versions, greedy=greedy, seed=seed, n_boot=n_boot, sample=eval_sample(tasks, full)
    )
    return [Recorded(p, r) for p, r in zip(paths, results, strict=True)]


def ope(
    *,
    logs: str | Path,
    registry: str | Path,
    version: str,
    explore: float = 1.0,
    samples: int = 64,
    reward: str = "click",
    logging_policies: Sequence[str] | None = None,
    n_boot: int = 500,
    seed: int = 0,
) -> Recorded:
    """Estimate off-policy how policy ``version`` of ``registry``, acting at temperature
    ``explore`` (0: greedy), would do on the requests the server logged: ``logs`` is those logs
    ingested (``ingest(source="parpo-events", ...)``); the reward is the ``reward`` event per
    slot; IPS, SNIPS, DM, DR, SwitchDR, DRos with 95% bootstrap intervals and overlap
    diagnostics (docs/evaluation.md)."""
    from parpo.evaluation.ope.policy import evaluate_served, record_served
    from parpo.policy.bundle import PolicyBundle

    result = evaluate_served(
        logs,
        PolicyBundle.load(registry, version),
        logging_policies=logging_policies,
        reward_event=reward,
        samples=samples,
        temperature=explore,
        n_boot=n_boot,
        seed=seed,
    )
    return Recorded(record_served(registry, logs, result), result)


def report(*, registry: str | Path, out: str | Path, versions: Sequence[str] | None = None) -> Report:
    """Write the offline HTML report and its markdown summary of policy ``versions`` (default:
    every version with a recorded evaluation) into the folder ``out``."""
    from parpo.evaluation.report import write_report

    html, md = write_report(registry, out, versions)
    return Report(html, md)
