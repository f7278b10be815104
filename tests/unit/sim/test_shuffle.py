import random

import pytest

from evio.sim.shuffle import shuffle


@pytest.mark.parametrize("size", [0, 1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 100, 1000, 4097])
@pytest.mark.parametrize("seed", range(3))
def test_the_same_permutation_and_generator_state_as_the_standard_shuffle(seed: int, size: int) -> None:
    ours, theirs = random.Random(seed), random.Random(seed)
    ours.random(), theirs.random()  # anywhere in the stream, not only at a seed
    mine, reference = list(range(size)), list(range(size))
    shuffle(ours, mine)
    theirs.shuffle(reference)
    assert mine == reference
    assert ours.getstate() == theirs.getstate()


def test_a_subclass_gets_the_standard_shuffle() -> None:
    class Counting(random.Random):
        calls = 0

        def shuffle(self, x: list[int]) -> None:  # type: ignore[override]
            self.calls += 1
            super().shuffle(x)

    rng = Counting(5)
    items = list(range(50))
    shuffle(rng, items)
    assert rng.calls == 1 and sorted(items) == list(range(50)) and items != list(range(50))
