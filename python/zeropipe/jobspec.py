"""Job specs for Client.submit: a dict, a YAML or JSON job file, or YAML or JSON text.

The reading rules are those of `zpipe submit` (client/job_file.h), so a job file means the same
to both: the field names of proto zpipe.v1.JobSpec; an unknown field, a value of the wrong type (a
string where a number belongs, a fraction for an integer, a map for a scalar) or two model kinds
are errors naming the field and, for text, the line; `schedule.memory_limit` takes a number or
`auto` (= unset); enum fields take the short lower-case name (`device: cuda`) or the full proto
name; null leaves a field unset. As in the CLI, a quoted "8" is a string and a plain 8 a number
(in a dict: a str is a string, an int or float a number). Range checks are the coordinator's.

Relative model.torchscript.path, data.path and eval.path in a job FILE are taken relative to the
file's directory, as `zpipe submit` does; in a dict or text they are sent as written.

Errors are ZeroPipeError(INVALID_ARGUMENT) with `field` = "spec.<path>" (the coordinator's
naming), or NOT_FOUND for a file that cannot be read.
"""
import json
import os
import re

import grpc
from google.protobuf.descriptor import FieldDescriptor as F

from zeropipe._proto import job_pb2
from zeropipe.errors import ZeroPipeError


def is_repeated(field) -> bool:
    """Whether a field descriptor is a repeated field. protobuf 5.29+ has `is_repeated`; protobuf
    7 dropped `label`, which older releases (Debian 12's 3.20) only have."""
    flag = getattr(field, "is_repeated", None)
    if flag is not None:
        return bool(flag)
    return field.label == F.LABEL_REPEATED

# The limits of client/job_file.h: a real job spec is a few KiB, a few hundred values and four
# levels deep; these bound the reader's work whatever the input.
MAX_JOB_FILE_BYTES = 1 << 20
MAX_JOB_FILE_DEPTH = 64
MAX_JOB_FILE_VALUES = 100_000

_JOB_FILE_SUFFIXES = (".yaml", ".yml", ".json")


class _SpecError(Exception):
    def __init__(self, line, message, field=None):
        super().__init__(message)
        self.line = line
        self.message = message
        self.field = field


class _Node:
    """A format-neutral node, like client/internal/spec_tree.h's SpecNode."""

    __slots__ = ("kind", "line", "text", "quoted", "fields", "items")

    def __init__(self, kind, line=None, text="", quoted=False):
        self.kind = kind  # "null", "scalar", "map", "list"
        self.line = line  # 1-based, None for dicts (no source)
        self.text = text
        self.quoted = quoted
        self.fields = []  # map: (key, key_line, _Node) in source order
        self.items = []  # list: _Node


class _Budget:
    def __init__(self):
        self.values = 0

    def charge(self, depth, line):
        self.values += 1
        if depth > MAX_JOB_FILE_DEPTH:
            raise _SpecError(line, f"nested deeper than {MAX_JOB_FILE_DEPTH} levels "
                             "(the job-file depth limit)")
        if self.values > MAX_JOB_FILE_VALUES:
            raise _SpecError(line, f"the job file expands to more than {MAX_JOB_FILE_VALUES} "
                             "values (the job-file expansion limit)")


# --- trees from YAML, JSON and Python values ---


def _yaml_tree(text):
    try:
        import yaml
    except ImportError as e:  # pragma: no cover - Debian's python3-yaml is a dependency
        raise ZeroPipeError(grpc.StatusCode.FAILED_PRECONDITION,
                            "YAML job specs need PyYAML (Debian: python3-yaml)") from e
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise _SpecError(mark.line + 1 if mark else 1,
                         " ".join(str(getattr(e, "problem", None) or e).split())) from None
    if root is None:
        return _Node("null", 1)
    budget = _Budget()

    def build(node, depth):
        line = node.start_mark.line + 1
        budget.charge(depth, line)
        if isinstance(node, yaml.ScalarNode):
            if node.style is None and node.tag == "tag:yaml.org,2002:null":
                return _Node("null", line)
            return _Node("scalar", line, node.value, quoted=node.style is not None)
        if isinstance(node, yaml.SequenceNode):
            out = _Node("list", line)
            out.items = [build(item, depth + 1) for item in node.value]
            return out
        out = _Node("map", line)
        seen = set()
        for key, value in node.value:
            key_line = key.start_mark.line + 1
            if not isinstance(key, yaml.ScalarNode) or key.style is not None:
                raise _SpecError(key_line, "map keys must be plain names")
            if key.value in seen:
                raise _SpecError(key_line, f"duplicate field '{key.value}'")
            seen.add(key.value)
            out.fields.append((key.value, key_line, build(value, depth + 1)))
        return out

    return build(root, 1)


