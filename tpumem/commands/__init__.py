"""One module per command: what `tpumem COMMAND` does, given its options as Python
values. tpumem/cli.py declares the options and calls these; nothing here knows of
typer except the exit status a command ends with (TpumemError for a user's error)."""
