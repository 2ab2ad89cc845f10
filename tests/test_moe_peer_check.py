"""benchmarks/moe_peer_check.py in its CPU smoke mode, so the H200 run cannot break on the script itself."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("moe_peer_check", ROOT / "benchmarks" / "moe_peer_check.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_smoke_checks_times_and_tabulates_every_subject(tmp_path):
    mod = _script()
    assert mod.main([str(tmp_path), "--smoke"]) == 0
    result = json.loads((tmp_path / "moe_peer_check.json").read_text())
    rows = {r["subject"]: r for r in result["rows"]}
    assert {"torch_grouped_fp8_dequant", "sglang_triton_fused_moe_fp8", "sglang_exact_serving"} <= set(rows)
    assert any(name.startswith("family:") for name in rows)
    for name, row in rows.items():
        if name.startswith("sglang") and not result["peer"]["available"]:
            assert row["error"].startswith("PeerUnavailable") and "not installed" in row["error"]
            continue
        assert "error" not in row, (name, row.get("error"), row.get("trace"))
        assert row["ms"] > 0 and 0 < row["limit"]["fraction"] < 1
        assert row["passed"] == (name != "sglang_exact_serving"), (name, row["check"])
    table = mod.table(result)
    assert "| torch_grouped_fp8_dequant |" in table and "T=1" in table
