"""YAML the toolchain writes for people and for other tools: plain, never anchors and aliases.

PyYAML's ``safe_dump`` writes a dict that appears twice in one document (the same labels on a Deployment
and on its pod template) once, as ``&id001``, and then as ``*id001``. Kubernetes, kustomize and Dynamo read
that, but a person reviewing the manifest, a diff, or a policy tool that greps for a label does not see it
where it applies. Every YAML file the toolchain writes goes through :func:`dump`, which repeats the value.
"""

from __future__ import annotations

from typing import Any

import yaml


class _PlainDumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True


def dump(obj: Any, *, sort_keys: bool = False, default_flow_style: bool | None = False, **kw: Any) -> str:
    """``obj`` as YAML with every repeated value written out in full (no ``&anchor`` / ``*alias``)."""
    text: str = yaml.dump(obj, Dumper=_PlainDumper, sort_keys=sort_keys, default_flow_style=default_flow_style, **kw)
    return text
