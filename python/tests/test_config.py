"""zeropipe.config: the contexts of zpipe's config file, with zpipe's precedence (arguments >
ZPIPE_* environment > context > defaults); tests/cli checks the same order for `zpipe`."""
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from zeropipe import Client, config  # noqa: E402
from zeropipe.errors import ZeroPipeError  # noqa: E402

CONFIG = """current-context: prod
contexts:
  - name: prod
    coordinator: prod.example:50051
    token-file: ~/prod.token
    tls-ca: /etc/prod-ca.pem
  - name: dev
    coordinator: dev.example:50051
"""


class ConfigTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.home = self.dir.name
        os.makedirs(os.path.join(self.home, "xdg", "zeropipe"))
        with open(os.path.join(self.home, "xdg", "zeropipe", "config.yaml"), "w") as f:
            f.write(CONFIG)
        with open(os.path.join(self.home, "prod.token"), "w") as f:
            f.write("# the prod token\n\n  s3cret  \n")
        self.env = {"HOME": self.home, "XDG_CONFIG_HOME": os.path.join(self.home, "xdg")}

    def tearDown(self):
        self.dir.cleanup()

    def test_path_follows_xdg_config_home(self):
        self.assertEqual(config.config_path({"XDG_CONFIG_HOME": "/x", "HOME": "/h"}),
                         "/x/zeropipe/config.yaml")
        self.assertEqual(config.config_path({"HOME": "/h"}), "/h/.config/zeropipe/config.yaml")

    def test_context_then_environment_then_arguments(self):
        c = config.resolve(env=self.env)
        self.assertEqual((c.context, c.address, c.token, c.tls_ca),
                         ("prod", "prod.example:50051", "s3cret", "/etc/prod-ca.pem"))
        env = dict(self.env, ZPIPE_COORDINATOR="env:1", ZPIPE_TOKEN="t0k", ZPIPE_TLS_CA="/e.pem")
        c = config.resolve(env=env)
        self.assertEqual((c.address, c.token, c.tls_ca), ("env:1", "t0k", "/e.pem"))
        c = config.resolve(address="arg:2", token="", tls_ca="/a.pem", env=env)
        self.assertEqual((c.address, c.token, c.tls_ca), ("arg:2", "", "/a.pem"))
        # context= beats $ZPIPE_CONTEXT beats current-context.
        c = config.resolve(env=dict(self.env, ZPIPE_CONTEXT="dev"))
        self.assertEqual((c.address, c.token, c.tls_ca), ("dev.example:50051", "", None))
        c = config.resolve(context="prod", env=dict(self.env, ZPIPE_CONTEXT="dev"))
        self.assertEqual(c.address, "prod.example:50051")

    def test_defaults_without_a_file(self):
        c = config.resolve(env={"HOME": self.home, "XDG_CONFIG_HOME": "/nonexistent"})
        self.assertEqual((c.address, c.token, c.tls_ca), ("localhost:50051", "", None))

    def test_unknown_context_and_bad_keys_say_what_is_wrong(self):
        with self.assertRaises(ZeroPipeError) as e:
            config.resolve(context="staging", env=self.env)
        self.assertIn("no context 'staging'", str(e.exception))
        path = os.path.join(self.home, "bad.yaml")
        with open(path, "w") as f:
            f.write("contexts:\n  - name: a\n    coordnator: x\n")
        with self.assertRaises(ZeroPipeError) as e:
            config.load_config(path)
        self.assertIn("unknown key 'coordnator'", str(e.exception))

    def test_client_uses_the_context(self):
        env = dict(self.env, ZPIPE_CONTEXT="dev")
        saved = dict(os.environ)
        try:
            os.environ.clear()
            os.environ.update(env)
            with Client() as client:
                self.assertEqual(client.address, "dev.example:50051")
            with Client(address="x:1") as client:
                self.assertEqual(client.address, "x:1")
        finally:
            os.environ.clear()
            os.environ.update(saved)


if __name__ == "__main__":
    unittest.main()
