"""``@tool``: a tool from a plain function.

The schema comes from the type hints (a pydantic model is built from the signature), the
description and each argument's description from the docstring (Google, NumPy or reST style,
parsed by ``docstring_parser``); arguments are validated by that model. A parameter annotated
``ToolExec`` receives the call's context and is left out of the schema. A synchronous function
runs in a worker thread so it cannot stall the event loop.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import typing
from collections.abc import Callable
from typing import Any, overload

import docstring_parser
import pydantic

from ..errors import ToolDefinitionError
from ._define import Reconcile, Tool, ToolExec, define_tool

__all__ = ["tool"]

ToolFunction = Callable[..., Any]


@overload
def tool(fn: ToolFunction, /) -> Tool[pydantic.BaseModel]: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    concurrency_safe: bool | Callable[[Any], bool] = False,
    timeout: float | None = None,
    durable_dispatch: bool | None = None,
    reconcile: Reconcile | None = None,
) -> Callable[[ToolFunction], Tool[pydantic.BaseModel]]: ...


def tool(
    fn: ToolFunction | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    concurrency_safe: bool | Callable[[Any], bool] = False,
    timeout: float | None = None,
    durable_dispatch: bool | None = None,
    reconcile: Reconcile | None = None,
) -> Tool[pydantic.BaseModel] | Callable[[ToolFunction], Tool[pydantic.BaseModel]]:
    """Make a tool of a function: ``@tool`` or ``@tool(name=..., description=..., ...)``.

    Args:
        fn: the function (async, or sync: it then runs in a worker thread).
        name: the tool's name (default: the function's name).
        description: what the model is told (default: the docstring without its sections).
        concurrency_safe: as for ``define_tool``: ``True`` lets calls run in parallel.
        timeout: seconds before the call's signal aborts (cooperative, as ``define_tool``).
        durable_dispatch: as for ``define_tool``: whether a call starts only once its
            intent is durable (``None``: unless it is concurrency-safe).
        reconcile: as for ``define_tool``: ``reconcile(call, exec) -> ToolResult | None``,
            asked at recovery for a call whose outcome is unknown; ``exec.arguments`` is the
            validated arguments model.

    Raises:
        ToolDefinitionError: the function cannot be described (``*args``/``**kwargs``, a
            type pydantic cannot validate, a bad name).
    """

    def build(fn: ToolFunction) -> Tool[pydantic.BaseModel]:
        return _from_function(
            fn,
            name=name,
            description=description,
            concurrency_safe=concurrency_safe,
            timeout=timeout,
            durable_dispatch=durable_dispatch,
            reconcile=reconcile,
        )

    if fn is not None:
        return build(fn)
    return build


def _from_function(
    fn: ToolFunction,
    *,
    name: str | None,
    description: str | None,
    concurrency_safe: bool | Callable[[Any], bool],
    timeout: float | None,
    durable_dispatch: bool | None = None,
    reconcile: Reconcile | None = None,
) -> Tool[pydantic.BaseModel]:
    if not callable(fn):
        raise ToolDefinitionError("@tool decorates a function")
    tool_name = name if name is not None else getattr(fn, "__name__", "")
    signature = inspect.signature(fn)
    hints = _hints(fn)
    doc = docstring_parser.parse(inspect.getdoc(fn) or "")
    arg_docs = {p.arg_name: p.description for p in doc.params if p.description}
    exec_param: str | None = None
    fields: dict[str, Any] = {}
    for param in signature.parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ToolDefinitionError(
                f"tool {tool_name!r}: *args and **kwargs cannot be described to a model"
            )
        if param.kind is param.POSITIONAL_ONLY:
            raise ToolDefinitionError(
                f"tool {tool_name!r}: positional-only parameter {param.name!r}; arguments are "
                "passed by name"
            )
        annotation = hints.get(param.name, Any)
        if annotation is ToolExec:
            if exec_param is not None:
                raise ToolDefinitionError(f"tool {tool_name!r}: more than one ToolExec parameter")
            exec_param = param.name
            continue
        default = ... if param.default is param.empty else param.default
        fields[param.name] = (
            annotation,
            pydantic.Field(default=default, description=arg_docs.get(param.name)),
        )
    try:
        model = pydantic.create_model(
            f"{tool_name}_arguments",
            __config__=pydantic.ConfigDict(extra="forbid"),
            **fields,
        )
        model.model_json_schema()  # fails now, not at the first request, for unschemable types
    except (pydantic.PydanticUserError, pydantic.PydanticSchemaGenerationError, TypeError) as exc:
        raise ToolDefinitionError(f"tool {tool_name!r}: {exc}") from None
    names = tuple(fields)
    call = _body(fn, names, exec_param)
    if description is None:
        description = "\n\n".join(
            part for part in (doc.short_description, doc.long_description) if part
        )
    return define_tool(
        name=tool_name,
        description=description,
        parameters=typing.cast("type[pydantic.BaseModel]", model),
        execute=call,
        concurrency_safe=concurrency_safe,
        timeout=timeout,
        durable_dispatch=durable_dispatch,
        reconcile=reconcile,
    )


def _hints(fn: ToolFunction) -> dict[str, Any]:
    """The resolved annotations; ``ToolExec`` resolves even where it was imported only for
    type checking."""
    try:
        return typing.get_type_hints(fn, localns={"ToolExec": ToolExec})
    except Exception as exc:  # a NameError of an unresolvable string annotation, mostly
        raise ToolDefinitionError(
            f"tool {getattr(fn, '__name__', fn)!r}: cannot resolve its type hints: {exc}"
        ) from None


def _body(
    fn: ToolFunction, names: tuple[str, ...], exec_param: str | None
) -> Callable[[pydantic.BaseModel, ToolExec], Any]:
    """The ``execute(args, exec)`` the pipeline calls: keyword arguments from the model."""
    is_async = inspect.iscoroutinefunction(fn)

    async def execute(args: pydantic.BaseModel, exec: ToolExec) -> Any:
        kwargs = {name: getattr(args, name) for name in names}
        if exec_param is not None:
            kwargs[exec_param] = exec
        if is_async:
            return await fn(**kwargs)
        return await asyncio.to_thread(functools.partial(fn, **kwargs))

    return execute
