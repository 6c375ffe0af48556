"""The `lg` commands, one module per group, as `lgcli.cli` registers them:
each parses its flags, calls the library function that does the work, and
renders the report. `common` holds what several share: help that names
values, the consoles, the options more than one command takes, and the
command line being run.

Nothing here imports torch at the top: a command imports what it runs."""
