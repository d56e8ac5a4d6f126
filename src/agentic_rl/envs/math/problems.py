"""Procedurally generated math problems that need computation, with exact integer answers.

Three categories, several templates each (every template returns the question, the exact
answer and a short Python program that prints it, which the scripted expert writes):
- arithmetic: multi-step products and sums of 3-4 digit numbers, sums of squares over a range,
  arithmetic series, digit sums of large powers;
- number theory: gcd, lcm, modular exponentiation a^e mod m, the number of divisors of n,
  the number of primes in a range;
- combinatorics: n choose k, ordered podium finishes nPk, distinct arrangements of the letters
  of a word (multinomial n! / prod c_i!), strings with repetition n^k, derangements
  D(n) = (n - 1)(D(n-1) + D(n-2)), D(0) = 1, D(1) = 0.

Train / eval splits never share a prompt: a prompt belongs to the eval split iff a hash of its
text falls in the eval bucket, and each split's generator rejects the other split's prompts;
the seed only picks which prompts of the split are drawn.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Callable
from typing import Literal

from agentic_rl.envs.splits import split_of
from agentic_rl.types import Task

Split = Literal["train", "eval"]

# rng -> (question, answer, python code printing the answer)
Template = Callable[[random.Random], tuple[str, int, str]]


def _pick(rng: random.Random, phrasings: list[str]) -> str:
    return phrasings[rng.randrange(len(phrasings))]


# -- arithmetic ------------------------------------------------------------------------------


def _products(rng: random.Random) -> tuple[str, int, str]:
    a, b, c, d = (rng.randint(101, 9999) for _ in range(4))
    e = rng.randint(1000, 99999)
    expr = f"{a} * {b} - {c} * {d} + {e}"
    q = _pick(rng, ["Compute {x}.", "What is the value of {x}?", "Evaluate {x}."])
    return q.format(x=expr.replace("*", "×")), a * b - c * d + e, f"print({expr})"


def _sum_of_squares(rng: random.Random) -> tuple[str, int, str]:
    lo = rng.randint(10, 200)
    hi = lo + rng.randint(20, 300)
    q = _pick(
        rng,
        [
            "What is the sum of the squares of the integers from {lo} to {hi}, inclusive?",
            "Compute {lo}^2 + {nxt}^2 + ... + {hi}^2.",
        ],
    )
    answer = sum(k * k for k in range(lo, hi + 1))
    return (
        q.format(lo=lo, nxt=lo + 1, hi=hi),
        answer,
        f"print(sum(k * k for k in range({lo}, {hi + 1})))",
    )


def _series(rng: random.Random) -> tuple[str, int, str]:
    start, step, n = rng.randint(3, 500), rng.randint(2, 97), rng.randint(20, 400)
    q = _pick(
        rng,
        [
            "A sequence starts at {a} and each term is {d} more than the one before. "
            "What is the sum of its first {n} terms?",
            "What is the sum of the first {n} terms of the arithmetic sequence "
            "{a}, {a1}, {a2}, ...?",
        ],
    )
    answer = sum(start + step * i for i in range(n))
    code = f"print(sum({start} + {step} * i for i in range({n})))"
    return q.format(a=start, d=step, n=n, a1=start + step, a2=start + 2 * step), answer, code


def _digit_sum_power(rng: random.Random) -> tuple[str, int, str]:
    base, exp = rng.randint(2, 99), rng.randint(20, 200)
    q = _pick(
        rng,
        [
            "What is the sum of the digits of {b}^{e}?",
            "Find the digit sum of {b} to the power {e}.",
        ],
    )
    answer = sum(int(ch) for ch in str(base**exp))
    return q.format(b=base, e=exp), answer, f"print(sum(int(ch) for ch in str({base} ** {exp})))"


# -- number theory ---------------------------------------------------------------------------


def _gcd(rng: random.Random) -> tuple[str, int, str]:
    g = rng.randint(12, 999)
    a, b = g * rng.randint(50, 9999), g * rng.randint(50, 9999)
    q = _pick(
        rng,
        [
            "What is the greatest common divisor of {a} and {b}?",
            "Find gcd({a}, {b}).",
        ],
    )
    return q.format(a=a, b=b), math.gcd(a, b), f"import math\nprint(math.gcd({a}, {b}))"


def _lcm(rng: random.Random) -> tuple[str, int, str]:
    a, b, c = (rng.randint(12, 999) for _ in range(3))
    q = _pick(
        rng,
        [
            "What is the least common multiple of {a}, {b} and {c}?",
            "Find the smallest positive integer divisible by {a}, {b} and {c}.",
        ],
    )
    answer = math.lcm(a, b, c)
    return q.format(a=a, b=b, c=c), answer, f"import math\nprint(math.lcm({a}, {b}, {c}))"


def _modpow(rng: random.Random) -> tuple[str, int, str]:
    a, e, m = rng.randint(2, 999), rng.randint(50, 9999), rng.randint(7, 9999)
    q = _pick(
        rng,
        [
            "What is the remainder when {a}^{e} is divided by {m}?",
            "Compute {a}^{e} mod {m}.",
        ],
    )
    return q.format(a=a, e=e, m=m), pow(a, e, m), f"print(pow({a}, {e}, {m}))"


def _num_divisors(n: int) -> int:
    count, d = 0, 1
    while d * d <= n:
        if n % d == 0:
            count += 1 if d * d == n else 2
        d += 1
    return count


def _divisors(rng: random.Random) -> tuple[str, int, str]:
    # Products of small primes have many divisors: the interesting cases.
    n = 1
    while n < 1000:
        n *= rng.choice([2, 2, 2, 3, 3, 5, 7, 11, 13])
    n = min(n, 10**9)
    q = _pick(
        rng,
        [
            "How many positive divisors does {n} have?",
            "Count the positive integers that divide {n}.",
        ],
    )
    code = (
        f"n = {n}\ncount, d = 0, 1\nwhile d * d <= n:\n    if n % d == 0:\n"
        "        count += 1 if d * d == n else 2\n    d += 1\nprint(count)"
    )
    return q.format(n=n), _num_divisors(n), code


def _is_prime(n: int) -> bool:
    return n >= 2 and all(n % p for p in range(2, math.isqrt(n) + 1))


def _primes_in_range(rng: random.Random) -> tuple[str, int, str]:
    lo = rng.randint(100, 20000)
    hi = lo + rng.randint(100, 3000)
    q = _pick(
        rng,
        [
            "How many prime numbers are there between {lo} and {hi}, inclusive?",
            "Count the primes p with {lo} <= p <= {hi}.",
        ],
    )
    answer = sum(_is_prime(k) for k in range(lo, hi + 1))
    code = (
        "import math\n"
        "def is_prime(n):\n"
        "    return n >= 2 and all(n % p for p in range(2, math.isqrt(n) + 1))\n"
        f"print(sum(is_prime(k) for k in range({lo}, {hi + 1})))"
    )
    return q.format(lo=lo, hi=hi), answer, code


# -- combinatorics ---------------------------------------------------------------------------

WORDS = [
    "MISSISSIPPI", "BANANA", "BOOKKEEPER", "STATISTICS", "COMMITTEE", "TENNESSEE", "ASSESSMENT",
    "MATHEMATICS", "PEPPERMINT", "BALLOON", "SUCCESS", "PARALLEL", "REFERENDUM", "CALCULUS",
    "POSSESSION", "ABRACADABRA", "INTELLIGENT", "NONSENSE", "COOKBOOK", "ACCESSORIES",
]  # fmt: skip


def _choose(rng: random.Random) -> tuple[str, int, str]:
    n = rng.randint(20, 80)
    k = rng.randint(4, n // 2)
    q = _pick(
        rng,
        [
            "In how many ways can a committee of {k} people be chosen from {n} people?",
            "How many {k}-element subsets does a set with {n} elements have?",
            "What is {n} choose {k}?",
        ],
    )
    return q.format(n=n, k=k), math.comb(n, k), f"import math\nprint(math.comb({n}, {k}))"


def _podium(rng: random.Random) -> tuple[str, int, str]:
    n, k = rng.randint(12, 60), rng.randint(3, 6)
    q = _pick(
        rng,
        [
            "{n} runners race. In how many ways can the first {k} places be filled (no ties)?",
            "How many ordered sequences of {k} different items can be drawn from {n} items?",
        ],
    )
    return q.format(n=n, k=k), math.perm(n, k), f"import math\nprint(math.perm({n}, {k}))"


def _word_arrangements(rng: random.Random) -> tuple[str, int, str]:
    word = WORDS[rng.randrange(len(WORDS))]
    q = _pick(
        rng,
        [
            "How many distinct arrangements of the letters of the word {w} are there?",
            "In how many different ways can the letters of {w} be ordered?",
            "How many distinct strings can be made by rearranging all the letters of {w}?",
        ],
    )
    answer = math.factorial(len(word))
    for count in Counter(word).values():
        answer //= math.factorial(count)
    code = (
        "import math\nfrom collections import Counter\n"
        f"word = {word!r}\nresult = math.factorial(len(word))\n"
        "for c in Counter(word).values():\n    result //= math.factorial(c)\nprint(result)"
    )
    return q.format(w=word), answer, code


def _strings(rng: random.Random) -> tuple[str, int, str]:
    n, k = rng.randint(3, 30), rng.randint(5, 14)
    q = _pick(
        rng,
        [
            "How many strings of length {k} can be formed from an alphabet of {n} letters "
            "if letters may repeat?",
            "A lock has {k} dials, each with {n} symbols. How many combinations are there?",
        ],
    )
    return q.format(n=n, k=k), n**k, f"print({n} ** {k})"


def _derangement(n: int) -> int:
    a, b = 1, 0  # D(0), D(1)
    for m in range(2, n + 1):
        a, b = b, (m - 1) * (a + b)
    return a if n == 0 else b


def _derangements(rng: random.Random) -> tuple[str, int, str]:
    n = rng.randint(5, 16)
    q = _pick(
        rng,
        [
            "In how many ways can {n} letters be put into their {n} addressed envelopes so that "
            "no letter is in its own envelope?",
            "{n} guests leave their hats at the door and each takes back a hat that is not "
            "their own. In how many ways can this happen?",
            "How many permutations of {n} elements have no fixed point?",
        ],
    )
    code = f"a, b = 1, 0\nfor m in range(2, {n + 1}):\n    a, b = b, (m - 1) * (a + b)\nprint(b)"
    return q.format(n=n), _derangement(n), code


CATEGORIES: dict[str, list[Template]] = {
    "arithmetic": [_products, _sum_of_squares, _series, _digit_sum_power],
    "number_theory": [_gcd, _lcm, _modpow, _divisors, _primes_in_range],
    "combinatorics": [_choose, _podium, _word_arrangements, _strings, _derangements],
}


def make_math_tasks(
    split: Split, n: int, seed: int = 0, categories: list[str] | None = None
) -> list[Task]:
    """`n` distinct problems of `split` drawn evenly over `categories` (all by default).

    Each task has `answers=[str(int)]` and `fields={"category", "template", "code"}`; the same
    (split, n, seed, categories) gives the same tasks.
    """
    if split not in ("train", "eval"):
        raise ValueError(f"split must be 'train' or 'eval', got {split!r}")
    names = categories or list(CATEGORIES)
    unknown = [c for c in names if c not in CATEGORIES]
    if unknown:
        raise ValueError(f"unknown categories {unknown}; valid: {', '.join(CATEGORIES)}")
    rng = random.Random(f"math_tasks/{split}/{seed}/{','.join(names)}")
    tasks: list[Task] = []
    seen: set[str] = set()
    attempts = 0
    while len(tasks) < n:
        attempts += 1
        if attempts > 100 * n + 1000:
            raise RuntimeError(f"could not generate {n} distinct {split} math tasks")
        category = names[len(tasks) % len(names)]
        template = CATEGORIES[category][rng.randrange(len(CATEGORIES[category]))]
        question, answer, code = template(rng)
        if question in seen or split_of(question) != split:
            continue
        seen.add(question)
        tasks.append(
            Task(
                task_id=f"math-{split}-{seed}-{len(tasks)}",
                prompt=question,
                answers=[str(answer)],
                fields={"category": category, "template": template.__name__[1:], "code": code},
            )
        )
    return tasks
