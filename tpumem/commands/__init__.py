"""One module per command: what `tpumem COMMAND` does, given its request
(requests.py: one frozen object per command, its values already parsed).
tpumem/cli.py declares the options, parses their values where it declares them
(options.py, typer's parser) and calls these; a user's error is a TpumemError."""
