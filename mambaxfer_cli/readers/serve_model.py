"""The model a ``vllm serve`` line names, resolved as ``--model`` is (a preset's source repo id
is that preset), with ``--hf-overrides`` over the config's top level (``config.update``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from mambaxfer_cli.readers import model_source as ms
from mambaxfer_cli.errors import UserError
from mambaxfer_cli.planning.model import ModelSpec
from mambaxfer_cli.readers.model_config import Startup, spec_from_config


def _preset_for(name: str) -> str | None:
    if name in ms.preset_names():
        return name
    if ms.cached_repo_config(name) if name.count("/") == 1 else None:
        return None
    return ms.preset_for_source(name)


def load_serve_model(name: str, *, conv_dtype: str | None = None, ssm_dtype: str | None = None,
                     num_spec: int | None = None, hf_overrides: Mapping[str, Any] | None = None,
                     indexer_kv_dtype: str | None = None, startup: Startup | None = None) -> ModelSpec:
    overrides = dict(hf_overrides or {})
    preset = _preset_for(name)
    cli: dict[str, Any] = {"conv_dtype": conv_dtype, "ssm_dtype": ssm_dtype, "num_spec": num_spec,
                           "indexer_kv_dtype": indexer_kv_dtype, "startup": startup}
    if not overrides:
        return ms.load_model(preset or name, **cli)
    path = ms.PRESET_DIR / f"{preset}.yaml" if preset else Path(name).expanduser()
    if path.is_dir():
        path = next((path / c for c in ("config.json", "model.yaml") if (path / c).is_file()), path / "config.json")
    if path.suffix in (".yaml", ".yml") and path.is_file():
        data = ms.read_yaml(path)
        file_cli = {k: data.get(k) for k in ("conv_dtype", "ssm_dtype", "num_spec")}
        file_cli.update({k: v for k, v in cli.items() if v is not None})
        return spec_from_config({**data["config"], **overrides}, name=str(data.get("name") or preset or path.stem),
                                source=str(data.get("source") or path), **file_cli)
    if path.is_file():
        config = ms.read_json(path)
        return spec_from_config({**config, **overrides}, name=ms.config_label(path), source=str(path), **cli)
    cached = ms.cached_repo_config(name) if name.count("/") == 1 else None
    if cached is None:
        ms.load_model(name)          # the same one-line error as --model gives
        raise UserError(f"cannot resolve model '{name}'")
    return spec_from_config({**ms.read_json(cached), **overrides}, name=name, source=name, **cli)
