"""Where norms, models and data sets come from: normbench's own, installed plugins (entry
points ``normbench.norms``, ``normbench.models``, ``normbench.data``), user config
directories, and import paths (``norm=mypkg.norms:PowerNorm``).

One registry for every source (as timm's create_norm keeps one table behind one constructor):
a plugin is looked up by the name the user gave, resolved to a Python object by its import
path, and its options are read off its signature. Nothing here imports torch; resolving a
user's object imports the user's module, which may.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import os
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from normbench.core.errors import UsageError
from normbench.core.keys import REQUIRED, Key

KINDS = ("norm", "model", "data")
ENTRY_POINT_GROUPS = {
    "norm": "normbench.norms",
    "model": "normbench.models",
    "data": "normbench.data",
}
IMPORT_PATH = re.compile(r"[A-Za-z_][\w.]*[:.][A-Za-z_][\w.]*")


@dataclass(frozen=True)
class Plugin:
    """A norm, model or data set from outside normbench's own code."""

    kind: str  # norm | model | data
    name: str  # as the user names it: powernorm, mypkg.norms:PowerNorm
    target: str  # the import path of the object: mypkg.norms:PowerNorm
    source: str  # where it came from, for `normbench list`


def is_import_path(value: str) -> bool:
    """``pkg.module:Object``, as a user writes it on the command line (``norm=...``)."""
    return ":" in value and bool(IMPORT_PATH.fullmatch(value))


def canonical_target(target: str) -> str:
    """``pkg.module:Object``; Hydra's dotted ``pkg.module.Object`` (a YAML's ``_target_``)
    becomes the same, so that both spellings of one object are one experiment (one run id)."""
    if ":" in target:
        return target
    module, _, attribute = target.rpartition(".")
    return f"{module}:{attribute}"


def lookup(kind: str, value: str) -> Plugin | None:
    """The plugin ``value`` names for ``kind``: an installed entry point, or an import path;
    None when it is neither (a shipped or config-directory option, or a typo)."""
    if value in entry_points(kind):
        return entry_points(kind)[value]
    if is_import_path(value):
        return Plugin(kind, value, value, "import path")
    return None


@functools.cache
def entry_points(kind: str) -> dict[str, Plugin]:
    """Plugins that installed packages register for ``kind``, by entry-point name."""
    from importlib.metadata import entry_points as installed

    found = {}
    for point in installed(group=ENTRY_POINT_GROUPS[kind]):
        dist = f"{point.dist.name} {point.dist.version}" if point.dist else "an installed package"
        found[point.name] = Plugin(kind, point.name, point.value, f"entry point ({dist})")
    return found


@functools.cache
def resolve(target: str, what: str) -> Any:
    """The object an import path names. The current directory is searched first, as
    ``python -m`` would (the ``normbench`` script itself does not put it on sys.path), so a
    package beside the user's data and configs imports without installing it. Any failure
    is one line naming ``what`` (the key and value the user wrote)."""
    module_name, _, attribute = canonical_target(target).partition(":")
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except Exception as err:  # ImportError, or the user's module raising while imported
        raise UsageError(
            f"{what}: cannot import {module_name} ({type(err).__name__}: {err}); an import "
            "path looks like package.module:Object, importable from here or installed"
        ) from None
    try:
        return functools.reduce(getattr, attribute.split("."), module)
    except AttributeError:
        raise UsageError(f"{what}: {module_name} has no attribute {attribute}") from None


def signature_keys(obj: Any, fixed: tuple[str, ...], what: str) -> dict[str, tuple[Key, Any]]:
    """The options a plugin takes, read off its signature: every parameter after the
    ``fixed`` ones (a norm's num_features and layout; a model builder's cfg, make_norm,
    input_shape and num_classes), each with the Key that checks its values (from its
    annotation, else its default's type) and its default; a parameter without a default is
    required: its default is REQUIRED. A parameter whose default is not a number, a bool, a
    string or None (a tuple, an object) is no key: the plugin keeps its default. ``**kwargs``
    adds nothing: unknown keys stay refused."""
    parameters = _parameters(obj, what)
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) < len(fixed) and not any(p.kind is p.VAR_POSITIONAL for p in parameters):
        names = ", ".join(fixed)
        raise UsageError(f"{what}: {getattr(obj, '__name__', obj)} must accept ({names}, ...)")
    options = {}
    for parameter in parameters[len(fixed) :]:
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        plain = isinstance(parameter.default, (int, float, str, type(None)))
        if not (plain or parameter.default is parameter.empty):
            continue
        default = REQUIRED if parameter.default is parameter.empty else parameter.default
        options[parameter.name] = (_key_for(parameter), default)
    return options


def accepted(obj: Any, names: Iterable[str], through_kwargs: Iterable[str] = ()) -> set[str]:
    """Which of ``names`` a call of ``obj`` takes: those its signature names, and, when it has
    ``**kwargs``, those in ``through_kwargs`` too (what it passes on to a base class)."""
    parameters = _parameters(obj, repr(obj))
    named = {p.name for p in parameters if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
    taken = set(names) & named
    if any(p.kind is p.VAR_KEYWORD for p in parameters):
        taken |= set(names) & set(through_kwargs)
    return taken


def _parameters(obj: Any, what: str) -> list[inspect.Parameter]:
    try:
        return list(inspect.signature(obj).parameters.values())
    except (TypeError, ValueError):
        raise UsageError(f"{what}: {obj!r} is not callable with a signature") from None


def _key_for(parameter: inspect.Parameter) -> Key:
    """A Key from an annotation (int, float, bool, str, optionally | None) or a default."""
    annotation = parameter.annotation
    if isinstance(annotation, str):  # from __future__ import annotations
        text = annotation.replace(" ", "")
        nullable = "None" in text
        base = text.replace("|None", "").replace("None|", "").replace("Optional[", "")
        kind = {"int": int, "float": float, "bool": bool, "str": str}.get(base.rstrip("]"))
    else:
        nullable, kind = False, annotation if annotation in (int, float, bool, str) else None
    if kind is None and parameter.default is not parameter.empty:
        value = parameter.default
        kind = type(value) if isinstance(value, (int, float, bool, str)) else None
        nullable = nullable or value is None
    if kind is None:
        return Key(str, nullable=True)  # unannotated, no usable default: taken as text
    return Key(kind, nullable=nullable or parameter.default is None)
