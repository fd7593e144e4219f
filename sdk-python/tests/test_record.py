"""`Record`'s accessors and the wording of its UTF-8 rejections (the Rust SDK's)."""

import unittest

import support  # noqa: F401 (puts the SDK on sys.path)

from weir_guest import Record, Reject


class Accessors(unittest.TestCase):
    def test_text_accessors_and_setters(self):
        r = Record(b"k", "välue", 7)
        self.assertEqual((r.key_str, r.value_str, r.timestamp), ("k", "välue", 7))
        r.value_str = "ÜP"
        self.assertEqual(r.value, "ÜP".encode())
        r.key_str = "key"
        self.assertEqual(r.key, b"key")
        self.assertEqual(Record(b"k", b"v"), Record("k", "v", 0))
        self.assertNotEqual(Record(b"k", b"v"), Record(b"k", b"v", 1))

    def test_invalid_utf8_rejects_with_rusts_wording(self):
        with self.assertRaises(Reject) as caught:
            Record(b"", b"\xff").value_str
        self.assertEqual(caught.exception.reason, "value is not UTF-8: invalid utf-8 sequence of 1 bytes from index 0")
        with self.assertRaises(Reject) as caught:
            Record(b"a\xe2\x82", b"").key_str
        self.assertEqual(caught.exception.reason, "key is not UTF-8: incomplete utf-8 byte sequence from index 1")

    def test_json(self):
        r = Record.from_json("k", {"a": 1, "w": "ü"})
        self.assertEqual(r.value, '{"a":1,"w":"ü"}'.encode())
        self.assertEqual(r.json(), {"a": 1, "w": "ü"})
        with self.assertRaises(Reject) as caught:
            Record(b"", b"{not json").json()
        self.assertTrue(caught.exception.reason.startswith("value is not valid JSON"))


if __name__ == "__main__":
    unittest.main()
