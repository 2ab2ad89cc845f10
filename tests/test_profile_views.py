"""The profile where people look: `ksearch show --node` and the TUI's node detail show the profile table
when an evaluation carries one, else the one line saying why; records written before evaluations said
either (the fixtures under tests/fixtures/run_*) show as they always did."""

import json

from ksearch.cli.main import main
from ksearch.profile import KernelInfo, Launch, Profile, WorkloadProfile
from tests.fakes import write_synthetic_run
from tests.test_tui import drive, pane_text

PROFILE = Profile(
    kernels=[KernelInfo(name="_attn_fwd", registers_per_thread=168, spilled_bytes=96, shared_memory_bytes=98304,
                        num_warps=8, num_stages=3, occupancy=0.125)],
    workloads=[WorkloadProfile(workload="w1", launches=[Launch(kernel="_attn_fwd", gpu_time_us=41.5),
                                                        Launch(kernel="_combine", gpu_time_us=3.25)],
                               floor_us=12.0, pct_of_limit=26.8)])
REASON = "no profile on a CPU: the Triton interpreter compiles nothing"


def _with_profiles(tmp_path):
    """The hand-written run, its kernel sb evaluated on a GPU with a profile and sa on a CPU without one."""
    run = write_synthetic_run(tmp_path / "toy")
    journal = run / "journal.jsonl"
    lines = journal.read_text().split("\n")
    for i, line in enumerate(lines):
        if '"kind": "evaluation"' in line:
            rec = json.loads(line)
            if rec["solution_id"] == "sb":
                rec["value"].update(device="cuda:0", profile=PROFILE.to_json(), profile_note="")
            elif rec["solution_id"] == "sa":
                rec["value"]["profile_note"] = REASON
            lines[i] = json.dumps(rec)
    journal.write_text("\n".join(lines))
    return run


def test_show_node_prints_the_profile_table_or_the_reason(tmp_path, capsys):
    run = _with_profiles(tmp_path)
    assert main(["show", str(run), "--node", "b"]) == 0
    out = capsys.readouterr().out
    assert "profile (what the GPU said" in out
    assert "_attn_fwd" in out and "168" in out and "96.0" in out and "12%" in out     # regs, smem KiB, occupancy
    assert "_attn_fwd 41.5, _combine 3.25" in out and "27%" in out                    # launches, % of limit
    assert "reading: _attn_fwd spills 96 bytes" in out
    assert main(["show", str(run), "--node", "a"]) == 0
    out = capsys.readouterr().out
    assert f"profile: none ({REASON})" in out and "profile (what" not in out


def test_a_record_without_profile_fields_shows_no_profile_line(tmp_path, capsys):
    run = write_synthetic_run(tmp_path / "toy")
    assert main(["show", str(run), "--node", "b"]) == 0
    assert "profile" not in capsys.readouterr().out


def test_the_tui_node_detail_shows_the_profile_or_the_reason(tmp_path):
    run = _with_profiles(tmp_path)

    async def script(app, pilot):
        app._move_to(app._tree_nodes["b"])
        await pilot.pause()
        attempts = pane_text(app, "attempts")
        assert "_attn_fwd 41.5, _combine 3.25" in attempts and "occupancy" in attempts
        app._move_to(app._tree_nodes["a"])
        await pilot.pause()
        attempts = pane_text(app, "attempts")
        assert f"profile: none ({REASON})" in attempts and "_attn_fwd" not in attempts

    drive(run, script)
