"""The columnar framing: decoding against batches framed by hand per wit/weir.wit, and
the builder's output decoding back to what was pushed."""

import unittest

from support import batch, rows

from weir_guest import framing
from weir_guest.framing import BatchBuilder, FrameBuilder, FramingError


class Decode(unittest.TestCase):
    def test_records_slice_each_column(self):
        b = batch((b"k1", b"hello", 5), (b"", b"", -1), (b"key", b"\xffbytes", 2**40))
        self.assertEqual(
            list(framing.records(b)), [(b"k1", b"hello", 5), (b"", b"", -1), (b"key", b"\xffbytes", 2**40)]
        )

    def test_empty_batch(self):
        self.assertEqual(list(framing.records(batch())), [])

    def test_mismatched_columns_are_refused(self):
        b = batch((b"k", b"v", 1))
        b.timestamps.append(2)
        with self.assertRaises(FramingError):
            list(framing.records(b))

    def test_ends_that_do_not_cover_the_bytes_are_refused(self):
        b = batch((b"k", b"v", 1))
        b.values += b"extra"
        with self.assertRaisesRegex(FramingError, "values"):
            list(framing.records(b))

    def test_decreasing_ends_are_refused(self):
        # the last end matches the data, but frame 1 would slice keys[3:1] == b""
        b = batch((b"abc", b"v", 1), (b"", b"w", 2), (b"d", b"x", 3))
        b.key_ends = [3, 1, 4]
        with self.assertRaisesRegex(FramingError, r"keys from the host: frame 1 spans 3\.\.1 of 4"):
            list(framing.records(b))
        with self.assertRaisesRegex(FramingError, r"frame 0 spans 0\.\.-1 of 2"):
            list(framing.frames([-1, 2], b"ab", "accumulators"))
        with self.assertRaisesRegex(FramingError, r"frame 2 spans 3\.\.2 of 4"):
            framing.check_ends([2, 3, 2, 4], 4, "record ends")

    def test_frames(self):
        self.assertEqual(list(framing.frames([1, 1, 4], b"abcd", "x")), [b"a", b"", b"bcd"])
        with self.assertRaises(FramingError):
            list(framing.frames([1, 2], b"abcd", "x"))


class Encode(unittest.TestCase):
    def test_builder_round_trips_and_encodes_text(self):
        out = BatchBuilder()
        out.push(b"k", b"v", 1)
        out.push("", "ünïcode", 2)
        out.push(bytearray(b"b"), memoryview(b"m"), 3)
        built = out.finish()
        self.assertEqual(rows(built), [(b"k", b"v", 1), (b"", "ünïcode".encode(), 2), (b"b", b"m", 3)])
        self.assertEqual(len(out), 3)

    def test_builder_refuses_other_types(self):
        out = BatchBuilder()
        with self.assertRaises(TypeError):
            out.push(b"k", 42, 1)
        with self.assertRaises(TypeError):
            out.push(b"k", b"v", "1")

    def test_builder_refuses_timestamps_outside_s64(self):
        # the bindings would fail to lower the whole batch (or, elsewhere, wrap it)
        out = BatchBuilder()
        for bad in (1 << 63, -(1 << 63) - 1, 1 << 70):
            with self.subTest(bad=bad), self.assertRaisesRegex(OverflowError, "must fit in 64 bits"):
                out.push(b"k", b"v", bad)
        out.push(b"a", b"max", (1 << 63) - 1)
        out.push(b"b", b"min", -(1 << 63))
        self.assertEqual(rows(out.finish()), [(b"a", b"max", (1 << 63) - 1), (b"b", b"min", -(1 << 63))])

    def test_frame_builder(self):
        f = FrameBuilder()
        for frame in (b"ab", b"", b"c"):
            f.push(frame)
        self.assertEqual(f.finish(), ([2, 2, 3], b"abc"))


if __name__ == "__main__":
    unittest.main()
