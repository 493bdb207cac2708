"""The PostgreSQL host (private): ``_host.PgHost`` over the API side (``_commands``) and the
worker (``_worker``: a supervisor over ``_residents``, ``_apply``, ``_drain``), liveness
(``_control``, ``_watch``, ``_sweeper``, ``_depose``), capacity (``_capacity``, ``_queue``),
the feed (``_hub``, ``_live``, ``_feed``), the service's tables (``_schema``) and every SQL
statement (``_sql``)."""
