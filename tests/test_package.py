"""The package is complete: a wheel carries the tasks, configs, prompts and starter catalogs, and an
installed copy works from any directory (no checkout needed)."""

import os
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_every_subpackage_is_listed_in_pyproject():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.relative_to(ROOT).parts[:-1]) for p in (ROOT / "ksearch").rglob("__init__.py")}
    assert found - listed == set(), "add these to [tool.setuptools] packages in pyproject.toml"


def test_the_checkout_uses_its_own_tasks_and_conf():
    from ksearch import data_dir

    assert data_dir("tasks") == ROOT / "tasks" and data_dir("conf") == ROOT / "conf"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out),
                    str(ROOT)], check=True, timeout=600, cwd=str(out))
    return next(out.glob("ksearch-*.whl"))


@pytest.mark.slow
def test_the_wheel_carries_tasks_conf_prompts_and_starters(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for task in (p.name for p in (ROOT / "tasks").iterdir() if (p / "definition.json").is_file()):
        for f in (ROOT / "tasks" / task).rglob("*"):
            if f.is_file() and "__pycache__" not in f.parts:
                assert f"ksearch/_data/tasks/{f.relative_to(ROOT / 'tasks')}" in names
    assert {"ksearch/_data/conf/config.yaml", "ksearch/_data/conf/llm/offline.yaml",
            "ksearch/world_model/prompts/init.j2", "ksearch/instantiate/prompts/code.j2",
            "ksearch/task/starters/rmsnorm/catalog.yaml", "ksearch/__main__.py"} <= names


@pytest.mark.slow
def test_an_installed_copy_works_from_another_directory(wheel, tmp_path):
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
                   check=True, timeout=600)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "KSEARCH_TASKS_DIR")}
    env["PYTHONPATH"] = str(target)
    work = tmp_path / "elsewhere"
    work.mkdir()

    def ksearch(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "ksearch", *args], capture_output=True, text=True, env=env,
                              cwd=str(work), timeout=600)

    where = subprocess.run([sys.executable, "-c", "import ksearch; print(ksearch.__file__, ksearch.data_dir('conf'))"],
                           capture_output=True, text=True, env=env, cwd=str(work), check=True).stdout
    assert where.startswith(str(target)) and "_data/conf" in where
    tasks = ksearch("tasks")
    assert tasks.returncode == 0 and "gqa_paged_decode_h32_kv4_d128_ps1" in tasks.stdout, tasks.stdout + tasks.stderr
    assert "tiny (3)" in tasks.stdout
    made = ksearch("task", "new", str(ROOT / "examples" / "rmsnorm.json"), "--dir", "mine")
    assert made.returncode == 0 and (work / "mine" / "rmsnorm_h4096" / "strategies" / "catalog.yaml").is_file()
    bad = ksearch("run", "search.max_rounds=0")
    assert bad.returncode == 2 and "Traceback" not in bad.stdout + bad.stderr
    run = ksearch("run", "task.dir=mine", "task=rmsnorm_h4096", "search.max_rounds=1", "run.live=false",
                  "run.dir=r")
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert (work / "r" / "best" / "solution.py").is_file()
