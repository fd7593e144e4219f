"""`log` and `config` outside a component: stderr and `LOCAL_CONFIG`."""

import contextlib
import io
import unittest

import support  # noqa: F401 (puts the SDK on sys.path)

import weir_guest
from weir_guest import host


class Host(unittest.TestCase):
    def test_config_reads_local_config_outside_a_component(self):
        self.assertIsNone(weir_guest.config("field"))
        self.assertEqual(weir_guest.config("field", "kind"), "kind")
        host.LOCAL_CONFIG["field"] = "value"
        try:
            self.assertEqual(weir_guest.config("field", "kind"), "value")
        finally:
            host.LOCAL_CONFIG.clear()

    def test_log_writes_stderr_and_checks_the_level(self):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            weir_guest.log("warn", "careful")
        self.assertEqual(err.getvalue(), "WARN careful\n")
        with self.assertRaises(ValueError):
            weir_guest.log("loud", "x")


if __name__ == "__main__":
    unittest.main()
