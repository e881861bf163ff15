"""The id rule (``parpo_core.limits``, shared with the server's API) at ingest.

Every id column is trimmed of white space at both ends (counted: ``ids_trimmed``), and a row
whose id then holds a control character or is longer than ``ID_MAX_CHARS`` is rejected with
the rule's reason, worded as ``id_problem``. A cheap gate runs on every chunk; the rule proper
only on chunks where the gate finds something. Datasets record the rule's version
(``ID_RULE_VERSION``); ``check_id_rule`` refuses to mix versions in one dataset.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import polars as pl

from parpo_core.errors import DataError
from parpo_core.limits import ID_FORBIDDEN, ID_MAX_CHARS, ID_RULE_VERSION, id_problem

if TYPE_CHECKING:
    from data_pipelines.dataset import Dataset

TRIMMED = "__trimmed"  # ids of the row trimmed of white space at their ends

#: The id columns the rule applies to.
ID_COLUMNS = ("user_id", "item_id", "request_id", "session_id")
#: ``ID_FORBIDDEN``'s characters, listed: a multi-substring search (Aho-Corasick) costs about
#: half a regex per id on the fast path. Every one is below U+0100 (see ``id_checks``).
ID_FORBIDDEN_CHARS = [chr(i) for i in range(0x100) if re.fullmatch(ID_FORBIDDEN, chr(i))]


def id_suspect(col: str) -> pl.Expr:
    """True where the id rule would trim or reject ``col``'s value (empty, white space at an end,
    a forbidden character, too long): the gate before the rule proper, which runs only on
    chunks where it is true somewhere."""
    c = pl.col(col)
    n = c.str.len_bytes()
    return (
        c.str.contains_any(ID_FORBIDDEN_CHARS)
        | (c.str.strip_chars().str.len_bytes() != n)
        | (n == 0)
        | ((n > ID_MAX_CHARS) & (c.str.len_chars() > ID_MAX_CHARS))
    ).fill_null(False)


def id_checks(col: str) -> list[tuple[pl.Expr, pl.Expr]]:
    """The id rule's rejections for a (trimmed) id column, as ``common_checks`` pairs, worded as
    ``parpo_core.limits.id_problem`` (which the API uses). Every forbidden character is below
    U+0100 (a test checks it), so its code point is the last byte of its UTF-8 form."""
    c = pl.col(col)
    n_chars = c.str.len_chars()
    code = c.str.extract(ID_FORBIDDEN, 0).str.encode("hex").str.tail(2).str.to_uppercase()
    at = c.str.replace(f"(?s){ID_FORBIDDEN}.*", "").str.len_chars()
    return [
        (
            n_chars > ID_MAX_CHARS,
            pl.format(f"{col} is longer than {ID_MAX_CHARS} characters ({{}})", n_chars),
        ),
        (
            c.str.contains(ID_FORBIDDEN),
            pl.format(f"{col} holds the control character U+00{{}} at {{}}", code, at),
        ),
    ]


def apply_id_rule(rows: pl.DataFrame) -> tuple[pl.DataFrame, list[tuple[pl.Expr, pl.Expr]]]:
    """Trim white space (Unicode ``White_Space``, tab included) from both ends of every id
    (``TRIMMED`` counts the ids trimmed per row; an id that was only white space becomes null)
    and return the id checks for ``failing_lines``. A chunk with nothing the rule could act on
    (nearly every chunk) is returned as it is, with no checks: the gate costs a substring search, a trim and a length per id."""
    cols = [c for c in ID_COLUMNS if c in rows.columns and rows.schema[c] == pl.String]
    if not cols or not rows.select(pl.any_horizontal(id_suspect(c) for c in cols).any()).item():
        return rows, []
    trimmed = {c: pl.col(c).str.strip_chars() for c in cols}
    rows = rows.with_columns(
        pl.sum_horizontal(
            (t != pl.col(c)).fill_null(False).cast(pl.UInt32) for c, t in trimmed.items()
        ).alias(TRIMMED),
        *(pl.when(t.str.len_bytes() > 0).then(t).alias(c) for c, t in trimmed.items()),
    )
    return rows, [check for c in cols for check in id_checks(c)]


def check_id_rule(ds: Dataset) -> None:
    """Refuse to add ids under this release's id rule to ``ds`` (an append, or a dataset sharing
    its id maps) when ``ds`` was ingested under another: the same id could then be two (one
    trimmed, one not), or rows the rule rejects could sit beside rows it accepts.

    A dataset of an earlier release records no rule. It is taken to follow this one when every
    id in it (id maps, request and session ids) already does, since then nothing maps
    differently, and as version 0 otherwise."""
    version = ds.manifest.get("id_rule_version")
    example = ""
    if version is None:
        bad = _id_breaking_rule(ds)
        version = 0 if bad else ID_RULE_VERSION
        if bad:
            col, value = bad
            shown = repr(value if len(value) <= 40 else value[:40] + "...")
            example = f" (e.g. {col} {shown} {id_problem(value) or 'breaks it'})"
    if version != ID_RULE_VERSION:
        raise DataError(
            f"{ds.root}: ids were ingested under id rule version {version}{example}, this parpo applies "
            f"version {ID_RULE_VERSION}; ingest into a new --out (re-ingest the earlier sources there too)"
        )


def _id_breaking_rule(ds: Dataset) -> tuple[str, str] | None:
    """(column, value) of one id in ``ds`` that the id rule would trim or reject, or None."""
    frames = {
        "user_id": ds.idmap("users").lazy().select(pl.col("id").alias("user_id")),
        "item_id": ds.idmap("items").lazy().select(pl.col("id").alias("item_id")),
        **{c: ds.interactions().select(c) for c in ID_COLUMNS if c not in ("user_id", "item_id")},
    }
    for col, lf in frames.items():
        hit = lf.filter(id_suspect(col)).head(1).collect()
        if hit.height:
            return col, hit[col][0]
    return None
