"""Render a catalog family at its defaults (plus KEY=VALUE overrides) to a solution file."""
import sys
from pathlib import Path

from ksearch.task.catalog import load_catalog

task, family, out, *kv = sys.argv[1:]
cat = load_catalog(Path("tasks") / task / "strategies", task)
knobs = {}
for item in kv:
    k, v = item.split("=", 1)
    fam = cat.family(family)
    knobs[k] = next(x for x in fam.knobs[k].values if str(x) == v)
Path(out).write_text(cat.render(family, knobs))
print(out)
