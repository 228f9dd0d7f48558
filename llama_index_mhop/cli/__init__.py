"""The `mhop` command: its arguments, configuration file, commands and status."""
