"""The `twin` command."""
