"""Resolve ``--model``: a built-in preset, a config.json, a model directory, a YAML model file,
or a Hugging Face repo id already in the local cache (never the network)."""

from __future__ import annotations

import difflib
import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

from mambaxfer_cli.limits import MAX_REF_BYTES
from mambaxfer_cli.readers.documents import parse_json, parse_yaml, read_bounded, read_text
from mambaxfer_cli.errors import UserError, clipped
from mambaxfer_cli.planning.model import ModelSpec, Variant
from mambaxfer_cli.planning.variants import VARIANTS
from mambaxfer_cli.readers.model_config import spec_from_config

PRESET_DIR = Path(__file__).parent.parent / "presets"
# The presets' YAML files parsed, for loading one without importing PyYAML (about 10 ms of a
# command's start); scripts/compile_presets.py writes it, tests/test_model_source.py keeps it equal.
COMPILED_PRESETS = PRESET_DIR / "compiled.json"
_OVERRIDE_KEYS = ("variant", "conv_dtype", "ssm_dtype", "num_spec", "kv_heads", "head_size", "indexer_kv_dtype")
_FILE_SUFFIXES = (".json", ".yaml", ".yml")


def preset_names() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


@lru_cache(maxsize=None)
def read_yaml(path: Path) -> dict[str, Any]:
    return _model_file(parse_yaml(read_text(path, str(path)), str(path)), path)


@lru_cache(maxsize=None)
def compiled_presets() -> dict[str, Any]:
    """Each preset's model file as scripts/compile_presets.py parsed it from the YAML."""
    data: dict[str, Any] = json.loads(COMPILED_PRESETS.read_text(encoding="utf-8"))
    return data


def preset_file(name: str) -> dict[str, Any]:
    """A built-in preset's model file: compiled, else (a preset added since) its YAML."""
    path = PRESET_DIR / f"{name}.yaml"
    compiled = compiled_presets().get(name)
    return read_yaml(path) if compiled is None else _model_file(compiled, path)


def _model_file(data: Any, path: Path) -> dict[str, Any]:
    """A model file's document, checked: a ``config`` mapping and only the known top-level keys."""
    if not isinstance(data, dict) or not isinstance(data.get("config"), dict):
        raise UserError(f"{path}: a model YAML file needs a 'config:' mapping of Hugging Face config keys "
                        f"(see docs/models.md)")
    unknown = set(map(str, data)) - {"name", "source", "description", "config", *_OVERRIDE_KEYS}
    if unknown:
        raise UserError(f"{path}: unknown top-level keys {sorted(unknown)}; allowed: name, source, "
                        f"description, config, {', '.join(_OVERRIDE_KEYS)}")
    if not all(isinstance(key, str) for key in data["config"]):
        raise UserError(f"{path}: the keys under 'config:' must be strings, as in a config.json")
    return data


def read_json(path: Path) -> dict[str, Any]:
    data = parse_json(read_text(path, str(path)), str(path))
    if not isinstance(data, dict):
        raise UserError(f"{path}: a config.json must hold a JSON object, found {type(data).__name__}")
    return data


def hf_cache_dir() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]) / "hub"
    return Path.home() / ".cache" / "huggingface" / "hub"


def config_label(path: Path) -> str:
    """A model's name from its config file: a ``config.json``'s directory, else the file's stem."""
    if path.name != "config.json":
        return path.stem
    try:
        folder = path.parent.name or path.resolve().parent.name
    except OSError:
        folder = ""
    return folder or path.stem


def cached_repo_config(repo_id: str) -> Path | None:
    repo = hf_cache_dir() / f"models--{repo_id.replace('/', '--')}"
    snapshots = repo / "snapshots"
    if not snapshots.is_dir():
        return None
    ref = repo / "refs" / "main"
    if ref.is_file():
        commit = read_bounded(ref, str(ref), MAX_REF_BYTES, "a commit hash").decode("ascii", "replace").strip()
        pinned = snapshots / commit / "config.json"
        if pinned.is_file():
            return pinned
    candidates = sorted(snapshots.glob("*/config.json"), key=lambda p: p.stat().st_mtime, reverse=True)
    return candidates[0] if candidates else None


def local_config(name: str) -> Path | None:
    """The config.json ``name`` finds here: the file, a folder's, a cached repo id's (None: none)."""
    path = Path(name).expanduser()
    try:
        path = path / "config.json" if path.is_dir() else path
        if path.is_file():
            return path
    except OSError:         # a name too long for a path, a loop of links: not a file here
        return None
    return cached_repo_config(name) if name.count("/") == 1 else None