class _Number(str):
    """A JSON number, kept as its text (so 8 and 8.0 stay distinguishable, as in C++)."""


def _json_tree(text):
    def pairs(items):
        seen = set()
        for key, _ in items:
            if key in seen:
                raise _SpecError(None, f"duplicate field '{key}'")
            seen.add(key)
        return dict(items)

    def constant(name):
        raise _SpecError(None, f"'{name}' is not JSON")

    try:
        value = json.loads(text, object_pairs_hook=pairs, parse_int=_Number,
                           parse_float=_Number, parse_constant=constant)
    except json.JSONDecodeError as e:
        raise _SpecError(e.lineno, e.msg) from None
    return _value_tree(value)


def _value_tree(value):
    budget = _Budget()

    def build(v, depth):
        budget.charge(depth, None)
        if v is None:
            return _Node("null")
        if isinstance(v, _Number):
            return _Node("scalar", text=str.__str__(v))
        if isinstance(v, bool):
            return _Node("scalar", text="true" if v else "false")
        if isinstance(v, int):
            return _Node("scalar", text=str(v))
        if isinstance(v, float):
            return _Node("scalar", text=repr(v))
        if isinstance(v, str):
            return _Node("scalar", text=v, quoted=True)
        if isinstance(v, dict):
            out = _Node("map")
            for key, item in v.items():
                if not isinstance(key, str):
                    raise _SpecError(None, f"map keys must be plain names, got {key!r}")
                out.fields.append((key, None, build(item, depth + 1)))
            return out
        if isinstance(v, (list, tuple)):
            out = _Node("list")
            out.items = [build(item, depth + 1) for item in v]
            return out
        raise _SpecError(None, f"a job spec holds maps, lists, strings, numbers, booleans and "
                         f"None, got {type(v).__name__}")

    return build(value, 1)


# --- the tree onto the JobSpec proto (client/job_file.cc, rule for rule) ---

_INT = re.compile(r"^\s*[+-]?\d+\s*$")
_FLOAT = re.compile(r"^\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*$")
_BOOL = {"true", "false", "True", "False", "TRUE", "FALSE"}
_INT32 = (-(1 << 31), (1 << 31) - 1)
_INT64 = (-(1 << 63), (1 << 63) - 1)


def _is_int(t):
    return bool(_INT.match(t)) and _INT64[0] <= int(t) < (1 << 64)


def _is_float(t):
    return bool(_FLOAT.match(t)) and abs(float(t)) != float("inf")


def _describe(node):
    if node.kind == "null":
        return "null"
    if node.kind == "map":
        return "a map"
    if node.kind == "list":
        return "a list"
    if node.quoted:
        return f'the string "{node.text}"'
    if node.text in _BOOL:
        return f"the boolean {node.text}"
    if _is_int(node.text) or _is_float(node.text):
        return f"the number {node.text}"
    return f"'{node.text}'"


def _enum_prefix(enum):
    # "DeviceKind" -> "DEVICE_KIND_"
    return re.sub(r"(?<!^)([A-Z])", r"_\1", enum.name).upper() + "_"


def _enum_choices(enum):
    prefix = _enum_prefix(enum)
    return ", ".join(v.name[len(prefix):].lower() if v.name.startswith(prefix) else v.name.lower()
                     for v in enum.values if not v.name.endswith("_UNSPECIFIED"))


def _find_enum(enum, text):
    upper = text.replace("-", "_").upper()
    return enum.values_by_name.get(upper) or enum.values_by_name.get(_enum_prefix(enum) + upper)


def _real_oneof(field):
    oneof = field.containing_oneof
    if oneof is None:
        return None
    # proto3 `optional` fields sit in a synthetic oneof of their own named "_<field>".
    if len(oneof.fields) == 1 and oneof.name == "_" + field.name:
        return None
    return oneof


