"""The one progress style: plain lines off a terminal, a rich bar on one."""

from __future__ import annotations

import io

from parpo_core.progress import step_progress


def test_off_a_terminal_each_step_is_one_line_with_the_count_and_the_info():
    out = io.StringIO()
    advance = step_progress("policy updates", 3, start=1, stream=out)
    advance("pref 0.5")
    advance("pref 0.6")
    advance(None)
    lines = out.getvalue().splitlines()
    assert [ln.split("  ")[:2] for ln in lines] == [
        ["policy updates 2/3", "pref 0.5"],
        ["policy updates 3/3", "pref 0.6"],
    ]
    assert "\r" not in out.getvalue() and all(ln.endswith("s") for ln in lines)  # elapsed seconds last
    unbounded = io.StringIO()
    step = step_progress("reward evaluations", None, stream=unbounded)
    step("loss 1.0")
    assert unbounded.getvalue().startswith("reward evaluations 1  loss 1.0  ")


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_it_is_a_rich_bar_that_ends_at_the_total():
    out = Terminal()
    advance = step_progress("policy updates", 2, stream=out)
    advance("pref 0.5")
    advance("pref 0.7")
    advance(None)
    text = out.getvalue()
    assert "policy updates" in text and "2/2" in text and "pref 0.7" in text
