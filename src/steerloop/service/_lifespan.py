"""The app's lifespan: opens the store, the runtime, the profiles, the host and the feed
source in that order, keeps the host and source on the app's state while the app serves,
and closes them in the reverse order (each close runs even if a later one failed)."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, cast

from starlette.applications import Starlette

from .. import Runtime
from ..llm.retry import install_retry
from ._api import Host
from ._fanout import SharedFeeds
from ._local import LocalHost
from ._profile import Profile, check_profiles
from ._source import FeedSource
from ._state import ServiceState, Settings

if TYPE_CHECKING:
    from ..session.store.postgres import PostgresStore

__all__ = ["SERVER_LEASE_TTL", "lifespan"]

SERVER_LEASE_TTL = 15.0


@contextlib.asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    """Run the service of ``app`` (its ``ServiceState``) for as long as the app serves."""
    state = cast(ServiceState, app.state.service)
    settings = state.settings
    async with contextlib.AsyncExitStack() as stack:
        pg_store = _server_store(settings.store) if settings.postgres and settings.store else None
        if pg_store is not None:
            stack.push_async_callback(pg_store.close)
        rt = await Runtime.open(
            store=pg_store if pg_store is not None else settings.store,
            max_attachment_bytes=settings.attachments.block_bytes,
            max_message_attachment_bytes=settings.attachments.message_bytes,
        )
        stack.push_async_callback(rt.close)
        by_name = check_profiles(await _profiles(settings, rt))
        if settings.retry:
            install_retry(rt)
        host = await _open_host(settings, rt, pg_store, by_name)
        stack.push_async_callback(host.close)
        source = await _open_source(stack, settings, rt, pg_store, host)
        # One read per session per process, fanned out to its readers.
        state.host, state.source = host, SharedFeeds(source)
        stack.callback(_forget, state)  # the first thing undone: new requests answer 503
        yield


def _forget(state: ServiceState) -> None:
    state.host = None
    state.source = None


async def _profiles(settings: Settings, rt: Runtime) -> Sequence[Profile]:
    """The served profiles: the sequence given, or what the callable (maybe async) returns."""
    found = settings.profiles(rt) if callable(settings.profiles) else settings.profiles
    if inspect.isawaitable(found):  # a profiles callable may set up asynchronously
        found = await found
    return found


async def _open_host(
    settings: Settings,
    rt: Runtime,
    pg_store: PostgresStore | None,
    by_name: dict[str, Profile],
) -> Host:
    """The started host: ``PgHost`` on PostgreSQL (any role), else the in-process one."""
    if pg_store is None:
        local = LocalHost(
            rt,
            by_name,
            idle_unload=settings.idle_unload,
            max_unconsumed=settings.max_unconsumed,
            worker_id=settings.ident,
        )
        await local.start()
        return local
    from ._pg._host import PgHost

    host = PgHost(
        rt,
        pg_store,
        by_name,
        settings.role,
        worker_id=settings.ident,
        idle_unload=settings.idle_unload,
        max_unconsumed=settings.max_unconsumed,
        capacity=settings.capacity,
        drain_timeout=settings.drain_timeout,
    )
    await host.start()
    return host


async def _open_source(
    stack: contextlib.AsyncExitStack,
    settings: Settings,
    rt: Runtime,
    pg_store: PostgresStore | None,
    host: Host,
) -> FeedSource:
    """Where the SSE feed reads: on PostgreSQL the shared log (any process's commits; a
    process that runs agents publishes their live frames), else the in-process host."""
    if pg_store is None:
        return cast(LocalHost, host)
    from ._pg._feed import open_pg_feed

    pg_feed = await open_pg_feed(
        pg_store, rt if settings.role != "api" else None, name=settings.ident
    )
    stack.push_async_callback(pg_feed.close)  # wakes every reader: their feeds end
    return pg_feed.source


def _server_store(url: str) -> PostgresStore:
    """The PostgreSQL store of a served process: lease TTL 15 s unless the URL sets one
    (design/SERVICE.md §3.3: a paused owner is caught within TTL + one sweep)."""
    from ..session.store.postgres import PostgresStore

    store = PostgresStore(url, notify=True)  # its commits wake the SSE readers of any node
    if "lease_ttl=" not in url.partition("?")[2]:
        store.lease_ttl = SERVER_LEASE_TTL
    return store