def _set_scalar(node, path, field, msg):
    repeated = is_repeated(field)
    cpp = field.cpp_type

    def wrong(expected):
        return _SpecError(node.line, f"field '{path}' expects {expected}, got {_describe(node)}",
                          path)

    if cpp == F.CPPTYPE_MESSAGE:
        if node.kind != "map":
            raise wrong("a map")
        child = getattr(msg, field.name).add() if repeated else getattr(msg, field.name)
        if not repeated:
            child.SetInParent()
        _set_message(node, path, child)
        return
    if node.kind != "scalar":
        if cpp == F.CPPTYPE_STRING:
            raise wrong("a string")
        if cpp == F.CPPTYPE_BOOL:
            raise wrong("true or false")
        if cpp == F.CPPTYPE_ENUM:
            raise wrong(f"one of: {_enum_choices(field.enum_type)}")
        if cpp in (F.CPPTYPE_DOUBLE, F.CPPTYPE_FLOAT):
            raise wrong("a number")
        raise wrong("an integer")
    t = node.text
    if cpp == F.CPPTYPE_STRING:
        if not node.quoted and (t in _BOOL or _is_int(t) or _is_float(t)):
            raise wrong("a string (quote it to use it as text)")
        value = t
    elif cpp == F.CPPTYPE_BOOL:
        if node.quoted or t not in _BOOL:
            raise wrong("true or false")
        value = t.lower() == "true"
    elif cpp == F.CPPTYPE_ENUM:
        v = None if t in _BOOL else _find_enum(field.enum_type, t)
        if v is None:
            raise wrong(f"one of: {_enum_choices(field.enum_type)}")
        value = v.number
    elif cpp in (F.CPPTYPE_DOUBLE, F.CPPTYPE_FLOAT):
        if node.quoted or not _is_float(t):
            raise wrong("a number")
        value = float(t)
    elif cpp in (F.CPPTYPE_INT32, F.CPPTYPE_INT64):
        if node.quoted or not _INT.match(t) or not _INT64[0] <= int(t) <= _INT64[1]:
            raise wrong("an integer")
        value = int(t)
        if cpp == F.CPPTYPE_INT32 and not _INT32[0] <= value <= _INT32[1]:
            raise wrong("a 32-bit integer")
    elif cpp in (F.CPPTYPE_UINT32, F.CPPTYPE_UINT64):
        if node.quoted or t.lstrip().startswith("-") or not _INT.match(t) or int(t) >= 1 << 64:
            raise wrong("a non-negative integer")
        value = int(t)
        if cpp == F.CPPTYPE_UINT32 and value >= 1 << 32:
            raise wrong("a 32-bit non-negative integer")
    else:  # pragma: no cover - JobSpec has no other kinds
        raise wrong("a supported value")
    if repeated:
        getattr(msg, field.name).append(value)
    else:
        setattr(msg, field.name, value)


def _is_auto(node, field):
    # `memory_limit: auto` means unset (the proto field is optional; unset = auto).
    return (field.name == "memory_limit" and field.has_presence and node.kind == "scalar"
            and node.text.lower() == "auto")


def _set_field(node, path, field, msg):
    if node.kind == "null" or _is_auto(node, field):
        return
    if is_repeated(field):
        if node.kind != "list":
            raise _SpecError(node.line, f"field '{path}' expects a list, got {_describe(node)}",
                             path)
        for i, item in enumerate(node.items):
            _set_scalar(item, f"{path}[{i}]", field, msg)
        return
    if (field.cpp_type == F.CPPTYPE_DOUBLE and field.name == "memory_limit"
            and node.kind == "scalar" and not _is_float(node.text)):
        raise _SpecError(node.line, f"field '{path}' expects a number or auto, got "
                         f"{_describe(node)}", path)
    _set_scalar(node, path, field, msg)


def _set_message(node, path, msg):
    desc = msg.DESCRIPTOR
    for i, (key, key_line, value) in enumerate(node.fields):
        field_path = f"{path}.{key}" if path else key
        field = desc.fields_by_name.get(key)
        if field is None:
            known = ", ".join(f.name for f in desc.fields)
            raise _SpecError(key_line, f"unknown field '{field_path}' ({path or 'top level'} "
                             f"has: {known})", field_path)
        oneof = _real_oneof(field)
        if oneof is not None:
            for other_key, _, other_value in node.fields[:i]:
                other = desc.fields_by_name.get(other_key)
                if (other is not None and _real_oneof(other) is oneof
                        and other_value.kind != "null"):
                    other_path = f"{path}.{other.name}" if path else other.name
                    raise _SpecError(key_line, f"field '{field_path}' conflicts with "
                                     f"'{other_path}': give only one of {path or oneof.name}",
                                     field_path)
        _set_field(value, field_path, field, msg)


