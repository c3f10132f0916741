"""A user module that fails to import."""

raise RuntimeError("the user's module is broken")
