"""
Read YAML into plain values while remembering the line of every key and value.

PyYAML's loaders forget where values came from, so this walks the composed node tree itself:
scalars are built by PyYAML's safe constructor, mappings and lists here, and each one's lines
go into the `Report` so that problems can name them. Duplicate keys, which PyYAML would keep
silently (last wins), are problems; merge keys (``<<: *defaults``) work as in PyYAML.

Aliases are bounded. Each ``*name`` brings in a copy of the whole value it names, so a few
hundred bytes of aliases to aliases ("billion laughs") expand to billions of values. The
composer below counts, at every alias, the values that alias will add (the node tree is
shared until it is built, so counting is cheap) and refuses the document, naming the alias's
line, once all aliases together add more than `MAX_ALIAS_VALUES`. An alias to a value that
is still open (a value inside itself) is refused at once too: it has no finite expansion.
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

MAX_ALIAS_VALUES = 100_000
"""At most this many values (keys, scalars, lists and mappings) may come in through aliases.

A plan whose 500 steps each merge 40 default fields (``<<: *defaults``) adds 40,000.
"""


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
        loader = _bounded_loader(text, report.source)
        node = loader.get_single_node()
        if node is None:
            return None
        report.lines[()] = (node.start_mark.line + 1, node.start_mark.line + 1)
        return _value(loader, node, (), report)
    except yaml.MarkedYAMLError as exc:
        raise ConfigError(_yaml_message(report.source, exc)) from None
    except RecursionError:
        msg = f"{report.source}: the YAML nests too deep: write it flatter"
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


def safe_load_bounded(text: str, source: str) -> object:
    """
    ``yaml.safe_load`` with the same alias bound as plans, for other YAML inputs (profiles).

    Args:
        text: The document.
        source: What to call it in messages, usually its path.

    Returns:
        The document's value, built by PyYAML's safe constructor.

    Raises:
        ConfigError: Aliases bring in more than `MAX_ALIAS_VALUES` values, or one is inside
            the value it names; the message names the line.
        yaml.YAMLError: The text is not valid YAML.
    """
    loader = _bounded_loader(text, source)
    try:
        return loader.get_single_data()
    finally:
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


def _value(loader: yaml.SafeLoader, node: yaml.Node, path: Path, report: Report) -> object:
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
    if isinstance(node, yaml.SequenceNode):
        items = []
        for i, item in enumerate(node.value):
            line = item.start_mark.line + 1
            report.lines[(*path, i)] = (line, line)
            items.append(_value(loader, item, (*path, i), report))
        return items
    if isinstance(node, yaml.MappingNode):
        return _mapping(loader, node, path, report)
    return None  # the composer makes no other kind of node


def _mapping(
    loader: yaml.SafeLoader,
    node: yaml.MappingNode,
    path: Path,
    report: Report,
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
        out[key] = _value(loader, value_node, (*path, key), report)
    return out


def _bounded_loader(text: str, source: str) -> yaml.SafeLoader:
    """
    A safe loader whose composer refuses an alias to an open value, or aliases that add too much.
    """
    import yaml

    class BoundedLoader(yaml.SafeLoader):
        added = 0
        sizes: dict[int, int]

        def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
            if self.check_event(yaml.AliasEvent):
                event: yaml.AliasEvent = self.peek_event()  # type: ignore[no-untyped-call]
                target = self.anchors.get(event.anchor)
                if target is not None:  # else PyYAML's own error: undefined alias
                    line = event.start_mark.line + 1 if event.start_mark is not None else 1
                    if target.end_mark is None:  # still being composed: the alias is inside it
                        msg = (
                            f"{source}:{line}: the alias *{event.anchor} is inside the value it "
                            "names, so it never ends: write the value out"
                        )
                        raise ConfigError(msg)
                    self.added += _size(target, self.sizes)
                    if self.added > MAX_ALIAS_VALUES:
                        msg = (
                            f"{source}:{line}: the aliases up to this *{event.anchor} bring in "
                            f"{self.added:,} values, more than the {MAX_ALIAS_VALUES:,} a plan "
                            "may take through aliases: write the values out, or use fewer aliases"
                        )
                        raise ConfigError(msg)
            return super().compose_node(parent, index)

    loader = BoundedLoader(text)
    loader.sizes = {}
    return loader


def _size(node: yaml.Node, sizes: dict[int, int]) -> int:
    """
    Count the values ``node`` expands to when every alias in it is written out.

    Every node reached here is complete (the composer refuses aliases to open ones), so the
    tree has no cycles and each node's count is final: ``sizes`` keeps them by ``id``, which
    keeps counting linear in the document's own size however far it expands.
    """
    import yaml

    known = sizes.get(id(node))
    if known is not None:
        return known
    total = 1
    if isinstance(node, yaml.SequenceNode):
        total += sum(_size(item, sizes) for item in node.value)
    elif isinstance(node, yaml.MappingNode):
        total += sum(_size(key, sizes) + _size(value, sizes) for key, value in node.value)
    sizes[id(node)] = total
    return total
