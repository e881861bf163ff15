"""Constrained decoding for the ``hf`` engine: token masks that keep every generated tool call a
valid action (``policy.constrained_decoding``).

A small incremental checker of JSON against the action JSON Schema (``action_json_schema()``,
compiled once into ``Str``/``Num``/``Nullable``/``Arr``/``Obj``/``Choice`` nodes): a *state* is
the stack of open values after some text, ``step(state, ch)`` the state after one more
character (None: no valid action starts so), ``remaining(state)`` the fewest characters that
complete a valid action from it (exact; ``INF``: none). ``ToolCallConstraint`` lifts it to
tokens: ``allowed(state, left)`` [V] bool marks the tokens whose text keeps a valid prefix *and*
leaves a completion that fits in the turn's ``left`` tokens (the budget guard: the completion
counts one token per character, so every character it may need has a one-character token, which
the constructor checks); a complete action allows only the stop tokens. So a turn ends with a
complete action within its budget whatever the model's weights; a state with no allowed token
(a budget shorter than the shortest action) allows only the stop tokens: an empty, invalid call.

What it accepts is a subset of the schema's language, chosen to keep the checker small:
``tool`` is the first key (the discriminator picks the object at once), every key at most once,
no escapes in strings, numbers without exponent, and ``price_min <= price_max`` (``ORDERED``:
the ``Constraints`` validator the schema cannot say). Strings are not checked against the
catalogue: an unknown category or item id is still the env's to reject (an invalid call or an
unknown item), as without the constraint.

Log-probs: the engine samples from the masked distribution and reports its log-probs; the
trainer applies the same masks (``turn_masks`` replays a turn's tokens from its budget), so PPO
ratios compare like with like.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from functools import lru_cache
from typing import Any

import numpy as np

from parpo.env.schema import action_json_schema
from parpo_core.errors import UserError

#: Unreachable: a state (or a value) that no text completes.
INF = 1 << 30
WS = frozenset(" \t\n\r")
DIGITS = frozenset("0123456789")
#: (a, b): when an object has both, a <= b (``Constraints._ordered``, a model validator).
ORDERED: tuple[tuple[str, str], ...] = (("price_min", "price_max"),)
#: Schema keywords that only annotate; any keyword neither here nor understood is refused.
ANNOTATIONS = frozenset({"title", "description", "default", "$schema", "$id", "version", "examples", "$defs"})
UNDERSTOOD = frozenset({"type", "const", "enum", "anyOf", "oneOf", "discriminator", "$ref", "properties",
                        "required", "additionalProperties", "items", "minItems", "maxItems", "minimum",
                        "maximum"})  # fmt: skip
#: Most digits a number's completion may append (integer and fraction parts alike).
MAX_DIGITS = 20
#: States whose token options are kept (least recently computed dropped first).
OPTIONS_CACHE = 4096


# -- the schema as nodes ----------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class Str:
    """A string; ``options``: the allowed values (enum, const), None: any."""

    options: tuple[str, ...] | None


@dataclass(frozen=True, eq=False)
class Num:
    integer: bool
    lo: Fraction
    hi: Fraction | None


@dataclass(frozen=True, eq=False)
class Nullable:
    inner: Any


@dataclass(frozen=True, eq=False)
class Arr:
    items: Any
    min_items: int
    max_items: int


@dataclass(frozen=True, eq=False)
class Obj:
    props: dict[str, Any]
    required: frozenset[str]
    ordered: tuple[tuple[str, str], ...]


@dataclass(frozen=True, eq=False)
class Choice:
    """``oneOf`` objects told apart by the string ``key`` (the discriminator), written first."""

    key: str
    options: dict[str, Obj]
    tag: Str


Node = Str | Num | Nullable | Arr | Obj | Choice


def compile_schema(schema: dict[str, Any], ordered: Sequence[tuple[str, str]] = ORDERED) -> Node:
    """The nodes of a JSON Schema in the subset the action schema uses; another keyword is a
    ``ValueError`` naming it (so a schema change cannot silently pass invalid calls)."""
    defs = schema.get("$defs", {})
    memo: dict[str, Node] = {}

    def node(s: dict[str, Any]) -> Node:
        unknown = set(s) - ANNOTATIONS - UNDERSTOOD
        if unknown:
            raise ValueError(
                f"constrained decoding does not support the schema keyword {sorted(unknown)[0]!r}"
            )
        if "$ref" in s:
            name = s["$ref"].removeprefix("#/$defs/")
            if name not in memo:
                memo[name] = node(defs[name])
            return memo[name]
        if "oneOf" in s:
            key = s.get("discriminator", {}).get("propertyName")
            if key is None:
                raise ValueError("constrained decoding needs a discriminator on oneOf")
            options: dict[str, Obj] = {}
            for sub in s["oneOf"]:
                o = node(sub)
                tag = o.props.get(key) if isinstance(o, Obj) else None
                if not isinstance(tag, Str) or tag.options is None or len(tag.options) != 1:
                    raise ValueError(f"constrained decoding needs a const {key!r} in every oneOf object")
                options[tag.options[0]] = o
            return Choice(key, options, Str(tuple(options)))
        if "anyOf" in s:
            rest = [x for x in s["anyOf"] if x.get("type") != "null"]
            if len(rest) != 1 or len(s["anyOf"]) != 2:
                raise ValueError("constrained decoding supports anyOf only as [X, null]")
            return Nullable(node(rest[0]))
        if "const" in s or "enum" in s:
            values = [s["const"]] if "const" in s else list(s["enum"])
            if not all(isinstance(v, str) for v in values):
                raise ValueError("constrained decoding supports string enums and consts only")
            return Str(tuple(values))
        t = s.get("type")
        if t == "string":
            return Str(None)
        if t in ("integer", "number"):
            lo = s.get("minimum")
            if lo is None or lo < 0:
                raise ValueError("constrained decoding supports numbers with a minimum >= 0 only")
            hi = s.get("maximum")
            return Num(t == "integer", Fraction(str(lo)), None if hi is None else Fraction(str(hi)))
        if t == "array":
            return Arr(node(s["items"]), int(s.get("minItems", 0)), int(s.get("maxItems", INF)))
        if t == "object":
            props = {k: node(v) for k, v in s.get("properties", {}).items()}
            pairs = tuple((a, b) for a, b in ordered if a in props and b in props)
            return Obj(props, frozenset(s.get("required", ())), pairs)
        raise ValueError(f"constrained decoding does not support the schema type {t!r}")

    return node(schema)


# -- states: the stack of open values ---------------------------------------------------------
START, KEY, COLON, VALUE, AFTER, COMMA = range(6)


@dataclass(frozen=True)
class ValueF:
    """A value of ``node`` is expected (whitespace first is fine); ``lo``/``hi``: bounds a sibling
    puts on a number (``ORDERED``)."""

    node: Any
    lo: Fraction | None = None
    hi: Fraction | None = None


@dataclass(frozen=True)
class StrF:
    node: Str
    text: str  # typed so far (enum strings only; a free string keeps "")


@dataclass(frozen=True)
class NumF:
    node: Num
    text: str
    lo: Fraction
    hi: Fraction | None


@dataclass(frozen=True)
class LitF:
    rest: str  # what is left of ``null``


@dataclass(frozen=True)
class ObjF:
    node: Obj | Choice
    phase: int
    seen: frozenset[str] = frozenset()
    key: str = ""  # the key being typed (KEY) or whose value comes (COLON, VALUE)
    nums: tuple[tuple[str, Fraction], ...] = ()  # numbers given so far (for ``ORDERED``)


@dataclass(frozen=True)
class ArrF:
    node: Arr
    phase: int
    n: int = 0


State = tuple[Any, ...]
#: A complete action: nothing more may follow.
DONE: State = ()


def initial(root: Node) -> State:
    return (ValueF(root),)


def _bounds(node: Num, lo: Fraction | None, hi: Fraction | None) -> tuple[Fraction, Fraction | None]:
    low = node.lo if lo is None else max(node.lo, lo)
    high = node.hi if hi is None else hi if node.hi is None else min(node.hi, hi)
    return low, high


def _sibling_bounds(obj: Obj, key: str, nums: tuple[tuple[str, Fraction], ...]) -> tuple[Any, Any]:
    given = dict(nums)
    lo = next((given[a] for a, b in obj.ordered if b == key and a in given), None)
    hi = next((given[b] for a, b in obj.ordered if a == key and b in given), None)
    return lo, hi


def _keys(f: ObjF) -> tuple[str, ...]:
    """Keys the object may still take (with a completable value)."""
    if isinstance(f.node, Choice):
        return (f.node.key,) if not f.seen else ()
    return tuple(k for k in f.node.props if k not in f.seen and _key_cost(f.node, k, f.nums) < INF)


def _prop(node: Obj | Choice, key: str) -> Any:
    return node.tag if isinstance(node, Choice) else node.props[key]


def _complete(below: State, value: Any) -> State:
    """The state once the value on top of ``below`` is complete."""
    if not below:
        return DONE
    p, rest = below[-1], below[:-1]
    if isinstance(p, ArrF):
        return (*rest, ArrF(p.node, AFTER, p.n + 1))
    if isinstance(p.node, Choice):
        return (*rest, ObjF(p.node.options[value], AFTER, frozenset({p.key})))
    nums = (*p.nums, (p.key, value)) if isinstance(value, Fraction) else p.nums
    return (*rest, ObjF(p.node, AFTER, p.seen | {p.key}, "", nums))


def _value(below: State, f: ValueF, ch: str) -> State | None:
    if ch in WS:
        return (*below, f)
    node = f.node
    if isinstance(node, Nullable):
        if ch == "n":
            return (*below, LitF("ull"))
        return _value(below, ValueF(node.inner, f.lo, f.hi), ch)
    if isinstance(node, Str):
        return (*below, StrF(node, "")) if ch == '"' else None
    if isinstance(node, Num):
        lo, hi = _bounds(node, f.lo, f.hi)
        ok = ch in DIGITS and num_rest(ch, node.integer, lo, hi) < INF
        return (*below, NumF(node, ch, lo, hi)) if ok else None
    if isinstance(node, Obj | Choice):
        return (*below, ObjF(node, START)) if ch == "{" else None
    return (*below, ArrF(node, START)) if ch == "[" else None


def _obj(below: State, f: ObjF, ch: str) -> State | None:
    if f.phase == KEY:
        if ch == '"':
            return (*below, replace(f, phase=COLON)) if f.key in _keys(f) else None
        if ch == "\\" or ch < " ":
            return None
        key = f.key + ch
        return (*below, replace(f, key=key)) if any(k.startswith(key) for k in _keys(f)) else None
    if ch in WS:
        return (*below, f)
    if ch == '"' and f.phase in (START, COMMA) and _keys(f):
        return (*below, replace(f, phase=KEY, key=""))
    if ch == "}" and f.phase in (START, AFTER) and isinstance(f.node, Obj) and f.node.required <= f.seen:
        return _complete(below, None)
    if ch == "," and f.phase == AFTER and _keys(f):
        return (*below, replace(f, phase=COMMA, key=""))
    if ch == ":" and f.phase == COLON:
        lo, hi = _sibling_bounds(f.node, f.key, f.nums) if isinstance(f.node, Obj) else (None, None)
        return (*below, replace(f, phase=VALUE), ValueF(_prop(f.node, f.key), lo, hi))
    return None


def _arr(below: State, f: ArrF, ch: str) -> State | None:
    if ch in WS:
        return (*below, f)
    if ch == "]" and (
        f.phase == START and f.node.min_items == 0 or f.phase == AFTER and f.n >= f.node.min_items
    ):
        return _complete(below, None)
    if ch == "," and f.phase == AFTER and f.n < f.node.max_items:
        return (*below, replace(f, phase=VALUE), ValueF(f.node.items))
    if f.phase == START and f.node.max_items > 0:
        return _value((*below, replace(f, phase=VALUE)), ValueF(f.node.items), ch)
    return None


def step(state: State, ch: str) -> State | None:
    """The state after ``ch`` (None: no valid action continues so)."""
    if not state:
        return None
    top, below = state[-1], state[:-1]
    if isinstance(top, ValueF):
        return _value(below, top, ch)
    if isinstance(top, StrF):
        opts = top.node.options
        if ch == '"':
            return _complete(below, top.text) if opts is None or top.text in opts else None
        if ch == "\\" or ch < " ":
            return None
        if opts is None:
            return state
        text = top.text + ch
        return (*below, StrF(top.node, text)) if any(o.startswith(text) for o in opts) else None
    if isinstance(top, NumF):
        if ch in DIGITS or ch == ".":
            text = top.text + ch
            return (
                (*below, replace(top, text=text))
                if num_rest(text, top.node.integer, top.lo, top.hi) < INF
                else None
            )
        if num_rest(top.text, top.node.integer, top.lo, top.hi) != 0:
            return None
        done = _complete(below, Fraction(top.text))
        return step(done, ch)
    if isinstance(top, LitF):
        if ch != top.rest[0]:
            return None
        return _complete(below, None) if len(top.rest) == 1 else (*below, LitF(top.rest[1:]))
    if isinstance(top, ObjF):
        return _obj(below, top, ch)
    return _arr(below, top, ch)


def feed(state: State | None, text: str) -> State | None:
    for ch in text:
        if state is None:
            return None
        state = step(state, ch)
    return state


# -- fewest characters to a complete action ---------------------------------------------------
def _grid_hit(
    a: Fraction | int, b: Fraction | int, unit: Fraction, lo: Fraction, hi: Fraction | None
) -> bool:
    """Some multiple of ``unit`` lies in [a, b] and in [lo, hi]."""
    low, high = max(a, lo), b if hi is None else min(b, hi)
    first = -((-low) // unit) * unit
    return first <= high


@lru_cache(maxsize=1 << 16)
def num_rest(text: str, integer: bool, lo: Fraction, hi: Fraction | None) -> int:
    """Fewest characters that make the number prefix ``text`` a complete number in [lo, hi]
    (``(0|[1-9][0-9]*)(.[0-9]+)?``, no fraction for an integer); ``INF`` when none does."""
    ip, dot, fp = text.partition(".")
    if any(c not in DIGITS for c in ip + fp) or dot and (integer or not ip) or len(ip) > 1 and ip[0] == "0":
        return INF
    if dot:  # more fraction digits g: values base + m / 10^(len(fp) + g), below base + 10^-len(fp)
        base = Fraction(ip + "." + fp) if fp else Fraction(int(ip))
        for g in range(0 if fp else 1, MAX_DIGITS + 1):
            unit = Fraction(1, 10 ** (len(fp) + g))
            if _grid_hit(base, base + Fraction(1, 10 ** len(fp)) - unit, unit, lo, hi):
                return g
        return INF
    best = INF
    for k in [0] if ip == "0" else range(0 if ip else 1, MAX_DIGITS + 1):  # k more integer digits
        if k >= best:
            break
        if ip:
            a = int(ip) * 10**k
            b = a + 10**k - 1
        else:
            a, b = (0, 9) if k == 1 else (10 ** (k - 1), 10**k - 1)
        if hi is not None and a > hi:
            break
        if _grid_hit(a, b, Fraction(1), lo, hi):
            best = k
            break
        for f in range(1, 0 if integer else MAX_DIGITS + 1):  # then "." and f fraction digits
            if k + 1 + f >= best:
                break
            unit = Fraction(1, 10**f)
            if _grid_hit(a, b + 1 - unit, unit, lo, hi):
                best = k + 1 + f
                break
    return best


@lru_cache(maxsize=1 << 14)
def min_value(node: Any, lo: Fraction | None = None, hi: Fraction | None = None) -> int:
    """Fewest characters of a complete value of ``node``."""
    if isinstance(node, Str):
        return 2 + (0 if node.options is None else min(map(len, node.options)))
    if isinstance(node, Num):
        return num_rest("", node.integer, *_bounds(node, lo, hi))
    if isinstance(node, Nullable):
        return min(4, min_value(node.inner, lo, hi))
    if isinstance(node, Arr):
        return 2 if node.min_items == 0 else 1 + node.min_items * (min_value(node.items) + 1)
    if isinstance(node, Obj):
        return 1 + _obj_start(node)
    return 1 + len(node.key) + 3 + 1 + _tag_min(node, "")  # {"tool":" then the tag's rest


def _key_cost(obj: Obj, key: str, nums: tuple[tuple[str, Fraction], ...]) -> int:
    """``"key":value`` at its shortest."""
    return len(key) + 3 + min_value(obj.props[key], *_sibling_bounds(obj, key, nums))


def _obj_after(obj: Obj, seen: frozenset[str], nums: tuple[tuple[str, Fraction], ...]) -> int:
    """After a value: the missing required keys (each after a comma), then ``}``."""
    return sum(1 + _key_cost(obj, k, nums) for k in obj.required - seen) + 1


def _obj_start(obj: Obj) -> int:
    """After ``{``: the required keys, comma-separated, then ``}``."""
    if not obj.required:
        return 1
    return sum(_key_cost(obj, k, ()) for k in obj.required) + len(obj.required)


def _tag_min(choice: Choice, typed: str) -> int:
    """From inside the tag's string (``typed`` so far): the rest of the tag, its closing quote,
    and the chosen object's shortest close."""
    costs = [len(o) - len(typed) + 1 + _obj_after(obj, frozenset({choice.key}), ())
             for o, obj in choice.options.items() if o.startswith(typed)]  # fmt: skip
    return min(costs, default=INF)


