"""A task's strategy catalog: kernel families, their knobs and priors, and a jinja2 template each.

Layout (`tasks/<name>/strategies/`):

    catalog.yaml          families, knobs, tactics (see `Family` and `Tactic`)
    <family>.py.j2        a Triton template (a Python module), rendered with the family's knob values
    <family>.cu.j2        or a CUDA C++ template (a translation unit with a host function `run`)

A family's language is its template's suffix (`Family.language`): a Triton family runs anywhere (on the
CPU under the Triton interpreter), a CUDA family only on a CUDA device (`Catalog.runnable_families`).
Every knob value listed in the catalog must give a correct kernel on every workload: the offline model
may combine any of them. The tests render each family at its defaults and at every tactic.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jinja2
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ksearch.instantiate.language import CUDA, PYTHON

#: A template's suffix -> the language of what it renders (the values `language_of` gives the source).
TEMPLATE_LANGUAGES = {".py.j2": PYTHON, ".cu.j2": CUDA}


class CatalogError(ValueError):
    """A catalog that does not follow the layout above."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Prior(_Strict):
    """What the catalog author believes before any measurement."""

    rating: float = Field(5.0, ge=0, le=10)             # quality of the plan
    confidence: float = Field(0.4, ge=0, le=1)
    score: float = Field(0.5, ge=0, le=1)               # priority
    difficulty: int = Field(2, ge=1, le=5)
    expected_speedup: float = Field(1.0, gt=0)          # for families: vs baseline; for tactics: vs the parent kernel


class Knob(_Strict):
    name: str                                           # the key the family lists it under
    values: tuple[Any, ...] = Field(min_length=1)
    default: Any
    doc: str = ""

    @model_validator(mode="after")
    def _default_listed(self) -> Knob:
        if self.default not in self.values:
            raise ValueError(f"default {self.default!r} not in values {list(self.values)}")
        return self


class Tactic(_Strict):
    """A deeper plan step: set some knobs (a tuning change or a structural variant)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    name: str
    title: str
    settings: dict[str, Any] = Field(default_factory=dict, alias="set")
    rationale: str = ""
    prior: Prior = Prior()


class Family(_Strict):
    name: str
    title: str
    description: str = ""
    template: str
    prior: Prior = Prior()
    knobs: dict[str, Knob]
    tactics: tuple[Tactic, ...] = ()

    @model_validator(mode="before")
    @classmethod
    def _knobs_named_by_their_keys(cls, data: Any) -> Any:
        knobs = data.get("knobs") if isinstance(data, dict) else None
        if isinstance(knobs, dict):
            data = {**data, "knobs": {k: {"name": k, **v} if isinstance(v, dict) else v for k, v in knobs.items()}}
        return data

    @model_validator(mode="after")
    def _template_has_a_language(self) -> Family:
        if template_language(self.template) is None:
            raise ValueError(f"template {self.template}: a template's name ends in "
                             f"{' or '.join(TEMPLATE_LANGUAGES)}, which says its language (Triton or CUDA)")
        return self

    @model_validator(mode="after")
    def _tactics_set_listed_values(self) -> Family:
        for key, knob in self.knobs.items():
            if knob.name != key:
                raise ValueError(f"knob {key} is named {knob.name!r}: a knob's name is its key")
        for t in self.tactics:
            for k, v in t.settings.items():
                if k not in self.knobs or v not in self.knobs[k].values:
                    raise ValueError(f"tactic {t.name} sets {k}={v!r}, not a listed knob value")
        return self

    def defaults(self) -> dict[str, Any]:
        return {k.name: k.default for k in self.knobs.values()}

    @property
    def language(self) -> str:
        """PYTHON (a Triton module) or CUDA, from the template's suffix: what `language_of` says of a render."""
        lang = template_language(self.template)
        assert lang is not None     # checked when the family was read
        return lang

    def runs_on(self, device: str | None) -> bool:
        """Whether this family's kernels can run on `device` (None: not known, so assume they can).
        A CUDA family needs a CUDA device; a Triton one runs on the CPU under the interpreter too."""
        return device is None or self.language != CUDA or device.startswith("cuda")


def template_language(template: str) -> str | None:
    """The language a template renders, by its suffix; None for a suffix no family may have."""
    return next((lang for suffix, lang in TEMPLATE_LANGUAGES.items() if template.endswith(suffix)), None)


class Catalog(_Strict):
    """catalog.yaml's families, with the task they are for and the folder their templates are in."""

    task: str
    root: Path
    families: tuple[Family, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique_names(self) -> Catalog:
        names = [f.name for f in self.families]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate family names {names}")
        return self

    def family(self, name: str) -> Family:
        for f in self.families:
            if f.name == name:
                return f
        raise CatalogError(f"catalog for {self.task} has no family {name!r}; it has {[f.name for f in self.families]}")

    def runnable_families(self, device: str | None) -> tuple[Family, ...]:
        """The families whose kernels can run on `device` (all of them when it is None, i.e. not known)."""
        return tuple(f for f in self.families if f.runs_on(device))

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

    def parse_spec(self, spec: str) -> tuple[str, dict[str, Any]]:
        """`NAME` or `NAME:KEY=VALUE,KEY=VALUE` (the command line's way to name a family at chosen knobs) ->
        (family, knobs), each value matched by its text against the knob's listed values (true/false for
        booleans in any case); anything unknown raises CatalogError naming what is allowed."""
        name, _, rest = spec.partition(":")
        fam = self.family(name.strip())
        knobs: dict[str, Any] = {}
        for item in filter(None, (x.strip() for x in rest.split(","))):
            key, eq, text = item.partition("=")
            key = key.strip()
            if not eq:
                raise CatalogError(f"{spec!r}: write knobs as KEY=VALUE ({item!r} has no '=')")
            if key not in fam.knobs:
                raise CatalogError(f"family {fam.name} has no knob {key!r}; it has {sorted(fam.knobs)}")
            allowed = fam.knobs[key].values
            match = [v for v in allowed if str(v) == text.strip()
                     or (isinstance(v, bool) and str(v).lower() == text.strip().lower())]
            if not match:
                raise CatalogError(f"knob {fam.name}.{key}={text.strip()!r} is not one of {list(allowed)}")
            knobs[key] = match[0]
        return fam.name, knobs


#: What catalog.yaml itself may hold at the top level (task and root come from where it is read).
_DOCUMENT_KEYS = {"families"}


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
    except yaml.YAMLError as e:
        raise CatalogError(f"{path}: not valid YAML ({e})") from None
    if not isinstance(raw, dict):
        raise CatalogError(f"{path}: a catalog is a mapping with a list of families")
    # Top-level keys starting with "_" only hold YAML anchors that the families reuse (e.g. shared knobs).
    raw = {k: v for k, v in raw.items() if not str(k).startswith("_")}
    unknown = sorted(set(map(str, raw)) - _DOCUMENT_KEYS)
    if unknown:
        raise CatalogError(f"{path}: {unknown[0]}: Extra inputs are not permitted")
    try:
        catalog = Catalog.model_validate({**raw, "task": task, "root": strategies_dir})
    except ValidationError as e:
        raise CatalogError(f"{path}: {_first_error(e)}") from None
    for f in catalog.families:
        if not (strategies_dir / f.template).is_file():
            raise CatalogError(f"{path}: family {f.name}: template {f.template} not found in {strategies_dir}")
    return catalog
