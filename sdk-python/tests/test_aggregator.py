"""`@weir_guest.aggregate`: the fold over JSON accumulators, "empty means initial",
rejections, and emit."""

import dataclasses
import unittest

from support import entries, groups, reset_registry, rows

import weir_guest
from weir_guest import Record, Reject, Window, aggregator


def emit_value(key, window, acc):
    return Record(key, repr((window, acc)))


@dataclasses.dataclass
class Stats:
    count: int = 0
    total: int = 0


class Update(unittest.TestCase):
    def setUp(self):
        reset_registry()

    def register(self, fold, initial, emit=emit_value):
        reset_registry()
        weir_guest.aggregate(initial=initial, emit=emit)(fold)
        return aggregator.registered()

    def test_int_fold_empty_means_initial(self):
        agg = self.register(lambda n, r: n + 1, 0)
        ends, data, rejections = agg.update(
            groups([b"", b"41", b"7"], [[(b"a", b"x", 1)], [(b"b", b"y", 2), (b"b", b"z", 3)], []])
        )
        self.assertEqual((ends, data, rejections), ([1, 3, 4], b"1437", []))

    def test_rejected_and_empty_groups_keep_their_bytes(self):
        def fold(n, record):
            if record.value == b"bad":
                raise Reject("not counted")
            return n + int(record.value_str)

        agg = self.register(fold, 0)
        ends, data, rejections = agg.update(
            groups([b"", b"5", b"  5"], [[(b"a", b"bad", 1)], [(b"b", b"2", 2), (b"b", b"bad", 3)], []])
        )
        # group 0: nothing accepted -> still empty; group 2: untouched, byte for byte
        self.assertEqual((ends, data), ([0, 1, 4], b"7  5"))
        self.assertEqual(rejections, [(0, "not counted"), (2, "not counted")])

    def test_dict_accumulator_mutated_in_place(self):
        def fold(words, record):
            words[record.value_str] = words.get(record.value_str, 0) + 1

        agg = self.register(fold, dict)
        ends, data, _ = agg.update(groups([b"", b'{"a":1}'], [[(b"k", b"a", 1), (b"k", b"a", 1)], [(b"k", b"b", 1)]]))
        self.assertEqual(data, b'{"a":2}{"a":1,"b":1}')
        self.assertEqual(ends, [7, 20])
        # a mutable `initial` value is copied, never shared between groups
        agg = self.register(fold, {})
        _, data, _ = agg.update(groups([b"", b""], [[(b"k", b"a", 1)], [(b"k", b"b", 1)]]))
        self.assertEqual(data, b'{"a":1}{"b":1}')

    def test_dataclass_accumulator_round_trips(self):
        def fold(stats, record):
            stats.count += 1
            stats.total += int(record.value_str)
            return stats

        agg = self.register(fold, Stats)
        _, data, _ = agg.update(groups([b""], [[(b"k", b"3", 1), (b"k", b"4", 1)]]))
        self.assertEqual(data, b'{"count":2,"total":7}')
        self.assertEqual(agg.codec.decode(data), Stats(2, 7))

    def test_any_exception_refuses_its_record(self):
        agg = self.register(lambda n, r: n + int(r.value), 0)
        ends, data, rejections = agg.update(groups([b"1"], [[(b"k", b"2", 1), (b"k", b"two", 2), (b"k", b"3", 3)]]))
        self.assertEqual(data, b"6")
        self.assertEqual(rejections, [(1, "ValueError: invalid literal for int() with base 10: b'two'")])

    def test_an_exception_in_emit_traps(self):
        agg = self.register(lambda n, r: n + 1, 0, emit=lambda key, window, n: 1 / 0)
        with self.assertRaises(ZeroDivisionError):
            agg.emit_all(entries([(b"a", None, b"3")]))

    def test_an_immutable_accumulator_must_be_returned(self):
        def forgot(n, record):
            n += 1  # noqa: F841 (the mistake under test)

        agg = self.register(forgot, 0)
        with self.assertRaisesRegex(TypeError, "returned None for a int accumulator"):
            agg.update(groups([b""], [[(b"k", b"x", 1)]]))

    def test_undecodable_state_traps(self):
        agg = self.register(lambda n, r: n + 1, 0)
        with self.assertRaisesRegex(ValueError, "does not decode"):
            agg.update(groups([b"\x00postcard"], [[(b"k", b"x", 1)]]))

    def test_accumulators_that_do_not_round_trip_trap(self):
        # json.dumps would write {5: 1} as {"5": 1}: the next batch would add a second
        # key 5 and the count would restart; a tuple would come back a list
        def by_int_key(counts, record):
            n = int(record.value_str)
            counts[n] = counts.get(n, 0) + 1

        agg = self.register(by_int_key, dict)
        with self.assertRaisesRegex(TypeError, "does not round-trip.*acc has a int key 5"):
            agg.update(groups([b""], [[(b"k", b"5", 1)]]))
        cases = [
            (lambda acc, r: (1, 2), "acc is a tuple"),
            (lambda acc, r: {"seen": {1, 2}}, r"acc\['seen'\] is a set"),
            (lambda acc, r: [1.0, float("nan")], r"acc\[1\] is nan"),
            (lambda acc, r: {"x": float("inf")}, r"acc\['x'\] is inf"),
            (lambda acc, r: {"b": b"raw"}, r"acc\['b'\] is a bytes"),
            (lambda acc, r: [{"a": [None, True, {None: 1}]}], r"acc\[0\]\['a'\]\[2\] has a NoneType key None"),
        ]
        for fold, why in cases:
            with self.subTest(why=why):
                agg = self.register(fold, 0)
                with self.assertRaisesRegex(TypeError, why):
                    agg.update(groups([b"7"], [[(b"k", b"x", 1)]]))

    def test_accumulator_types_that_round_trip_are_kept(self):
        value = {"n": 1, "f": -0.5, "s": "é", "b": False, "z": None, "l": [1, [2.5, "x"]], "d": {"k": {}}}
        agg = self.register(lambda acc, r: value, dict)
        _, data, _ = agg.update(groups([b""], [[(b"k", b"x", 1)]]))
        self.assertEqual(agg.codec.decode(data), value)

    def test_a_dataclass_with_a_field_that_does_not_round_trip_traps(self):
        @dataclasses.dataclass
        class Seen:
            ids: tuple = ()

        def fold(seen, record):
            seen.ids = (*seen.ids, record.value_str)

        with self.assertRaisesRegex(TypeError, r"acc\['ids'\] is a tuple"):
            self.register(fold, Seen)  # checked at registration: Seen() has ids=()
        agg = self.register(fold, dataclasses.make_dataclass("Ids", [("ids", list, dataclasses.field(default_factory=list))]))
        with self.assertRaisesRegex(TypeError, r"acc\['ids'\] is a tuple"):
            agg.update(groups([b""], [[(b"k", b"x", 1)]]))

    def test_an_initial_that_does_not_round_trip_is_refused_at_registration(self):
        for initial in [(0, 0), set, {1: 0}, float("nan")]:
            with self.subTest(initial=initial), self.assertRaisesRegex(TypeError, "does not round-trip"):
                self.register(lambda acc, r: acc, initial)

    def test_malformed_group_batch(self):
        agg = self.register(lambda n, r: n + 1, 0)
        g = groups([b"", b""], [[(b"k", b"x", 1)], [(b"k", b"x", 1)]])
        g.record_ends = [1, 1]
        with self.assertRaises(ValueError):
            agg.update(g)


class Emit(unittest.TestCase):
    def setUp(self):
        reset_registry()

    def test_emit_gets_key_window_and_decoded_accumulator(self):
        weir_guest.aggregate(initial=0, emit=emit_value)(lambda n, r: n + 1)
        out = aggregator.registered().emit_all(entries([(b"a", None, b"3"), (b"b", (0, 10), b""), (b"", (5, 6), b"2")]))
        self.assertEqual(
            rows(out.finish()),
            [
                (b"a", b"(None, 3)", 0),
                (b"b", repr((Window(0, 10), 0)).encode(), 0),
                (b"", repr((Window(5, 6), 2)).encode(), 0),
            ],
        )

    def test_emit_may_return_none_or_several(self):
        def emit(key, window, n):
            return None if n == 0 else [Record(key, str(i)) for i in range(n)]

        weir_guest.aggregate(initial=0, emit=emit)(lambda n, r: n + 1)
        out = aggregator.registered().emit_all(entries([(b"a", None, b"0"), (b"b", None, b"2")]))
        self.assertEqual(rows(out.finish()), [(b"b", b"0", 0), (b"b", b"1", 0)])


if __name__ == "__main__":
    unittest.main()
