"""Scenario YAML: the loader every scenario, ``--set`` value and vLLM config file is
read with (:func:`parse_yaml`), and a bound on what aliases may expand a document to.

An alias (``*name``) stands for the whole list or mapping its anchor (``&name``) marks,
so nine aliases of a list of nine aliases of ... (a "billion laughs" document) is a few
hundred bytes that stands for 9**9 values. Loading it is cheap, as the aliases share
one Python object, but anything that walks the result as a tree (``json.dumps`` of a
sweep's cache key, ``copy.deepcopy``) builds every copy and runs out of memory. The
loaders here and of profile files call :func:`check_aliases` on the composed document
before building it, so such a file is one error naming its line.
"""

from __future__ import annotations

import math
import re
import typing
from typing import Any

import yaml

from sim.errors import ServesimError

# Values that aliases may add to a document beyond those written out. The largest
# shipped scenario holds under 100 values in all, and an alias in a real file repeats
# a lengths block or a class a few times, so this is over a thousand times what a real
# file uses, while a sweep's json.dumps of it still takes milliseconds.
MAX_ALIAS_VALUES = 100_000


class AliasExpansionError(yaml.MarkedYAMLError):
    """Aliases expand the document past :data:`MAX_ALIAS_VALUES`, or an alias sits
    inside the list or mapping it names (a cycle)."""


class _Walk:
    """Each node's size expanded (itself and every value below it, aliases copied out),
    counting the values aliases add as it goes."""

    def __init__(self) -> None:
        self.sizes: dict[int, int] = {}
        self.open: set[int] = set()  # the nodes being walked: one met again is a cycle
        self.added = 0

    def size(self, node: yaml.Node) -> int:
        key = id(node)
        if key in self.open:
            raise AliasExpansionError(
                problem="an alias refers to the list or mapping that holds it (a cycle "
                        "with no end); write the values out", problem_mark=node.start_mark)
        if key in self.sizes:  # a node met again: an alias, which copies its whole tree
            self.added += self.sizes[key]
            if self.added > MAX_ALIAS_VALUES:
                raise AliasExpansionError(
                    problem=f"aliases (*name) expand the document by more than "
                            f"{MAX_ALIAS_VALUES:,} values (the anchor here is copied "
                            "again and again), far beyond what any scenario holds; write "
                            "the repeated parts out or use fewer aliases",
                    problem_mark=node.start_mark)
            return self.sizes[key]
        self.open.add(key)
        if isinstance(node, yaml.MappingNode):
            total = 1 + sum(self.size(k) + self.size(v) for k, v in node.value)
        elif isinstance(node, yaml.SequenceNode):
            total = 1 + sum(self.size(v) for v in node.value)
        else:
            total = 1
        self.open.discard(key)
        self.sizes[key] = total
        return total


def check_aliases(node: yaml.Node) -> None:
    """Raise :class:`AliasExpansionError` (a ``yaml.YAMLError`` marked with the line
    of the anchor being copied) when the composed document ``node`` expands past
    :data:`MAX_ALIAS_VALUES` added values or holds an alias cycle. A document without
    aliases always passes, however long."""
    _Walk().size(node)


