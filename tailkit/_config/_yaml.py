"""
Read YAML into plain values while remembering the line of every key and value.

PyYAML's loaders forget where values came from, so this walks the composed node tree itself:
scalars are built by PyYAML's safe constructor, mappings and lists here, and each one's lines
go into the `Report` so that problems can name them. Duplicate keys, which PyYAML would keep
silently (last wins), are problems; merge keys (``<<: *defaults``) work as in PyYAML.
"""

from __future__ import annotations

import re

from typing import TYPE_CHECKING

from tailkit._config._report import Path, Report, show
from tailkit.errors import ConfigError


if TYPE_CHECKING:
    import yaml


# YAML 1.2 (and every user) reads 1e-3 as a number; PyYAML's YAML 1.1 wants 1.0e-3. A plain
# scalar of this shape is taken as the float it looks like.
EXPONENT_FLOAT = re.compile(r"[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)[eE][-+]?[0-9]+")
_COLLECTION_TAGS = ("tag:yaml.org,2002:map", "tag:yaml.org,2002:seq")


def read(text: str, report: Report) -> object:
    """
    Parse one YAML document into dicts, lists and scalars, recording lines in ``report``.

    Args:
        text: The document.
        report: Gets the lines of every field, and problems with keys.

    Returns:
        The document's value; ``None`` for an empty document.

    Raises:
        ConfigError: The text is not valid YAML; the message has the line of the problem.
    """
    import yaml

    loader = None
    try:
        loader = yaml.SafeLoader(text)
        node = loader.get_single_node()
        if node is None:
            return None
        report.lines[()] = (node.start_mark.line + 1, node.start_mark.line + 1)
        return _value(loader, node, (), report, frozenset())
    except yaml.MarkedYAMLError as exc:
        raise ConfigError(_yaml_message(report.source, exc)) from None
    except RecursionError:
        msg = f"{report.source}: the YAML nests too deep (an alias inside itself?): write it out"
        raise ConfigError(msg) from None
    except yaml.reader.ReaderError as exc:
        line = text[: exc.position].count("\n") + 1
        msg = (
            f"{report.source}:{line}: not valid YAML: character {chr(exc.character)!r} is not "
            "allowed in a YAML file: remove it, or write it as an escape in a double-quoted string"
        )
        raise ConfigError(msg) from None
    finally:
        if loader is not None:
            loader.dispose()


def _yaml_message(source: str, exc: yaml.MarkedYAMLError) -> str:
    import yaml

    kind = (
        "cannot read value"
        if isinstance(exc, yaml.constructor.ConstructorError)
        else "not valid YAML"
    )
    mark = exc.problem_mark or exc.context_mark
    line = mark.line + 1 if mark is not None else 1
    problem = exc.problem or "cannot parse"
    if exc.context and exc.context_mark is not None and exc.context_mark is not mark:
        problem += f" ({exc.context} at line {exc.context_mark.line + 1})"
    if "'\\t'" in problem:
        problem += ": indent with spaces, not tabs"
    return f"{source}:{line}: {kind}: {problem}"


def _value(
    loader: yaml.SafeLoader, node: yaml.Node, path: Path, report: Report, active: frozenset[int]
) -> object:
    import yaml

    if isinstance(node, yaml.ScalarNode):
        value = loader.construct_object(node)
        if isinstance(value, str) and node.style is None and EXPONENT_FLOAT.fullmatch(value):
            return float(value)
        return value
    if node.tag not in _COLLECTION_TAGS:
        tag = node.tag.replace("tag:yaml.org,2002:", "!!")
        report.add(path, f"YAML tag {tag} is not allowed in a plan: remove it")
        return None
    if id(node) in active:
        report.add(path, "refers to itself through an alias: write the value out")
        return None
    active |= {id(node)}
    if isinstance(node, yaml.SequenceNode):
        items = []
        for i, item in enumerate(node.value):
            line = item.start_mark.line + 1
            report.lines[(*path, i)] = (line, line)
            items.append(_value(loader, item, (*path, i), report, active))
        return items
    if isinstance(node, yaml.MappingNode):
        return _mapping(loader, node, path, report, active)
    return None  # the composer makes no other kind of node


def _mapping(
    loader: yaml.SafeLoader,
    node: yaml.MappingNode,
    path: Path,
    report: Report,
    active: frozenset[int],
) -> dict[str, object]:
    import yaml

    # flatten_mapping puts the pairs merged in by `<<` first; later pairs may override them.
    own = len(node.value) - sum(k.tag == "tag:yaml.org,2002:merge" for k, _ in node.value)
    loader.flatten_mapping(node)
    merged = len(node.value) - own
    out: dict[str, object] = {}
    from_merge: set[str] = set()
    for i, (key_node, value_node) in enumerate(node.value):
        key_line = key_node.start_mark.line + 1
        if not isinstance(key_node, yaml.ScalarNode):
            report.add(path, "a key must be a name, not a list or mapping", line=key_line)
            continue
        key = loader.construct_object(key_node)
        if not isinstance(key, str):
            report.add(
                (*path, show(key)),
                f"a key must be a string: quote it ('{show(key)}')",
                key=True,
                line=key_line,
            )
            continue
        if key in out and key not in from_merge:
            first = report.lines[(*path, key)][0]
            problem = f"duplicate key (first at line {first}): keep one"
            report.add((*path, key), problem, key=True, line=key_line)
            continue
        if i < merged:
            from_merge.add(key)
        else:
            from_merge.discard(key)
        report.lines[(*path, key)] = (key_line, value_node.start_mark.line + 1)
        out[key] = _value(loader, value_node, (*path, key), report, active)
    return out
