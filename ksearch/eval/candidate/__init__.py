"""The candidate's process: the harness that loads and serves the candidate, its end of
the channel, and the audit hook."""
