"""What the project's retrievers share: the query is checked before LlamaIndex's dispatch touches it, the LM
steps of a retrieval report to the retriever's callback manager, and settings, LM and DSPy program are taken and
checked in one place."""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import dspy
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks import CallbackManager
from llama_index.core.schema import NodeWithScore, QueryBundle, QueryType
from pydantic import BaseModel

from ..lm.events import step_callbacks
from ..lm.programs import ProgramSource, load_program, save_program, step_prompts, update_step_prompts
from ..lm.steps import resolve_lm
from ..rules.counters import count
from ..rules.validation import check_query
from ..stores.consistency import aread_one_version, read_one_version

__all__ = ["CheckedQueryRetriever", "ProgramRetriever"]


def _checked(query: QueryType) -> QueryBundle:
    if isinstance(query, QueryBundle):
        text = check_query(query.query_str)
        return query if text == query.query_str else QueryBundle(
            query_str=text, custom_embedding_strs=query.custom_embedding_strs, embedding=query.embedding
        )
    return QueryBundle(query_str=check_query(query))


class CheckedQueryRetriever(BaseRetriever):
    """A ``BaseRetriever`` whose ``retrieve``/``aretrieve`` reject bad queries with a clear error.

    Non-strings raise ``TypeError``; empty or white-space queries raise ``ValueError``; control characters become
    spaces and over-long queries are cut (:func:`~llama_index_mhop.rules.validation.check_query`). The LM steps of a
    retrieval report their LLM events to the retriever's ``callback_manager`` (see
    :mod:`~llama_index_mhop.lm.events`).
    """

    def retrieve(self, str_or_query_bundle: QueryType) -> list[NodeWithScore]:
        bundle = _checked(str_or_query_bundle)
        count(f"queries_served.{type(self).__name__}")
        with step_callbacks(getattr(self, "callback_manager", None)):
            return read_one_version(super().retrieve, bundle)

    async def aretrieve(self, str_or_query_bundle: QueryType) -> list[NodeWithScore]:
        bundle = _checked(str_or_query_bundle)
        count(f"queries_served.{type(self).__name__}")
        with step_callbacks(getattr(self, "callback_manager", None)):
            return await aread_one_version(super().aretrieve, bundle)


class ProgramRetriever(CheckedQueryRetriever):
    """A retriever with a frozen pydantic settings object (``config``), an optional LM and a DSPy program
    (``program``): a retrieval is one call of the program on the query bundle, whose prediction carries the
    ``nodes`` and the ``trace`` (kept as ``last_trace``).

    Every subclass takes these keyword arguments besides its own:

    Args:
        config: the retriever's settings (an instance of its ``config_type``); or give them one by one as keywords.
        lm: a DSPy LM (optional; without one, ``dspy.settings.lm`` when a step runs, else LLM-free).
        llm: a LlamaIndex LLM (optional; not together with ``lm``).
        program: a compiled program of the subclass (a module of its class, or the path of one saved by
            :meth:`save_program`).
        callback_manager: LlamaIndex callbacks.
        verbose: log each query's steps at INFO.
        **settings: any field of ``config_type``.

    Raises:
        ValueError: a setting unknown (named, with the settings there are), ``config`` together with keyword
            settings, a setting out of range (pydantic's ``ValidationError`` names the field), or a program file
            of another shape.
        TypeError: ``lm`` is not a DSPy LM, or ``program`` a module of another class.
    """

    config_type: ClassVar[type[BaseModel]]
    program: Any
    last_trace: dict[str, Any]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # help() and inspect.signature show every setting as a keyword argument, read from ``config_type``.
        for name in ("__init__", "from_defaults"):
            own = cls.__dict__.get(name)
            function = getattr(own, "__func__", own)
            if callable(function) and "config_type" in cls.__dict__:
                function.__signature__ = settings_signature(function, cls.config_type)

    def __init__(
        self,
        *,
        config: BaseModel | None = None,
        lm: dspy.BaseLM | None = None,
        llm: Any = None,
        program: ProgramSource | None = None,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
        **settings: Any,
    ) -> None:
        self.config: Any = self.settings(config, settings)
        self.lm = resolve_lm(lm=lm, llm=llm)
        super().__init__(callback_manager=callback_manager, verbose=verbose)
        self.program = self._build_program()
        if program is not None:
            load_program(self.program, program)
        self.last_trace = {}

    @classmethod
    def settings(cls, config: BaseModel | None, settings: dict[str, Any]) -> Any:
        """``config`` if given, else the ``config_type`` built (and checked) from keyword ``settings``."""
        fields = cls.config_type.model_fields
        unknown = [name for name in settings if name not in fields]
        if unknown:
            raise ValueError(f"{cls.__name__} has no setting {unknown[0]!r}; its settings: {', '.join(fields)}")
        if config is not None and settings:
            raise ValueError(f"give config= or keyword settings, not both (got {', '.join(settings)})")
        if config is not None and not isinstance(config, cls.config_type):
            raise TypeError(f"{cls.__name__} takes config={cls.config_type.__name__}(...), "
                            f"got {type(config).__name__}")
        return config if config is not None else cls.config_type(**settings)

    def _build_program(self) -> dspy.Module:
        """The subclass's DSPy program, built from ``self.config`` and ``self.lm``."""
        raise NotImplementedError

    def save_program(self, path: str | os.PathLike[str]) -> Path:
        """Save the DSPy program (its predictors' instructions and demos) as DSPy's JSON."""
        return save_program(self.program, path)

    def _step_predictors(self) -> dict[str, Any]:
        """The predictor of each LM step, by step name (the subclass's program holds them)."""
        return {}

    def _get_prompts(self) -> dict[str, Any]:
        """Each LM step's instructions as a ``PromptTemplate``, by step name (``get_prompts()``)."""
        return step_prompts(self._step_predictors())

    def _update_prompts(self, prompts_dict: dict[str, Any]) -> None:
        """New instructions for the named steps (``update_prompts({step: PromptTemplate(...)})``)."""
        update_step_prompts(self._step_predictors(), prompts_dict)

    def _get_prompt_modules(self) -> dict[str, Any]:
        return {}

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        prediction = self.program(query=query_bundle)
        self.last_trace = prediction.trace
        return prediction.nodes

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        prediction = await self.program.acall(query=query_bundle)
        self.last_trace = prediction.trace
        return prediction.nodes


def settings_signature(function: Callable[..., Any], config_type: type[BaseModel]) -> inspect.Signature:
    """``function``'s signature with its ``**kwargs`` spelled out: the keyword arguments every
    :class:`ProgramRetriever` takes, then each field of ``config_type`` with its default."""
    own = inspect.signature(function)
    keyword = inspect.Parameter.KEYWORD_ONLY
    shared = [p for p in inspect.signature(ProgramRetriever.__init__).parameters.values() if p.kind is keyword]
    fields = [inspect.Parameter(name, keyword, default=field.default, annotation=field.annotation)
              for name, field in config_type.model_fields.items()]
    parameters = [p for p in own.parameters.values() if p.kind is not p.VAR_KEYWORD]
    seen = {p.name for p in parameters}
    for parameter in [*shared, *fields]:
        if parameter.name not in seen:
            seen.add(parameter.name)
            parameters.append(parameter)
    return own.replace(parameters=parameters)
