"""The session stores: the interface, the shared group committer and the backends."""
