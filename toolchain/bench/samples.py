"""Prometheus text exposition: samples, one snapshot of an endpoint, and the parser (the leaf that the Triton and
Dynamo metric readers share)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})?\s+([-+0-9.eEinfNa]+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


@dataclass
class Sample:
    name: str
    labels: dict[str, str]
    value: float


@dataclass
class Snapshot:
    samples: list[Sample] = field(default_factory=list)

    def get(self, name: str, **labels: str) -> list[Sample]:
        return [s for s in self.samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]

    def total(self, name: str, **labels: str) -> float:
        return sum(s.value for s in self.get(name, **labels))

    def value(self, name: str, **labels: str) -> float | None:
        got = self.get(name, **labels)
        return got[0].value if got else None


def parse(text: str) -> Snapshot:
    snap = Snapshot()
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if not m:
            continue
        labels = dict(_LABEL.findall(m.group(3) or ""))
        try:
            snap.samples.append(Sample(m.group(1), labels, float(m.group(4))))
        except ValueError:
            continue
    return snap
