"""Evaluation: worker processes, correctness rules, timing, CPU interpreter and GPU paths.

Nothing here imports litellm, hydra or rich at module level: GPU hosts are often offline and minimal.
"""
