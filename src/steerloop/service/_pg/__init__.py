"""The PostgreSQL service's internals (private): control connection, sweeper, commands, worker."""
