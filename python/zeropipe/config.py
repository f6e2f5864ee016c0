"""zpipe's config file of named contexts, read as `zpipe` reads it (client/cli_config.h).

The file is $XDG_CONFIG_HOME/zeropipe/config.yaml (~/.config/zeropipe/config.yaml without
XDG_CONFIG_HOME):

    current-context: prod
    contexts:
      - name: prod
        coordinator: coord.example.com:50051
        token-file: ~/.config/zeropipe/prod.token
        tls-ca: /etc/zeropipe/ca.pem

Each setting comes from, first match wins: the argument (Client(address=..., token=...,
tls_ca=...)), the ZPIPE_* environment (ZPIPE_COORDINATOR, ZPIPE_TOKEN (the token itself),
ZPIPE_TLS_CA, ZPIPE_TLS_CERT, ZPIPE_TLS_KEY), the context (context=..., else $ZPIPE_CONTEXT, else
current-context), the default (localhost:50051, no token, plaintext).
"""
import os
from dataclasses import dataclass

import grpc
import yaml

from .errors import ZeroPipeError

DEFAULT_COORDINATOR = "localhost:50051"
_KEYS = ("coordinator", "token-file", "tls-ca", "tls-cert", "tls-key")


def config_path(env=None):
    """$XDG_CONFIG_HOME/zeropipe/config.yaml, else ~/.config/zeropipe/config.yaml."""
    env = os.environ if env is None else env
    if env.get("XDG_CONFIG_HOME"):
        return os.path.join(env["XDG_CONFIG_HOME"], "zeropipe", "config.yaml")
    return os.path.join(env.get("HOME", ""), ".config", "zeropipe", "config.yaml")


def _invalid(message):
    return ZeroPipeError(grpc.StatusCode.INVALID_ARGUMENT, message)


def load_config(path):
    """{"current-context": str or None, "contexts": {name: {key: value}}}; empty when the file
    does not exist. ZeroPipeError(INVALID_ARGUMENT) naming the file for a malformed one."""
    if not os.path.exists(path):
        return {"current-context": None, "contexts": {}}
    with open(path) as f:
        try:
            root = yaml.safe_load(f) or {}
        except yaml.YAMLError as e:
            raise _invalid(f"{path}: not YAML: {e}") from None
    if not isinstance(root, dict):
        raise _invalid(f"{path}: expected a map with current-context and contexts")
    unknown = set(root) - {"current-context", "contexts"}
    if unknown:
        raise _invalid(f"{path}: unknown key '{sorted(unknown)[0]}' (expected current-context, "
                       "contexts)")
    contexts = {}
    for c in root.get("contexts") or []:
        if not isinstance(c, dict) or not c.get("name"):
            raise _invalid(f"{path}: a context needs a name")
        bad = set(c) - {"name", *_KEYS}
        if bad:
            raise _invalid(f"{path}: unknown key '{sorted(bad)[0]}' (a context has name, "
                           "coordinator, token-file, tls-ca, tls-cert, tls-key)")
        contexts[str(c["name"])] = {k: str(v) for k, v in c.items() if k != "name" and v}
    return {"current-context": root.get("current-context") or None, "contexts": contexts}


@dataclass
class Connection:
    """Resolved settings; token is the token itself ("" = none), files are paths or None."""
    context: str
    address: str
    token: str
    tls_ca: object
    tls_cert: object
    tls_key: object


def _read_token_file(path):
    """The first line of the file that is not blank or a # comment (as `zpipe --token-file`)."""
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line and not line.startswith("#"):
                    return line
    except OSError as e:
        raise _invalid(f"token-file {path}: cannot read: {e.strerror}") from None
    raise _invalid(f"token-file {path}: no token in it")


def resolve(address=None, token=None, tls_ca=None, tls_cert=None, tls_key=None, context=None,
            env=None, path=None):
    """The connection settings by the precedence above. ZeroPipeError(INVALID_ARGUMENT) for a
    context the file does not have."""
    env = os.environ if env is None else env
    path = path or config_path(env)
    config = load_config(path)
    name = context or env.get("ZPIPE_CONTEXT") or config["current-context"]
    ctx = {}
    if name:
        if name not in config["contexts"]:
            raise _invalid(f"no context '{name}' in {path}; zpipe config get-contexts lists them, "
                           "zpipe config set-context makes one")
        ctx = config["contexts"][name]

    def pick(arg, env_name, key, is_file=True):
        if arg is not None:
            return arg
        if env.get(env_name):
            return env[env_name]
        value = ctx.get(key)
        if value and is_file and value.startswith("~/"):
            value = os.path.join(env.get("HOME", "~"), value[2:])
        return value or None

    if token is None:
        token = env.get("ZPIPE_TOKEN") or ""
        if not token and ctx.get("token-file"):
            token = _read_token_file(pick(None, "", "token-file"))
    return Connection(
        context=name or "",
        address=address or pick(None, "ZPIPE_COORDINATOR", "coordinator", False)
        or DEFAULT_COORDINATOR,
        token=token,
        tls_ca=pick(tls_ca, "ZPIPE_TLS_CA", "tls-ca"),
        tls_cert=pick(tls_cert, "ZPIPE_TLS_CERT", "tls-cert"),
        tls_key=pick(tls_key, "ZPIPE_TLS_KEY", "tls-key"))