_DIGITS = r"[0-9](?:_?[0-9])*"
YAML12_INT = re.compile(rf"^(?:[-+]?{_DIGITS}|0o[0-7]+|0x[0-9a-fA-F]+)$")
YAML12_FLOAT = re.compile(
    rf"^(?:[-+]?(?:\.{_DIGITS}|{_DIGITS}(?:\.(?:{_DIGITS})?)?)(?:[eE][-+]?[0-9]+)?"
    r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$")


# The most digits a whole number servesim reads may have, in YAML and in JSON: no count,
# seed, hash or time needs more than 2**63 (19 digits), Python reads none past 4,300, and
# past 308 one no longer converts to a float. A longer literal is a slip.
MAX_DIGITS = 100


def long_number(digits: int) -> str:
    """The problem with a whole number of ``digits`` digits (past :data:`MAX_DIGITS`)."""
    return (f"a whole number of {digits:,} digits; no value servesim reads needs more "
            f"than {MAX_DIGITS}")


def _construct_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int:
    text = str(loader.construct_scalar(node)).replace("_", "")
    digits = len(text.lstrip("+-"))
    if digits > MAX_DIGITS:
        raise yaml.constructor.ConstructorError(None, None, long_number(digits),
                                                node.start_mark)
    if text.startswith(("0o", "0x")):
        return int(text[2:], 8 if text[1] == "o" else 16)
    return int(text)


def _construct_float(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> float:
    text = str(loader.construct_scalar(node)).replace("_", "").lower()
    if text.endswith(".inf"):
        return -math.inf if text.startswith("-") else math.inf
    return math.nan if text == ".nan" else float(text)


def read_yaml12(loader: Any) -> None:
    """Make the loader class ``loader`` read numbers as YAML 1.2 (and JSON) read them,
    not as PyYAML's YAML 1.1: ``1e9`` and ``5e-1`` are floats (1.1 wants a dot and a
    signed exponent, and leaves them strings), ``010`` is ten (not octal eight), ``0o17``
    is octal, and ``1:30`` or ``0b101`` are strings. Underscores between digits
    (``1_000``) still group them, as in Python."""
    loader.yaml_implicit_resolvers = {
        k: [(tag, rx) for tag, rx in v
            if tag not in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")]
        for k, v in loader.yaml_implicit_resolvers.items()}
    loader.add_implicit_resolver("tag:yaml.org,2002:int", YAML12_INT, list("-+0123456789"))
    loader.add_implicit_resolver("tag:yaml.org,2002:float", YAML12_FLOAT,
                                 list("-+0123456789."))
    loader.add_constructor("tag:yaml.org,2002:int", _construct_int)
    loader.add_constructor("tag:yaml.org,2002:float", _construct_float)


class StrictConstructor(yaml.constructor.SafeConstructor):
    """Construction rules every servesim YAML loader shares: a key given twice in one
    mapping is an error naming its line (PyYAML keeps the last silently), merge keys
    and list or mapping keys are refused, and aliases may not expand the document far
    past what it writes out (:func:`check_aliases`). Mixed into a loader class before
    its PyYAML base, with :func:`read_yaml12` for the number rules."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        """The mapping ``node`` holds, after refusing duplicate, merge and complex keys."""
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise yaml.constructor.ConstructorError(
                    None, None, "merge keys (<<) are not supported: write the keys out",
                    key_node.start_mark)
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, typing.Hashable):
                # A complex key (``? [a, b]``): no servesim key is a list or a mapping.
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} is a {type(key).__name__}; keys are names",
                    key_node.start_mark)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} given twice in one mapping", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_str(self, node: yaml.ScalarNode) -> str:
        """The string ``node`` holds, after refusing half a character: a ``\\uD800`` to
        ``\\uDFFF`` escape in a double-quoted string is one half of a surrogate pair,
        which no UTF-8 output (a printed table, a report, a plot) can write."""
        text = super().construct_yaml_str(node)
        bad = HALF_CHARACTER.search(text)
        if bad is not None:
            raise yaml.constructor.ConstructorError(
                None, None, f"the escape \\u{ord(bad.group()):04x} is half of a UTF-16 "
                "surrogate pair, not a character; write the character itself or its "
                "\\U00XXXXXX escape", node.start_mark)
        return text

    def construct_document(self, node: yaml.Node) -> Any:
        """The document ``node`` holds, once its aliases are known to stay small."""
        check_aliases(node)
        return super().construct_document(node)


# Strings (keys too) are built by the check above; a subclass's loader copies the table.
StrictConstructor.yaml_constructors = {
    **yaml.constructor.SafeConstructor.yaml_constructors,
    "tag:yaml.org,2002:str": StrictConstructor.construct_yaml_str}
# Half of a UTF-16 surrogate pair: a code point no UTF-8 text holds (JSON readers too).
HALF_CHARACTER = re.compile("[\ud800-\udfff]")


class ScenarioLoader(StrictConstructor, yaml.SafeLoader):
    """PyYAML's safe loader with the corrections scenario files need: those of
    :class:`StrictConstructor`, and numbers read as YAML 1.2 (and JSON) read them, not as
    PyYAML's YAML 1.1 (:func:`read_yaml12`)."""


read_yaml12(ScenarioLoader)


def parse_yaml(text: str) -> Any:
    """``text`` parsed with :class:`ScenarioLoader` (raises ``yaml.YAMLError``, also for
    text nested deeper than the parser's recursion can follow)."""
    try:
        return yaml.load(text, Loader=ScenarioLoader)  # noqa: S506 - a SafeLoader subclass
    except RecursionError:
        raise yaml.MarkedYAMLError(problem="lists or mappings nested about 1,000 levels "
                                   "deep, more than a scenario ever needs") from None


def yaml_error(exc: yaml.YAMLError, source: str) -> ServesimError:
    """A one-line error for a file ``source`` that did not parse, naming its line."""
    mark = getattr(exc, "problem_mark", None)
    where = f"line {mark.line + 1}" if mark is not None else None
    problem = getattr(exc, "problem", None) or "invalid YAML"
    if isinstance(exc, AliasExpansionError):  # valid YAML, refused for its size
        return ServesimError(problem, source, where)
    key = _long_key(mark)
    if key:
        return ServesimError(f"invalid YAML: a mapping key of {key:,} characters, more than "
                             f"the {KEY_MAX:,} YAML reads as a plain key (the parser then "
                             f"says: {problem}); shorten the key", source, where)
    return ServesimError(f"invalid YAML: {problem}", source, where)


# PyYAML's longest plain (simple) key: past it, the ':' after a key reads as a stray one.
KEY_MAX = 1024


def _long_key(mark: Any) -> int:
    """The length of the key before the ':' at ``mark`` when it is longer than
    :data:`KEY_MAX` (the reason the parser refused that ':'); else 0."""
    text = getattr(mark, "buffer", None)
    if not isinstance(text, str) or mark.pointer >= len(text) or text[mark.pointer] != ":":
        return 0
    start = text.rfind("\n", 0, mark.pointer) + 1
    before = text[start:mark.pointer]
    for opener in ("{", ",", "["):  # a key in a flow mapping starts after one of these
        before = before.rpartition(opener)[2]
    key = before.strip().removeprefix("- ").strip()
    return len(key) if len(key) > KEY_MAX else 0