def load_model(model: str, **cli: Any) -> ModelSpec:
    """Find and read the model named by ``--model`` (or a serve line's) with ``spec_from_config``'s
    overrides (``variant``, ..., ``startup``, ``hf_overrides``); CLI overrides beat file overrides."""
    if model in preset_names():
        return _from_model_file(preset_file(model), PRESET_DIR / f"{model}.yaml", cli, default_name=model)
    if not model.strip() or "\0" in model:
        raise UserError(f"--model {model!r}: not a model name or path")
    path = Path(model).expanduser()
    try:
        kind = "dir" if path.is_dir() else "file" if path.is_file() else None
    except OSError as exc:   # a name too long for the file system, a loop of symlinks, ...
        raise UserError(f"--model {clipped(model)}: {exc.strerror or exc}") from None
    if kind == "dir":
        for candidate in ("config.json", "model.yaml"):
            if (path / candidate).is_file():
                return load_model(str(path / candidate), **cli)
        raise UserError(f"{path}: directory holds no config.json")
    if kind == "file":
        if path.suffix in (".yaml", ".yml"):
            return _from_model_file(read_yaml(path), path, cli, default_name=path.stem)
        config = read_json(path)
        return spec_from_config(config, name=config_label(path), source=str(path), **cli)
    # Repo ids often hold dots ('ai21labs/Jamba-v0.1'): only a file suffix marks a path.
    if (model.count("/") == 1 and not model.startswith((".", "/", "~"))
            and path.suffix.lower() not in _FILE_SUFFIXES):
        try:
            cached = cached_repo_config(model)
        except (OSError, UnicodeDecodeError) as exc:
            raise UserError(f"'{clipped(model)}': cannot look it up in the Hugging Face cache: "
                            f"{getattr(exc, 'strerror', None) or exc}") from None
        if cached is None:
            preset = preset_for_source(model)
            if preset is not None:       # a preset's own source: the preset holds its config
                return _from_model_file(preset_file(preset), PRESET_DIR / f"{preset}.yaml", cli, default_name=preset)
            raise UserError(f"'{clipped(model)}' is not in the local Hugging Face cache ({hf_cache_dir()}) nor a "
                            f"built-in preset's source; mambaxfer never downloads: fetch its config.json "
                            f"first, or pass a path")
        # The snapshot directory's name is the commit the cache holds: the plan records it.
        return spec_from_config(read_json(cached), name=model, source=model, revision=cached.parent.name, **cli)
    # A name with a dot ('qwen3.5') is a preset name mistyped, unless it looks like a path.
    if os.sep in model or model.startswith((".", "~")) or path.suffix.lower() in _FILE_SUFFIXES:
        raise UserError(f"{clipped(model)}: no such file or directory")
    # Preset names match whatever the case ('--model Jamba'), once no file of that name exists.
    preset = {name.lower(): name for name in preset_names()}.get(model.strip().lower())
    if preset is not None:
        return _from_model_file(preset_file(preset), PRESET_DIR / f"{preset}.yaml", cli, default_name=preset)
    close = difflib.get_close_matches(model, preset_names(), n=1, cutoff=0.4)
    hint = f"; did you mean '{close[0]}'?" if close else ""
    raise UserError(f"unknown model '{clipped(model)}'{hint} (built-in presets: {', '.join(preset_names())}; "
                    f"or pass a config.json, a model directory, a YAML file or a cached repo id)")


def preset_for_source(repo_id: str) -> str | None:
    """The preset whose source is this repo id (any case), if one is."""
    sources = {name: preset_file(name).get("source") for name in preset_names()}
    return {str(source).lower(): name for name, source in sources.items() if source}.get(repo_id.lower())


def _from_model_file(data: dict[str, Any], path: Path, cli: dict[str, Any], default_name: str) -> ModelSpec:
    merged = {key: data.get(key) for key in _OVERRIDE_KEYS}
    given_by = {key: f"{path.name}: {key}" for key in ("conv_dtype", "ssm_dtype") if data.get(key) is not None}
    merged.update({key: value for key, value in cli.items() if value is not None})
    given_by.update({key: f"--{key.replace('_', '-')}" for key in ("conv_dtype", "ssm_dtype")
                     if cli.get(key) is not None})
    if merged["variant"] is not None and not isinstance(merged["variant"], Variant):
        try:
            merged["variant"] = Variant(str(merged["variant"]).lower())
        except ValueError:
            raise UserError(f"{path}: variant must be one of {', '.join(VARIANTS)}") from None
    return spec_from_config(data["config"], name=str(data.get("name") or default_name),
                            source=str(data.get("source") or path), given_by=given_by, **merged)


def preset_description(name: str) -> str:
    return str(preset_file(name).get("description", ""))
