"""`@weir_guest.map` and the map export's per-batch loop."""

import unittest

from support import batch, reset_registry, rows

import weir_guest
from weir_guest import Record, Reject, mapper


class Map(unittest.TestCase):
    def setUp(self):
        reset_registry()

    def test_map_filter_and_flat_map_in_order(self):
        def f(record):
            text = record.value_str
            if text == "drop":
                return None
            if text.startswith("split "):
                return [Record(record.key, w, record.timestamp) for w in text.split()[1:]]
            record.value_str = text.upper()
            return record

        out, rejections = mapper.run_map(batch((b"a", b"x", 1), (b"", b"drop", 2), (b"c", b"split p q", 3)), f)
        self.assertEqual(rows(out.finish()), [(b"a", b"X", 1), (b"c", b"p", 3), (b"c", b"q", 3)])
        self.assertEqual(rejections, [])

    def test_reject_refuses_one_record_and_keeps_the_rest(self):
        def f(record):
            if record.value == b"bad":
                raise Reject("bad record")
            return record

        out, rejections = mapper.run_map(batch((b"", b"ok", 1), (b"", b"bad", 2), (b"", b"\xff", 3), (b"", b"ok2", 4)), f)
        self.assertEqual(rows(out.finish()), [(b"", b"ok", 1), (b"", b"\xff", 3), (b"", b"ok2", 4)])
        self.assertEqual(rejections, [(1, "bad record")])
        # an unguarded text access refuses a non-UTF-8 record
        _, rejections = mapper.run_map(batch((b"", b"\xff", 3)), lambda r: Record(r.key, r.value_str.upper()))
        self.assertEqual(rejections, [(0, "value is not UTF-8: invalid utf-8 sequence of 1 bytes from index 0")])

    def test_any_exception_refuses_its_record_with_its_class_in_the_reason(self):
        def f(record):
            return Record(record.key, str(int(record.value)))

        out, rejections = mapper.run_map(batch((b"", b"1", 1), (b"", b"x", 2), (b"", b"3", 3)), f)
        self.assertEqual(rows(out.finish()), [(b"", b"1", 0), (b"", b"3", 0)])
        self.assertEqual(rejections, [(1, "ValueError: invalid literal for int() with base 10: b'x'")])
        _, rejections = mapper.run_map(batch((b"", b"x", 1)), lambda r: {}["missing"])
        self.assertEqual(rejections, [(0, "KeyError: 'missing'")])

    def test_memory_errors_exits_and_bad_returns_trap(self):
        def oom(record):
            raise MemoryError()

        with self.assertRaises(MemoryError):
            mapper.run_map(batch((b"", b"x", 1)), oom)

        def leave(record):
            raise SystemExit(3)

        with self.assertRaises(SystemExit):
            mapper.run_map(batch((b"", b"x", 1)), leave)
        with self.assertRaisesRegex(TypeError, "must return a Record"):
            mapper.run_map(batch((b"", b"x", 1)), lambda r: "text")
        with self.assertRaisesRegex(TypeError, "list holding a str"):
            mapper.run_map(batch((b"", b"x", 1)), lambda r: [r, "text"])
        with self.assertRaisesRegex(OverflowError, "must fit in 64 bits"):
            mapper.run_map(batch((b"", b"x", 1)), lambda r: Record(r.key, r.value, 1 << 63))

    def test_one_map_per_component(self):
        @weir_guest.map
        def first(record):
            return record

        self.assertIs(mapper.registered(), first)
        with self.assertRaisesRegex(RuntimeError, "one map function"):

            @weir_guest.map
            def second(record):
                return record

    def test_nothing_registered_is_an_error(self):
        with self.assertRaisesRegex(RuntimeError, "no function is decorated"):
            mapper.registered()


if __name__ == "__main__":
    unittest.main()