def _finish(f: Any) -> int:
    """Fewest characters that complete the top frame ``f`` (its closing bracket included)."""
    if isinstance(f, ValueF):
        return min_value(f.node, f.lo, f.hi)
    if isinstance(f, StrF):
        if f.node.options is None:
            return 1
        return min((len(o) - len(f.text) for o in f.node.options if o.startswith(f.text)), default=INF) + 1
    if isinstance(f, NumF):
        return num_rest(f.text, f.node.integer, f.lo, f.hi)
    if isinstance(f, LitF):
        return len(f.rest)
    if isinstance(f, ArrF):
        return _arr_after(f.node, f.n) if f.phase == AFTER else min_value(f.node) - 1
    node = f.node
    if isinstance(node, Choice):  # START, KEY or COLON: the tag is still to come
        head = {START: len(node.key) + 3, KEY: len(node.key) - len(f.key) + 2, COLON: 1}[f.phase]
        return head + 1 + _tag_min(node, "")
    if f.phase == START:
        return _obj_start(node)
    if f.phase == AFTER:
        return _obj_after(node, f.seen, f.nums)
    if f.phase == COMMA:
        missing = node.required - f.seen
        if missing:
            return sum(_key_cost(node, k, f.nums) for k in missing) + len(missing)
        return min((_key_cost(node, k, f.nums) for k in _keys(f)), default=INF) + 1
    if f.phase == KEY:
        return min(
            (len(k) - len(f.key) + 2 + min_value(node.props[k], *_sibling_bounds(node, k, f.nums))
             + _obj_after(node, f.seen | {k}, f.nums) for k in _keys(f) if k.startswith(f.key)),
            default=INF,
        )  # fmt: skip
    # COLON
    lo, hi = _sibling_bounds(node, f.key, f.nums)
    return 1 + min_value(node.props[f.key], lo, hi) + _obj_after(node, f.seen | {f.key}, f.nums)


