"""Leaves every package uses: the errors a user can fix, files written whole, and the
``--config.KEY=VALUE`` overrides of a command line."""
