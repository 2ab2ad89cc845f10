"""The `ksearch` command: its subcommands and the wiring that builds a run from a config."""
