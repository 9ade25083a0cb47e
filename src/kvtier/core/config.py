"""Load the workflow config and validate it against workflow/schemas/config.schema.yaml; read a JSON record and
check it against its schema.

Validation fills defaults from the schema and refuses unknown keys, wrong types and out-of-range values with a
message that names the key and the value, so a typo never silently falls back to a default.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from .errors import KvtierError
from .paths import schema_path


def load_yaml(path: str | os.PathLike) -> Any:
    path = Path(path)
    try:
        with open(path, encoding="utf-8") as f:
            return yaml.safe_load(f)
    except FileNotFoundError:
        raise KvtierError(f"{path}: file not found") from None
    except yaml.YAMLError as exc:
        raise KvtierError(f"{path}: not valid YAML: {exc}") from None


def _extend_with_defaults(validator_class):
    """jsonschema's documented recipe: set each property's `default` before validating the object."""
    validate_properties = validator_class.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for name, subschema in properties.items():
                if "default" in subschema and name not in instance:
                    instance[name] = _copy(subschema["default"])
        yield from validate_properties(validator, properties, instance, schema)

    return jsonschema.validators.extend(validator_class, {"properties": set_defaults})


def _copy(value):
    return yaml.safe_load(yaml.safe_dump(value))


_DefaultingValidator = _extend_with_defaults(jsonschema.Draft202012Validator)


def _key_of(error: jsonschema.ValidationError) -> str:
    return ".".join(str(p) for p in error.absolute_path) or "(top level)"


def _describe(error: jsonschema.ValidationError) -> str:
    key = _key_of(error)
    if error.validator == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        unknown = sorted(set(error.instance) - set(allowed))
        where = f"under '{key}'" if error.absolute_path else "at the top level"
        return (f"unknown key {', '.join(repr(u) for u in unknown)} {where} "
                f"(allowed: {', '.join(allowed)})")
    if error.validator == "type":
        return f"key '{key}' = {error.instance!r}: must be of type {error.validator_value}"
    if error.validator == "required":
        return f"key '{key}': {error.message}"
    if error.validator == "pattern" and "x-refused" in error.schema:  # the schema says why, in words
        return f"key '{key}' = {error.instance!r}: {error.schema['x-refused']}"
    return f"key '{key}' = {error.instance!r}: {error.message}"


def validate(config: dict, source: str = "config", schema_file: str | os.PathLike | None = None) -> dict:
    """Validate `config` in place (filling defaults) and return it; raise KvtierError naming every problem."""
    if not isinstance(config, dict):
        raise KvtierError(f"{source}: the config must be a mapping of keys to values, got {type(config).__name__}")
    schema = load_yaml(schema_file or schema_path("config"))
    validator = _DefaultingValidator(schema)
    errors = sorted(validator.iter_errors(config), key=lambda e: (list(map(str, e.absolute_path)), e.message))
    if errors:
        lines = "\n".join(f"  - {_describe(e)}" for e in errors)
        raise KvtierError(f"{source}: invalid config:\n{lines}")
    return config


def retype_overrides(config: dict, config_args: list[str] | None) -> dict:
    """Snakemake reads a `--config KEY={...}` mapping (or list) with YAML's BaseLoader, so every scalar in it
    arrives as a string (`--config soak='{enabled: true}'` gives 'true'). Read each such value again as YAML is
    read everywhere else and merge it over `config` as Snakemake did (mappings key by key, anything else
    replaced); scalar overrides (`KEY=3`) Snakemake has typed already, but for true/false, which it leaves as
    strings (`--config measure=false`). Returns `config`, changed in place."""
    for arg in config_args or []:
        key, sep, raw = arg.partition("=")
        if not sep:
            continue
        try:
            value = yaml.safe_load(raw)
        except yaml.YAMLError:
            continue  # Snakemake kept it as it read it; validation names what is wrong with it
        if isinstance(value, (dict, list)):
            _merge(config, {key.strip(): value})
        elif isinstance(value, bool) and isinstance(config.get(key.strip()), str):
            config[key.strip()] = value
    return config


def _merge(into: dict, update: dict) -> None:
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value


def load(path: str | os.PathLike) -> dict:
    return validate(load_yaml(path) or {}, source=str(path))


def read_json(path: str | os.PathLike, what: str) -> Any:
    """A JSON file's content; a missing or malformed file is a KvtierError naming the file and `what` it should be."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise KvtierError(f"{path}: not a readable {what} ({exc})") from None


def check_schema(record: Any, schema: str, source: str, what: str = "") -> Any:
    """`record` checked against workflow/schemas/<schema>.schema.yaml; the first problem is a KvtierError naming
    `source` and where in the record it is."""
    errors = list(jsonschema.Draft202012Validator(load_yaml(schema_path(schema))).iter_errors(record))
    if errors:
        where = "/".join(map(str, errors[0].absolute_path)) or "(top level)"
        raise KvtierError(f"{source}: {what + ': ' if what else ''}{errors[0].message} at {where}")
    return record
