"""Job specs for Client.submit: a dict, a YAML or JSON job file, or YAML or JSON text.

A job spec is read by `zpipe`'s job-file reader (client/job_file.h), the one implementation of
its rules, so a job file means the same to both: the field names of proto zpipe.v1.JobSpec; an
unknown field, a value of the wrong type (a string where a number belongs, a fraction for an
integer, a map for a scalar) or two model kinds are errors naming the field and the line;
`schedule.memory_limit` takes a number or `auto` (= unset); enum fields take the short lower-case
name (`device: cuda`) or the full proto name; null leaves a field unset. As in the CLI, a quoted
"8" is a string and a plain 8 a number (in a dict: a str is a string, an int or float a number).
Range checks are the coordinator's.

How: this module runs `zpipe -o json submit --file=FILE --parse-only` (text and dicts go to its
standard input as `--file=-`, a dict as JSON) and turns the spec it prints into the proto. The
zpipe binary is $ZPIPE_BIN, else `zpipe` on PATH, else build/client/zpipe of the source tree
this package sits in; without one, reading a spec raises FAILED_PRECONDITION saying so.

Relative model.torchscript.path, model.python.file, data.path and eval.path in a job FILE are
taken relative to the file's directory, as `zpipe submit` does; in a dict or text they are sent as
written.

Errors are the reader's, as `zpipe submit` reports them: ZeroPipeError(INVALID_ARGUMENT, or
NOT_FOUND for a file that cannot be read) with its message and, when the message names a field,
`field` = "spec.<path>" (the coordinator's naming). A dict's errors name no line: the JSON text
it was sent as is not the caller's.
"""
import json
import math
import os
import re
import shutil
import subprocess

import grpc

from zeropipe._proto import job_pb2
from zeropipe.errors import ZeroPipeError
from zeropipe.vocabulary import UnknownField, from_dict

_JOB_FILE_SUFFIXES = (".yaml", ".yml", ".json")
# The reader bounds its own work (a job file is refused past 1 MiB); this only guards against a
# zpipe that hangs.
_READER_TIMEOUT_S = 60
# "line 7: field 'train.lr' expects a number, ...", "line 3: unknown field 'schedule.knd' (...)":
# the reader's messages about one field name it right after the line.
_FIELD = re.compile(r"line \d+: (?:unknown )?field '([^']+)'")
_LINE = re.compile(r"^line \d+: ")


def zpipe_binary():
    """The zpipe whose job-file reader reads specs (see the module docstring)."""
    explicit = os.environ.get("ZPIPE_BIN")
    if explicit:
        if not os.access(explicit, os.X_OK):
            raise ZeroPipeError(grpc.StatusCode.FAILED_PRECONDITION,
                                f"ZPIPE_BIN={explicit}: not an executable zpipe")
        return explicit
    on_path = shutil.which("zpipe")
    if on_path:
        return on_path
    package = os.path.dirname(os.path.abspath(__file__))
    in_tree = os.path.normpath(os.path.join(package, "..", "..", "build", "client", "zpipe"))
    if os.access(in_tree, os.X_OK):
        return in_tree
    raise ZeroPipeError(grpc.StatusCode.FAILED_PRECONDITION,
                        "reading a job spec needs the zpipe binary, whose job-file reader is the "
                        "one implementation of the rules: set ZPIPE_BIN to its path or put zpipe "
                        "on PATH")


def _reader_env():
    # The reader asks no coordinator: the caller's connection settings and zpipe's config file
    # (an unreadable token file, a broken context) must not stop it.
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZPIPE_")}
    env["XDG_CONFIG_HOME"] = os.devnull  # no config file under it
    return env