def _from_tree(tree):
    if tree.kind == "null":
        raise _SpecError(None, "the job file is empty")
    if tree.kind != "map":
        raise _SpecError(tree.line, "a job file is a map of fields (name, model, parallel, ...), "
                         f"got {_describe(tree)}")
    spec = job_pb2.JobSpec()
    _set_message(tree, "", spec)
    return spec


def _error(e, where=None):
    message = e.message if e.line is None else f"line {e.line}: {e.message}"
    if where:
        message = f"{where}: {message}"
    return ZeroPipeError(grpc.StatusCode.INVALID_ARGUMENT, message,
                         f"spec.{e.field}" if e.field else None)


def parse_spec_text(text, fmt="auto"):
    """A JobSpec from YAML or JSON text; fmt "auto" picks JSON when it starts with '{'."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_JOB_FILE_BYTES:
        raise ZeroPipeError(grpc.StatusCode.INVALID_ARGUMENT,
                            f"the job file is larger than {MAX_JOB_FILE_BYTES >> 20} MiB (the "
                            "job-file size limit); a job spec is a few KiB")
    if fmt == "auto":
        fmt = "json" if text.lstrip().startswith("{") else "yaml"
    try:
        return _from_tree(_json_tree(text) if fmt == "json" else _yaml_tree(text))
    except _SpecError as e:
        raise _error(e) from None


def load_spec_file(path):
    """A JobSpec from a job file (".json" JSON, ".yaml"/".yml" YAML, else by its first character),
    with relative model, data and eval paths made absolute against the file's directory."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_JOB_FILE_BYTES + 1)
    except OSError as e:
        raise ZeroPipeError(grpc.StatusCode.NOT_FOUND,
                            f"{path}: cannot open the job file ({e.strerror})") from None
    lower = path.lower()
    fmt = "json" if lower.endswith(".json") else "yaml" if lower.endswith((".yaml", ".yml")) \
        else "auto"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[:e.start].count(b"\n") + 1
        raise ZeroPipeError(grpc.StatusCode.INVALID_ARGUMENT,
                            f"{path}: line {line}: the job file is not UTF-8 text") from None
    try:
        spec = parse_spec_text(text, fmt)
    except ZeroPipeError as e:
        raise ZeroPipeError(e.code, f"{path}: {e.message}", e.field) from None
    base = os.path.dirname(os.path.abspath(path))

    def resolve(msg):
        if msg.path and not os.path.isabs(msg.path):
            msg.path = os.path.normpath(os.path.join(base, msg.path))

    if spec.model.HasField("torchscript"):
        resolve(spec.model.torchscript)
    if spec.HasField("data"):
        resolve(spec.data)
    if spec.HasField("eval"):
        resolve(spec.eval)
    return spec


def load_spec(spec):
    """A zpipe.v1.JobSpec from what Client.submit accepts:

    - a JobSpec message (returned as is);
    - a dict (or the dict Client.status returns under "spec");
    - an os.PathLike, or a str naming a file (or ending in .yaml, .yml or .json): a job file;
    - any other str or bytes: YAML or JSON text.
    """
    if isinstance(spec, job_pb2.JobSpec):
        return spec
    if isinstance(spec, dict):
        try:
            return _from_tree(_value_tree(spec))
        except _SpecError as e:
            raise _error(e) from None
    if isinstance(spec, os.PathLike):
        return load_spec_file(spec)
    if isinstance(spec, bytes):
        spec = spec.decode("utf-8")
    if isinstance(spec, str):
        one_line = "\n" not in spec and not spec.lstrip().startswith("{")
        if one_line and (os.path.isfile(spec) or spec.lower().endswith(_JOB_FILE_SUFFIXES)):
            return load_spec_file(spec)
        return parse_spec_text(spec)
    raise ZeroPipeError(grpc.StatusCode.INVALID_ARGUMENT,
                        "a job spec is a dict, a job file's path, or YAML or JSON text; got "
                        f"{type(spec).__name__}")
