"""The trusted worker process: references, verdicts, baselines and the clock; candidate code
never runs here."""
