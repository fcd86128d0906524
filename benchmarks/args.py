"""Command-line value types shared by the benchmark scripts.

Each is an argparse ``type=``: a bad value is refused by argparse (exit 2,
``<prog>: error: argument --x: <why>``) before anything is loaded, instead of
failing as a traceback once a corpus is loaded or a proxy started.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable, Iterable
from pathlib import Path

from benchmarks.latency.corpus import MANUAL
from onetrip.cli import report_error

#: The smallest synthetic corpus the benchmarks build (clusters, recall and k need a few hundred sections).
MIN_SECTIONS = 100


def _items(text: str, what: str) -> list[str]:
    items = [x.strip() for x in text.split(",") if x.strip()]
    if not items:
        raise argparse.ArgumentTypeError(f"expected a comma-separated list of {what}, got {text!r}")
    return items


def _distinct(values: list, text: str) -> list:
    """``values`` when none is repeated: a repeated size, RTT or count had been measured, and reported, twice."""
    if len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"a value is repeated in {text!r}")
    return values


def _number(text: str) -> float:
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(x):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return x


def _integer(text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None


def int_range(lo: int, hi: int | None = None) -> Callable[[str], int]:
    """An integer from lo to hi (no upper bound when hi is None)."""

    def parse(text: str) -> int:
        n = _integer(text)
        if n < lo or (hi is not None and n > hi):
            bound = f"at least {lo}" if hi is None else f"from {lo} to {hi}"
            raise argparse.ArgumentTypeError(f"{text!r}: must be {bound}")
        return n

    parse.__name__ = f"int_{lo}_{hi}"
    return parse


positive_int = int_range(1)
nonneg_int = int_range(0)
#: pgvector's hnsw.ef_search
ef_search = int_range(1, 1000)


def positive_number(text: str) -> float:
    """A finite number over 0 (seconds, intervals)."""
    x = _number(text)
    if x <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: must be over 0")
    return x
#: pgvector's HNSW ef_construction: at least 2 * m (m = 16 in these benchmarks), at most 1000
ef_construction = int_range(32, 1000)


def int_list(lo: int, hi: int | None = None) -> Callable[[str], list[int]]:
    """A comma-separated list of integers from lo to hi, e.g. ``1,2,4,8``."""
    one = int_range(lo, hi)

    def parse(text: str) -> list[int]:
        return _distinct([one(x) for x in _items(text, "whole numbers")], text)

    return parse


def size(text: str, *, manual: bool = True) -> int | str:
    """A corpus size in sections: 10000, 10_000, 10k, 1.5m, or 'manual' (the ingested manual) when allowed."""
    t = text.strip().lower().replace("_", "")
    if t == MANUAL:
        if manual:
            return MANUAL
        raise argparse.ArgumentTypeError("this benchmark runs on synthetic corpora only ('manual' is not a size here)")
    mult = 1
    if t.endswith("k"):
        mult, t = 1000, t[:-1]
    elif t.endswith("m"):
        mult, t = 1_000_000, t[:-1]
    try:
        x = float(t) * mult
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"corpus size {text!r} is not a number of sections (e.g. 10000, 10k, 1m"
            + (", or manual)" if manual else ")")) from None
    if not math.isfinite(x):
        raise argparse.ArgumentTypeError(f"corpus size {text!r} is not a finite number")
    n = int(x)
    if n < MIN_SECTIONS:
        raise argparse.ArgumentTypeError(f"corpus size {text!r} is too small (at least {MIN_SECTIONS} sections)")
    return n


def synthetic_size(text: str) -> int:
    """A synthetic corpus size (10000, 10k, 1m); 'manual' is refused."""
    n = size(text, manual=False)
    assert isinstance(n, int)
    return n


def sizes(text: str) -> list[int | str]:
    """Corpus sizes, comma-separated: synthetic sizes and/or 'manual'."""
    return _distinct([size(x) for x in _items(text, "corpus sizes")], text)


def synthetic_sizes(text: str) -> list[int]:
    """Synthetic corpus sizes, comma-separated (10000,100000 or 10k,1m)."""
    return _distinct([synthetic_size(x) for x in _items(text, "corpus sizes")], text)


def rtt(text: str) -> float:
    """One added RTT in ms: a finite number >= 0."""
    x = _number(text)
    if x < 0:
        raise argparse.ArgumentTypeError(f"RTT {text!r} is negative (added RTTs are ms >= 0)")
    return x


def rtts(text: str) -> list[float]:
    """Added RTTs in ms, comma-separated, each >= 0 (e.g. 0,0.5,1)."""
    return _distinct([rtt(x) for x in _items(text, "non-negative ms values")], text)


def rtts_or_direct(text: str) -> list[float | None]:
    """'direct' (no proxy, None) and/or added RTTs in ms through the delay proxy, comma-separated."""
    return _distinct([None if x == "direct" else rtt(x) for x in _items(text, "'direct' and/or non-negative ms values")],
                     text)


def rtts_among(allowed: Iterable[float]) -> Callable[[str], list[float]]:
    """Added RTTs in ms, comma-separated, each one of ``allowed``, no repeats."""
    allowed = tuple(allowed)
    names = ", ".join(f"{a:g}" for a in allowed)

    def parse(text: str) -> list[float]:
        out = rtts(text)
        bad = [x for x in out if x not in allowed]
        if bad:
            raise argparse.ArgumentTypeError(
                f"RTT {bad[0]:g} ms is not reported: choose among {names} (comma-separated)")
        if len(set(out)) != len(out):
            raise argparse.ArgumentTypeError(f"RTT repeated in {text!r}")
        return out

    return parse


def choice_list(choices: Iterable[str]) -> Callable[[str], list[str]]:
    """A comma-separated list of names, each one of ``choices``, no repeats."""
    choices = tuple(choices)

    def parse(text: str) -> list[str]:
        out = _items(text, "names")
        for x in out:
            if x not in choices:
                raise argparse.ArgumentTypeError(f"invalid choice {x!r} (choose from {', '.join(choices)})")
        if len(set(out)) != len(out):
            raise argparse.ArgumentTypeError(f"a name is repeated in {text!r}")
        return out

    return parse


def memory_size(text: str) -> str:
    """A PostgreSQL memory setting such as 512MB or 4GB (units kB, MB, GB, TB; none: kB), checked as it is read:
    a bad value had failed only after the corpus was generated and copied, its HNSW index dropped."""
    m = re.fullmatch(r"\s*(\d+)\s*(kB|MB|GB|TB)?\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r} is not a memory size such as 512MB or 4GB (units kB, MB, GB, TB)")
    kb = int(m.group(1)) * {"kB": 1, "MB": 1024, "GB": 1024**2, "TB": 1024**3}[m.group(2) or "kB"]
    if not 64 <= kb <= 2147483647:  # maintenance_work_mem's range (64 kB to 2 TB - 1 kB)
        raise argparse.ArgumentTypeError(f"{text!r} is outside maintenance_work_mem's range, 64kB to 2147483647kB")
    return f"{m.group(1)}{m.group(2) or 'kB'}"


def memory_size_or_auto(text: str) -> str:
    """'auto' (the benchmark sizes it) or a `memory_size`."""
    return "auto" if text.strip() == "auto" else memory_size(text)


def output_file(out: str, name: str) -> Path:
    """Where a one-file benchmark's --out writes: a path ending in .json is the file; anything else is a folder,
    as every other benchmark's --out, and the file is ``name`` in it. A folder had been written to as a file
    (ingest_manual: IsADirectoryError after the whole ingest) or taken as a stem (load_http: beside it)."""
    p = Path(out)
    return p if p.suffix.lower() == ".json" and not p.is_dir() else p / name


def output_folder(text: str) -> Path:
    """A benchmark's --out folder, made when the results are written: refused at once when it, or the nearest
    part of it that exists, is a file (the folder could not be made after the whole measurement, which was lost)."""
    p = Path(text)
    for part in (p, *p.parents):
        if part.exists():
            if not part.is_dir():
                raise argparse.ArgumentTypeError(f"{text!r} is a file, not a folder" if part == p else
                                                 f"{text!r} cannot be a folder: {str(part)!r} is a file")
            break
    return p


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Shows each flag's default (unless None or False: the help says what then), the description as written."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False:
            return action.help
        return super()._get_help_string(action)


def run_cli(main: Callable[[], int], module: str) -> int:
    """Run a benchmark's ``main`` as ``python -m module`` does, with onetrip's errors as one line.

    A DSN that does not answer, tables never made or a wrong dimension are the
    runner's to fix, not the benchmark's bugs: ``<prog>: error: <why>`` and the
    onetrip CLI's exit codes (`onetrip.cli.report_error`) instead of a traceback.
    Any other exception still shows its traceback.
    """
    try:
        return main()
    except Exception as e:
        code = report_error(f"python -m {module}", e)
        if code is None:
            raise
        return code