def _arr_after(node: Arr, n: int) -> int:
    return 1 if n >= node.min_items else (node.min_items - n) * (1 + min_value(node.items)) + 1


def _rest(f: Any) -> int:
    """What a frame below the top (its value on top of it) needs once that value is complete."""
    if isinstance(f, ArrF):
        return _arr_after(f.node, f.n + 1)
    # An object waiting for a value; a pending number's own bound on a sibling is not counted
    # (exact while ``ORDERED`` keys are optional, as in the action schema).
    return _obj_after(f.node, f.seen | {f.key}, f.nums)


@lru_cache(maxsize=1 << 16)
def remaining(state: State) -> int:
    """Fewest characters that complete a valid action from ``state`` (``INF``: none)."""
    if not state:
        return 0
    top = state[-1]
    if len(state) >= 2 and isinstance(state[-2], ObjF) and isinstance(state[-2].node, Choice):
        typed = top.text if isinstance(top, StrF) else ""
        total = (0 if isinstance(top, StrF) else 1) + _tag_min(state[-2].node, typed)
        frames = state[:-2]
    else:
        total, frames = _finish(top), state[:-1]
    total += sum(_rest(f) for f in frames)
    return min(total, INF)


def prefix_error(prefix: str, root: Node | None = None) -> str | None:
    """Why the call prefix cannot start a valid action (None: it can)."""
    state = feed(initial(root or compile_schema(action_json_schema())), prefix)
    if state is None or remaining(state) >= INF:
        return (f"policy.call_prefix {prefix!r} cannot start a valid action; constrained decoding needs "
                "the start of one (or no prefix)")  # fmt: skip
    return None


