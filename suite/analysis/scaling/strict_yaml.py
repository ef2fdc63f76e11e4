"""YAML read strictly: a key given twice in one mapping is an error, not its last value."""

from __future__ import annotations

from typing import Any

import yaml


class DuplicateKeyError(yaml.YAMLError):
    """A mapping names one key twice (YAML's safe loader would keep the last silently)."""


class _UniqueKeyLoader(yaml.SafeLoader):
    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            line = key_node.start_mark.line + 1
            if key in seen:
                raise DuplicateKeyError(
                    f"duplicate key {key} (line {seen[key]} and line {line}): give it once"
                )
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def load(text: str) -> Any:
    """``text``'s YAML document, each mapping's keys unique."""
    return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
