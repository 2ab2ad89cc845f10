"""`ksearch report --html`: one self-contained file with the tree, the plots and every kernel."""

import html
import re

from ksearch.cli.main import main
from ksearch.store import load_history
from tests.fakes import write_synthetic_run


def _external_references(page: str) -> list[str]:
    """src= / href= values, and CSS url() or @import, that point outside the file."""
    refs = re.findall(r'(?:src|href)\s*=\s*["\']([^"\']*)["\']', page, flags=re.I)
    refs += re.findall(r'url\(\s*["\']?([^"\')]*)', page, flags=re.I)
    refs += re.findall(r'@import\s+["\']?([^"\';]*)', page, flags=re.I)
    return [r for r in refs if not r.startswith(("#", "data:"))]


def test_html_report_of_a_real_run_is_self_contained_with_every_kernel(real_run, tmp_path, capsys):
    before = sorted(p for p in real_run.rglob("*"))
    assert main(["report", str(real_run), "--html", "--out", str(tmp_path / "html")]) == 0
    page_path = tmp_path / "html" / "report.html"
    assert f"report written to {page_path}" in capsys.readouterr().out
    assert sorted(p for p in real_run.rglob("*")) == before          # --out elsewhere: nothing added to the run
    assert list((tmp_path / "html").iterdir()) == [page_path]          # one file, nothing beside it
    page = page_path.read_text()
    assert _external_references(page) == []
    assert not re.search(r"<script[^>]*\bsrc=", page) and not re.search(r"<link\b", page)
    assert page.count('src="data:image/png;base64,') == 3              # the three plots, inline

    h = load_history(real_run)
    wm = h.world_model()
    plain = html.unescape(re.sub(r"<[^>]+>", "", page))               # the text a reader sees
    for e in h.evaluations:                                            # every kernel, highlighted
        assert e.solution_id in page
        for line in h.solution_source(e.solution_id).splitlines():
            assert line in plain, line
    assert '<div class="hl">' in page and 'class="k"' in page          # pygments' token classes
    for node in wm.nodes():                                            # the whole tree, collapsible
        assert f'title="{node.node_id}"' in page
    assert page.count("<details") >= 1 and "<summary>" in page
    assert "&#9733;" in page and "is-best" in page


def test_html_report_of_a_hand_written_run_has_the_diff(tmp_path):
    run = write_synthetic_run(tmp_path / "toy")
    assert main(["report", str(run), "--html"]) == 0
    page = (run / "report" / "report.html").read_text()
    assert "diff against the parent&#x27;s kernel sa" in page or "diff against the parent's kernel sa" in page
    assert _external_references(page) == []
    assert "RUNTIME_ERROR" in page and "toy_task" in page