# -- tokens --------------------------------------------------------------------------------
def token_texts(tokenizer: Any, vocab_size: int) -> list[str | None]:
    """[vocab_size] each token's text (None: never generated inside a call: special and added
    tokens, ids past the tokenizer, tokens that decode to nothing or to a partial character).
    SentencePiece's word-initial ``▁`` is kept as the space it stands for mid-text."""
    n = min(len(tokenizer), vocab_size)
    added = set(tokenizer.all_special_ids) | set(tokenizer.get_added_vocab().values())
    pieces = tokenizer.convert_ids_to_tokens(list(range(n)))
    decoded = tokenizer.batch_decode([[i] for i in range(n)], skip_special_tokens=False,
                                     clean_up_tokenization_spaces=False)  # fmt: skip
    out: list[str | None] = [None] * vocab_size
    for i in range(n):
        s = decoded[i]
        if i in added or not s or "\ufffd" in s:
            continue
        if isinstance(pieces[i], str) and pieces[i].startswith("\u2581") and not s.startswith(" "):
            s = " " + s
        out[i] = s
    return out


def _special(s: str) -> bool:
    return any(c == '"' or c == "\\" or c < " " for c in s)


class ToolCallConstraint:
    """Token masks over a vocabulary of ``texts`` [V] (``token_texts``) that keep each turn a
    valid action within its budget; ``stop_ids`` end a turn and are allowed only after a
    complete action; ``prefix``: the call prefix every turn starts from (forced, not sampled)."""

    def __init__(self, texts: Sequence[str | None], stop_ids: Sequence[int], prefix: str = "",
                 schema: dict[str, Any] | None = None) -> None:  # fmt: skip
        self.root = compile_schema(schema or action_json_schema())
        self.size = len(texts)
        self.texts = list(texts)
        self.stop = np.array(sorted(set(stop_ids)), dtype=np.int64)
        self.stop_set = frozenset(int(i) for i in self.stop)
        error = prefix_error(prefix, self.root)
        if error:
            raise UserError(error)
        self.start: State = feed(initial(self.root), prefix)  # type: ignore[assignment]
        live = [(s, i) for i, s in enumerate(self.texts) if s is not None and i not in self.stop_set]
        self._all = sorted(live)
        self._special = sorted((s, i) for s, i in live if _special(s))
        self._plain = np.zeros(self.size, dtype=bool)
        self._plain[[i for s, i in live if not _special(s)]] = True
        singles = {s for s, _ in live if len(s) == 1}
        lacking = sorted(set(alphabet(self.root)) - singles)
        if lacking:
            raise UserError(f"constrained decoding needs a one-character token for each character a call may "
                            f"need; this tokenizer has none for {''.join(lacking)!r}")  # fmt: skip
        self._options: dict[State, tuple[np.ndarray, np.ndarray, int]] = {}

    # -- per state ---------------------------------------------------------------------
    def _walk(self, state: State, entries: list[tuple[str, int]], lo: int, hi: int, depth: int,
              out: list[tuple[int, State]]) -> None:  # fmt: skip
        """Tokens ``entries[lo:hi]`` (sorted, sharing their first ``depth`` characters, which led
        to ``state``): each whose whole text keeps a valid prefix, with the state it ends in."""
        i = lo
        while i < hi and len(entries[i][0]) == depth:
            out.append((entries[i][1], state))
            i += 1
        while i < hi:
            s = entries[i][0]
            c = s[depth]
            j = (
                bisect.bisect_left(entries, (s[:depth] + chr(ord(c) + 1),), i, hi)
                if ord(c) < 0x10FFFF
                else hi
            )
            nxt = step(state, c)
            if nxt is not None:
                self._walk(nxt, entries, i, j, depth + 1, out)
            i = j

    def options(self, state: State) -> tuple[np.ndarray, np.ndarray, int]:
        """Tokens that keep a valid prefix from ``state``: ids [K] int64 and the ``remaining``
        [K] after each; inside a free string also the cost after any *plain* token (no quote,
        backslash or control character: it leaves the state as it is), else ``INF``."""
        hit = self._options.get(state)
        if hit is not None:
            return hit
        top = state[-1]
        free = isinstance(top, StrF) and top.node.options is None
        entries = self._special if free else self._all
        found: list[tuple[int, State]] = []
        self._walk(state, entries, 0, len(entries), 0, found)
        ids = np.array([i for i, _ in found], dtype=np.int64)
        costs = np.array([remaining(s) for _, s in found], dtype=np.int64)
        out = (ids, costs, remaining(state) if free else INF)
        if len(self._options) >= OPTIONS_CACHE:
            self._options.pop(next(iter(self._options)))
        self._options[state] = out
        return out

    def stop_mask(self) -> np.ndarray:
        m = np.zeros(self.size, dtype=bool)
        m[self.stop] = True
        return m

    def allowed(self, state: State | None, left: int) -> np.ndarray:
        """[V] bool: the tokens that may come next from ``state`` with ``left`` tokens of the
        turn's budget left (this one included): a valid prefix whose shortest completion fits in
        the rest; after a complete action (or with none allowed) only the stop tokens. ``state``
        None (tokens the constraint did not produce): every token."""
        if state is None:
            return np.ones(self.size, dtype=bool)
        if not state:
            return self.stop_mask()
        ids, costs, plain = self.options(state)
        m = np.zeros(self.size, dtype=bool)
        m[ids[costs <= left - 1]] = True
        if plain <= left - 1:
            m |= self._plain
        return m if m.any() else self.stop_mask()

    def advance(self, state: State | None, token: int) -> State | None:
        """The state after ``token`` (None: it does not continue a valid action)."""
        if state is None or not state:
            return None
        top = state[-1]
        if self._plain[token] and isinstance(top, StrF) and top.node.options is None:
            return state
        text = self.texts[token]
        return None if text is None else feed(state, text)

    def turn_masks(self, tokens: Sequence[int], budget: int) -> np.ndarray:
        """[G, V] bool: the mask each of a turn's tokens [G] was sampled under (the turn's
        ``budget``), replayed from the start state."""
        state: State | None = self.start
        out = []
        for j, t in enumerate(tokens):
            out.append(self.allowed(state, budget - j))
            state = self.advance(state, int(t))
        return np.stack(out) if out else np.zeros((0, self.size), dtype=bool)


def alphabet(root: Node) -> set[str]:
    """Characters a shortest completion may need: structure, digits, ``null`` and the schema's
    keys and string constants."""
    chars = set('{}[]":,.0123456789null')
    seen: set[int] = set()

    def walk(n: Any) -> None:
        if id(n) in seen:
            return
        seen.add(id(n))
        if isinstance(n, Str) and n.options:
            chars.update("".join(n.options))
        elif isinstance(n, Nullable):
            walk(n.inner)
        elif isinstance(n, Arr):
            walk(n.items)
        elif isinstance(n, Obj):
            chars.update("".join(n.props))
            for v in n.props.values():
                walk(v)
        elif isinstance(n, Choice):
            chars.update(n.key)
            walk(n.tag)
            for v in n.options.values():
                walk(v)

    walk(root)
    return chars
