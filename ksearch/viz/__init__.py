"""Looking at runs: the plan tree and one node (`show`), live progress, reports with plots (`report`),
runs side by side (`compare`), and experiment trackers. All read runs through ksearch.store.history."""
