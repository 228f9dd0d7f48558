"""A component's compiled DSPy program: load it from a module or DSPy's JSON, save it as DSPy's JSON.

Every component with LM steps holds its predictors in one ``dspy.Module`` at ``component.program``; ``program=``
at construction loads a compiled one (a path to the JSON that ``save_program``/``dspy.Module.save`` wrote, or a
module of the same class) and ``save_program(path)`` writes it. Only the predictors' state (instructions, demos)
moves: the component's settings, LM and stores stay its own.
"""

from __future__ import annotations

import os
from pathlib import Path

import dspy

__all__ = ["ProgramSource", "load_program", "save_program"]

#: What ``program=`` accepts: a path to DSPy's JSON, or a module of the component's program class.
ProgramSource = dspy.Module | str | os.PathLike[str]


def load_program(target: dspy.Module, source: ProgramSource) -> dspy.Module:
    """Load ``source``'s predictor state (instructions and demos) into ``target`` and return ``target``.

    Raises:
        TypeError: ``source`` is a module of another class.
        FileNotFoundError: ``source`` is a path that does not exist.
        ValueError: the file is not a DSPy program of ``target``'s shape.
    """
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

    The file is written under a temporary name and renamed into place: a crash never leaves half a program.
    """
    path = Path(path)
    if path.suffix != ".json":
        raise ValueError(f"a program is saved as JSON: give a path ending in .json, got {path}")
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.stem}.partial.json")  # DSPy picks the format by the suffix
    program.save(str(partial))
    os.replace(partial, path)
    return path
