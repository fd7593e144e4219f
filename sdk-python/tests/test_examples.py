"""The Python example guests, run as plain functions: the same output as the Rust
examples' own unit tests (guest-examples/word-count/src/lib.rs)."""

import importlib.util
import unittest

from support import REPO, batch, entries, groups, reset_registry, rows

from weir_guest import Record, aggregator, mapper


def load(path):
    reset_registry()
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Uppercase(unittest.TestCase):
    def test_uppercases_the_value_and_keeps_key_and_time(self):
        load(REPO / "guest-examples/python/uppercase/uppercase.py")
        out, rejections = mapper.run_map(
            batch((b"k", b"hello stra\xc3\x9fe", 5), (b"", b"\xff", 6)), mapper.registered()
        )
        self.assertEqual(rows(out.finish()), [(b"k", "HELLO STRASSE".encode(), 5)])
        self.assertEqual(rejections, [(1, "value is not UTF-8: invalid utf-8 sequence of 1 bytes from index 0")])


class WordCount(unittest.TestCase):
    def setUp(self):
        self.module = load(REPO / "guest-examples/python/word-count/word_count.py")

    def emitted(self, key, window, count):
        out = aggregator.registered().emit_all(entries([(key, window, str(count).encode())]))
        (record,) = rows(out.finish())
        return record

    def test_counts_and_emits_the_documented_json(self):
        # three records of a key with no accumulator yet (empty), through the export
        _, data, _ = aggregator.registered().update(groups([b""], [[(b"hello", b"hello", 1)] * 3]))
        self.assertEqual(data, b"3")
        n = self.module.count(int(data), Record("hello", "hello"))
        self.assertEqual(n, 4)
        n = 3
        self.assertEqual(self.emitted(b"hello", None, n), (b"hello", b'{"word":"hello","count":3}', 0))
        self.assertEqual(
            self.emitted(b"hello", (0, 60000), n),
            (b"hello", b'{"word":"hello","window_start":0,"window_end":60000,"count":3}', 59999),
        )

    def test_a_key_is_escaped_and_invalid_utf8_replaced(self):
        key = b'say "hi"\\\n\xff\x1f\x7f'
        self.assertEqual(
            self.emitted(key, None, 2),
            (key, '{"word":"say \\"hi\\"\\\\\\n\ufffd\\u001f\x7f","count":2}'.encode(), 0),
        )


if __name__ == "__main__":
    unittest.main()
