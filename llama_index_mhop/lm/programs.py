"""A component's compiled DSPy program (its predictors' instructions and demos, at ``component.program``): loaded
from a module or DSPy's JSON, saved as DSPy's JSON; and its predictors' instructions as LlamaIndex prompts."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import dspy
from llama_index.core.prompts import BasePromptTemplate, PromptTemplate

from ..rules.atomic_files import atomic_path

__all__ = ["ProgramSource", "load_program", "save_program", "step_prompts", "update_step_prompts"]

#: What ``program=`` accepts: a path to DSPy's JSON, or a module of the component's program class.
ProgramSource = dspy.Module | str | os.PathLike[str]


def load_program(target: dspy.Module, source: ProgramSource) -> dspy.Module:
    """Load ``source``'s predictor state (instructions and demos) into ``target`` and return ``target``.

    Raises:
        TypeError: ``source`` is a module of another class.
        FileNotFoundError: ``source`` is a path that does not exist.
        ValueError: the file is not a DSPy program of ``target``'s shape."""
    if isinstance(source, dspy.Module):
        if type(source) is not type(target):
            raise TypeError(f"program= must be a {type(target).__name__}, got {type(source).__name__}")
        target.load_state(source.dump_state())
        return target
    path = Path(source)
    if not path.is_file():
        raise FileNotFoundError(f"no program file at {path}")
    try:
        target.load(str(path))
    except (KeyError, ValueError, TypeError) as exc:  # another program's JSON, or not a DSPy program at all
        raise ValueError(f"{path} is not a saved {type(target).__name__}: {exc}") from exc
    return target


def save_program(program: dspy.Module, path: str | os.PathLike[str]) -> Path:
    """Write the program's predictor state as DSPy's JSON (``.json``) and return the path.

    The file is written under a temporary name and renamed into place: a crash never leaves half a program."""
    path = Path(path)
    if path.suffix != ".json":
        raise ValueError(f"a program is saved as JSON: give a path ending in .json, got {path}")
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as partial:  # the same suffix: DSPy picks the format by it
        program.save(str(partial))
    return path


def step_prompts(predictors: Mapping[str, Any]) -> dict[str, BasePromptTemplate]:
    """``{step: PromptTemplate(instructions)}`` of each step's predictor (a ``PromptMixin``'s ``_get_prompts``)."""
    return {step: PromptTemplate(predictor.signature.instructions) for step, predictor in predictors.items()}


def update_step_prompts(predictors: Mapping[str, Any], prompts: Mapping[str, Any]) -> None:
    """Each step named in ``prompts`` takes the prompt's text as its instructions (``_update_prompts``); keys with a
    ``:`` are a sub-module's.

    Raises:
        KeyError: a key names no step of the component (the message lists its steps).
        TypeError: a value is neither a LlamaIndex prompt nor a string."""
    for key, prompt in prompts.items():
        if ":" in key:
            continue
        if key not in predictors:
            raise KeyError(f"no LM step {key!r}; the steps are {', '.join(sorted(predictors)) or 'none'}")
        if not isinstance(prompt, (BasePromptTemplate, str)):
            raise TypeError(f"prompt {key!r} must be a PromptTemplate or a string, got {type(prompt).__name__}")
        text = prompt if isinstance(prompt, str) else prompt.get_template()
        predictors[key].signature = predictors[key].signature.with_instructions(text)
