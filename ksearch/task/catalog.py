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
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator


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


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _PriorDoc(_Strict):
    rating: float = Field(5.0, ge=0, le=10)
    confidence: float = Field(0.4, ge=0, le=1)
    score: float = Field(0.5, ge=0, le=1)
    difficulty: int = Field(2, ge=1, le=5)
    expected_speedup: float = Field(1.0, gt=0)

    def build(self) -> Prior:
        return Prior(**self.model_dump())


class _KnobDoc(_Strict):
    values: list[Any] = Field(min_length=1)
    default: Any
    doc: str = ""

    @model_validator(mode="after")
    def _default_listed(self) -> "_KnobDoc":
        if self.default not in self.values:
            raise ValueError(f"default {self.default!r} not in values {self.values}")
        return self


class _TacticDoc(_Strict):
    name: str
    title: str
    rationale: str = ""
    set: dict[str, Any] = Field(default_factory=dict)
    prior: _PriorDoc = _PriorDoc()


class _FamilyDoc(_Strict):
    name: str
    title: str
    description: str = ""
    template: str
    prior: _PriorDoc = _PriorDoc()
    knobs: dict[str, _KnobDoc]
    tactics: list[_TacticDoc] = Field(default_factory=list)

    @model_validator(mode="after")
    def _tactics_set_listed_values(self) -> "_FamilyDoc":
        for t in self.tactics:
            for k, v in t.set.items():
                if k not in self.knobs or v not in self.knobs[k].values:
                    raise ValueError(f"tactic {t.name} sets {k}={v!r}, not a listed knob value")
        return self


class _CatalogDoc(_Strict):
    families: list[_FamilyDoc] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique_names(self) -> "_CatalogDoc":
        names = [f.name for f in self.families]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate family names {names}")
        return self


def _first_error(e: ValidationError) -> str:
    err = e.errors()[0]
    where = ".".join(str(x) for x in err["loc"])
    return f"{where}: {err['msg']}" if where else err["msg"]


def load_catalog(strategies_dir: Path, task: str) -> Catalog:
    path = strategies_dir / "catalog.yaml"
    if not path.is_file():
        raise CatalogError(f"task {task} has no strategy catalog at {path}; the offline model needs one")
    try:
        raw = yaml.safe_load(path.read_text()) or {}
        # Top-level keys starting with "_" only hold YAML anchors that the families reuse (e.g. shared knobs).
        raw = {k: v for k, v in raw.items() if not str(k).startswith("_")} if isinstance(raw, dict) else raw
        doc = _CatalogDoc.model_validate(raw)
    except ValidationError as e:
        raise CatalogError(f"{path}: {_first_error(e)}") from None
    except yaml.YAMLError as e:
        raise CatalogError(f"{path}: not valid YAML ({e})") from None
    families = []
    for f in doc.families:
        if not (strategies_dir / f.template).is_file():
            raise CatalogError(f"{path}: family {f.name}: template {f.template} not found in {strategies_dir}")
        knobs = {k: Knob(k, tuple(d.values), d.default, d.doc) for k, d in f.knobs.items()}
        tactics = tuple(Tactic(t.name, t.title, dict(t.set), t.rationale, t.prior.build()) for t in f.tactics)
        families.append(Family(f.name, f.title, f.description, f.template, knobs, tactics, f.prior.build()))
    return Catalog(task=task, root=strategies_dir, families=tuple(families))
