"""Leaves every package uses: the errors a user can fix, and files written whole."""