def _run_reader(source, text=None):
    """The spec zpipe's reader makes of the file `source`, or of `text` (bytes) for "-"."""
    zpipe = zpipe_binary()
    try:
        done = subprocess.run([zpipe, "-o", "json", "submit", f"--file={source}", "--parse-only"],
                              input=text if text is not None else b"", capture_output=True,
                              env=_reader_env(), timeout=_READER_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ZeroPipeError(grpc.StatusCode.FAILED_PRECONDITION,
                            f"{zpipe}: cannot run its job-file reader: {e}") from None
    try:
        printed = json.loads(done.stdout)
    except ValueError:
        printed = None
    if done.returncode == 0 and isinstance(printed, dict) and "spec" in printed:
        return _spec_from(printed["spec"], zpipe)
    if isinstance(printed, dict) and "code" in printed and "message" in printed:
        raise _reader_error(printed["code"], printed["message"])
    stderr = done.stderr.decode("utf-8", "replace").strip()
    raise ZeroPipeError(grpc.StatusCode.FAILED_PRECONDITION,
                        f"{zpipe} could not read the job spec (exit {done.returncode}): {stderr}")


def _spec_from(values, zpipe):
    try:
        return from_dict(values, job_pb2.JobSpec())
    except UnknownField as e:
        raise ZeroPipeError(grpc.StatusCode.FAILED_PRECONDITION,
                            f"{zpipe} printed spec field '{e.path}', which this zeropipe package "
                            "does not know: use a zpipe and a zeropipe of the same version") from None


def _reader_error(code, message):
    status = getattr(grpc.StatusCode, code, grpc.StatusCode.UNKNOWN)
    field = _FIELD.search(message)
    return ZeroPipeError(status, message, f"spec.{field.group(1)}" if field else None)


# --- what Client.submit accepts, as the reader's input ---


def _check_value(value):
    """Raises INVALID_ARGUMENT for what a dict cannot say in JSON (the reader's input)."""
    if value is None or isinstance(value, (bool, int, str)):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ZeroPipeError(grpc.StatusCode.INVALID_ARGUMENT,
                                f"a job spec's numbers are finite, got {value!r}")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ZeroPipeError(grpc.StatusCode.INVALID_ARGUMENT,
                                    f"map keys must be plain names, got {key!r}")
            _check_value(item)
        return
    if isinstance(value, (list, tuple)):
        for item in value:
            _check_value(item)
        return
    raise ZeroPipeError(grpc.StatusCode.INVALID_ARGUMENT,
                        "a job spec holds maps, lists, strings, numbers, booleans and None, got "
                        f"{type(value).__name__}")


def _dict_text(spec):
    try:
        _check_value(spec)
        return json.dumps(spec).encode("utf-8")
    except RecursionError:
        raise ZeroPipeError(grpc.StatusCode.INVALID_ARGUMENT,
                            "the job spec is nested too deeply to be a job spec") from None


def parse_spec_text(text):
    """A JobSpec from YAML or JSON text (str or bytes): JSON when it starts with '{'."""
    return _run_reader("-", text.encode("utf-8") if isinstance(text, str) else text)


def load_spec_file(path):
    """A JobSpec from a job file (".json" JSON, ".yaml"/".yml" YAML, else by its first character),
    with relative model, data and eval paths made absolute against the file's directory."""
    return _run_reader(os.fspath(path))


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
            return _run_reader("-", _dict_text(spec))
        except ZeroPipeError as e:
            raise ZeroPipeError(e.code, _LINE.sub("", e.message), e.field) from None
    if isinstance(spec, os.PathLike):
        return load_spec_file(spec)
    if isinstance(spec, bytes):
        try:
            spec = spec.decode("utf-8")
        except UnicodeDecodeError:
            return parse_spec_text(spec)  # the reader names the line that is not UTF-8
    if isinstance(spec, str):
        one_line = "\n" not in spec and not spec.lstrip().startswith("{")
        if one_line and (os.path.isfile(spec) or spec.lower().endswith(_JOB_FILE_SUFFIXES)):
            return load_spec_file(spec)
        return parse_spec_text(spec)
    raise ZeroPipeError(grpc.StatusCode.INVALID_ARGUMENT,
                        "a job spec is a dict, a job file's path, or YAML or JSON text; got "
                        f"{type(spec).__name__}")
