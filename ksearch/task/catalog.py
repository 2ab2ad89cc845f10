"""A task's strategy catalog: kernel families, their knobs and priors, and a jinja2 template each.

Layout (`tasks/<name>/strategies/`):

    catalog.yaml          families, knobs, tactics (see `Family` and `Tactic`)
    <family>.py.j2        one Triton template per family, rendered with the family's knob values

Every knob value listed in the catalog must give a correct kernel on every workload: the offline model
may combine any of them. The tests render each family at its defaults and at every tactic.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
import yaml


class CatalogError(ValueError):
    """A catalog that does not follow the layout above."""


@dataclass(frozen=True)
class Prior:
    """What the catalog author believes before any measurement."""

    rating: float = 5.0              # 0..10, quality of the plan
    confidence: float = 0.4          # 0..1
    score: float = 0.5               # 0..1, priority
    difficulty: int = 2              # 1..5
    expected_speedup: float = 1.0    # for families: vs baseline; for tactics: vs the parent kernel


@dataclass(frozen=True)
class Knob:
    name: str
    values: tuple[Any, ...]
    default: Any
    doc: str = ""


@dataclass(frozen=True)
class Tactic:
    """A deeper plan step: set some knobs (a tuning change or a structural variant)."""

    name: str
    title: str
    settings: dict[str, Any]
    rationale: str = ""
    prior: Prior = field(default_factory=Prior)


@dataclass(frozen=True)
class Family:
    name: str
    title: str
    description: str
    template: str
    knobs: dict[str, Knob]
    tactics: tuple[Tactic, ...]
    prior: Prior = field(default_factory=Prior)

    def defaults(self) -> dict[str, Any]:
        return {k.name: k.default for k in self.knobs.values()}


@dataclass(frozen=True)
class Catalog:
    task: str
    root: Path
    families: tuple[Family, ...]

    def family(self, name: str) -> Family:
        for f in self.families:
            if f.name == name:
                return f
        raise CatalogError(f"catalog for {self.task} has no family {name!r}; it has {[f.name for f in self.families]}")

    def render(self, family: str, knobs: dict[str, Any]) -> str:
        """Render a family's template with its defaults overridden by `knobs` (validated)."""
        fam = self.family(family)
        values = fam.defaults()
        for k, v in knobs.items():
            if k not in fam.knobs:
                raise CatalogError(f"family {family} has no knob {k!r}")
            if v not in fam.knobs[k].values:
                raise CatalogError(f"knob {family}.{k}={v!r} is not one of {list(fam.knobs[k].values)}")
            values[k] = v
        env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(self.root)),
                                 undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
        return env.get_template(fam.template).render(**values, family=family)


def _prior(raw: Any, where: str) -> Prior:
    raw = raw or {}
    unknown = set(raw) - set(Prior.__dataclass_fields__)
    if unknown:
        raise CatalogError(f"{where}.prior: unknown keys {sorted(unknown)}")
    return Prior(**raw)


def load_catalog(strategies_dir: Path, task: str) -> Catalog:
    path = strategies_dir / "catalog.yaml"
    if not path.is_file():
        raise CatalogError(f"task {task} has no strategy catalog at {path}; the offline model needs one")
    doc = yaml.safe_load(path.read_text()) or {}
    families = []
    for i, f in enumerate(doc.get("families") or []):
        where = f"{path}: families[{i}]"
        for key in ("name", "title", "template", "knobs"):
            if key not in f:
                raise CatalogError(f"{where} is missing {key!r}")
        if not (strategies_dir / f["template"]).is_file():
            raise CatalogError(f"{where}: template {f['template']} not found in {strategies_dir}")
        knobs = {}
        for kname, k in f["knobs"].items():
            values = tuple(k["values"])
            if k.get("default") not in values:
                raise CatalogError(f"{where}.knobs.{kname}: default {k.get('default')!r} not in values {list(values)}")
            knobs[kname] = Knob(kname, values, k["default"], k.get("doc", ""))
        tactics = []
        for j, t in enumerate(f.get("tactics") or []):
            settings = t.get("set") or {}
            for kname, v in settings.items():
                if kname not in knobs or v not in knobs[kname].values:
                    raise CatalogError(f"{where}.tactics[{j}] sets {kname}={v!r}, not a listed knob value")
            tactics.append(Tactic(t["name"], t["title"], dict(settings), t.get("rationale", ""),
                                  _prior(t.get("prior"), f"{where}.tactics[{j}]")))
        families.append(Family(f["name"], f["title"], f.get("description", ""), f["template"], knobs,
                               tuple(tactics), _prior(f.get("prior"), where)))
    if not families:
        raise CatalogError(f"{path} lists no families")
    names = [f.name for f in families]
    if len(set(names)) != len(names):
        raise CatalogError(f"{path}: duplicate family names {names}")
    return Catalog(task=task, root=strategies_dir, families=tuple(families))
