"""The JSON vocabulary of `zpipe -o json` and the coordinator's /api, in Python.

The C++ encoder (api/json.h) is the reference and docs/json.md documents it field by field; this
module applies the same rules to the messages the Python client receives, and reads them back:

- to_dict(message): a zpipe.v1 message as plain Python values. Field names are the proto's;
  enum values the lower-case short names ("running", "idle", "cpu"; None for an UNSPECIFIED
  value, the number for a value newer than these stubs); 64-bit integers are ints; timestamps
  RFC 3339 strings ("2024-05-01T12:00:00.250Z"), durations float seconds; every field present,
  a message or `optional` field that is not set is None; of a oneof only the member that is set
  appears, and the oneof's name says which ("kind": "snapshot"); a map field (labels) is a dict.
- from_dict(values, message): the inverse, for what `zpipe` prints (the job-file reader's
  resolved spec, jobspec.py). It trusts its input to be the vocabulary: it is not a job-file
  reader, and a field these stubs do not know is an error naming it (a zpipe newer than this
  package).
"""
import base64
import re

from google.protobuf.descriptor import FieldDescriptor as F


def is_repeated(field) -> bool:
    """Whether a field descriptor is a repeated field. protobuf 5.29+ has `is_repeated`; protobuf
    7 dropped `label`, which older releases (Debian 12's 3.20) only have."""
    flag = getattr(field, "is_repeated", None)
    if flag is not None:
        return bool(flag)
    return field.label == F.LABEL_REPEATED


def _is_map(field) -> bool:
    """Whether a field descriptor is a map field (labels): printed as an object of its keys."""
    return (field.cpp_type == F.CPPTYPE_MESSAGE and is_repeated(field)
            and field.message_type.GetOptions().map_entry)


def enum_prefix(enum):
    """"DeviceKind" -> "DEVICE_KIND_": the prefix every value name of the enum carries."""
    return re.sub(r"(?<!^)([A-Z])", r"_\1", enum.name).upper() + "_"


def real_oneof(field):
    """The oneof the field belongs to, or None; never the synthetic oneof of an `optional`
    field."""
    oneof = field.containing_oneof
    if oneof is None:
        return None
    # proto3 `optional` fields sit in a synthetic oneof of their own named "_<field>".
    if len(oneof.fields) == 1 and oneof.name == "_" + field.name:
        return None
    return oneof


# --- messages to plain values ---


def _enum_name(enum, number):
    value = enum.values_by_number.get(number)
    if value is None:
        return number  # a value newer than these stubs
    if value.name.endswith("_UNSPECIFIED"):
        return None
    prefix = enum_prefix(enum)
    name = value.name[len(prefix):] if value.name.startswith(prefix) else value.name
    return name.lower()


def _value(field, v):
    if field.cpp_type == F.CPPTYPE_ENUM:
        return _enum_name(field.enum_type, v)
    if field.cpp_type == F.CPPTYPE_MESSAGE:
        return to_dict(v)
    if field.type == F.TYPE_BYTES:
        return base64.b64encode(v).decode("ascii")
    return v


def to_dict(message):
    """A zpipe.v1 message as plain Python values (see the module docstring)."""
    full_name = message.DESCRIPTOR.full_name
    if full_name == "google.protobuf.Timestamp":
        return message.ToJsonString()
    if full_name == "google.protobuf.Duration":
        return message.seconds + message.nanos / 1e9
    out = {}
    for field in message.DESCRIPTOR.fields:
        oneof = real_oneof(field)
        if oneof is not None:
            if message.WhichOneof(oneof.name) != field.name:
                continue
            out.setdefault(oneof.name, field.name)
        value = getattr(message, field.name)
        if _is_map(field):
            entry = field.message_type.fields_by_name["value"]
            out[field.name] = {k: _value(entry, value[k]) for k in sorted(value)}
        elif is_repeated(field):
            out[field.name] = [_value(field, v) for v in value]
        elif field.has_presence and not message.HasField(field.name):
            out[field.name] = None
        else:
            out[field.name] = _value(field, value)
    return out


def spec_to_dict(spec):
    """A JobSpec as a dict in the job-file shape: the model shows only its member."""
    out = to_dict(spec)
    if out.get("model") is not None:
        out["model"].pop("kind", None)
    return out


def job_to_dict(job):
    out = to_dict(job)
    out["spec"] = spec_to_dict(job.spec)
    return out


def event_to_dict(event):
    out = to_dict(event)
    if event.HasField("snapshot"):
        out["snapshot"] = job_to_dict(event.snapshot)
    return out


# --- plain values back to messages ---


class UnknownField(Exception):
    """A key of the vocabulary that the message type lacks: `path` names it."""

    def __init__(self, path):
        super().__init__(path)
        self.path = path


def _scalar(field, value, path):
    if field.cpp_type == F.CPPTYPE_ENUM:
        if isinstance(value, int):
            return value
        enum = field.enum_type
        found = (enum.values_by_name.get(enum_prefix(enum) + value.upper())
                 or enum.values_by_name.get(value.upper()))
        if found is None:
            raise UnknownField(f"{path} = {value!r}")
        return found.number
    if field.type == F.TYPE_BYTES:
        return base64.b64decode(value)
    if field.cpp_type in (F.CPPTYPE_DOUBLE, F.CPPTYPE_FLOAT):
        return float(value)
    return value


def _set_message(message, values, path):
    if message.DESCRIPTOR.full_name == "google.protobuf.Timestamp":
        message.FromJsonString(values)
        return
    if message.DESCRIPTOR.full_name == "google.protobuf.Duration":
        message.FromNanoseconds(round(values * 1e9))
        return
    message.SetInParent()
    by_name = message.DESCRIPTOR.fields_by_name
    oneofs = message.DESCRIPTOR.oneofs_by_name
    for key, value in values.items():
        field = by_name.get(key)
        if field is None:
            if key in oneofs:
                continue  # names the member that is set, which comes as its own key
            raise UnknownField(f"{path}{key}")
        if value is None:
            continue  # not set
        where = f"{path}{key}"
        if _is_map(field):
            entry = field.message_type.fields_by_name["value"]
            target = getattr(message, key)
            for k, item in value.items():
                if entry.cpp_type == F.CPPTYPE_MESSAGE:
                    _set_message(target[k], item, f"{where}.{k}.")
                else:
                    target[k] = _scalar(entry, item, f"{where}.{k}")
        elif is_repeated(field):
            target = getattr(message, key)
            for i, item in enumerate(value):
                if field.cpp_type == F.CPPTYPE_MESSAGE:
                    _set_message(target.add(), item, f"{where}[{i}].")
                else:
                    target.append(_scalar(field, item, f"{where}[{i}]"))
        elif field.cpp_type == F.CPPTYPE_MESSAGE:
            _set_message(getattr(message, key), value, f"{where}.")
        else:
            setattr(message, key, _scalar(field, value, where))


def from_dict(values, message):
    """Fills `message` from `values` in the vocabulary (the inverse of to_dict) and returns it.
    Raises UnknownField naming a key (or enum value) the message type does not know."""
    _set_message(message, values, "")
    return message
