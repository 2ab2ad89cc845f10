"""The search process's side of evaluation: static checks, the evaluator, pools, and the
handle on the trusted worker process."""
