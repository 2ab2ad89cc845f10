"""Terminal views: the plan tree (`ksearch show`) and live run progress."""
