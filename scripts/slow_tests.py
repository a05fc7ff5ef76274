"""Write tests/slow_tests.txt from a pytest ``--durations=0`` report: the tests (functions, all their
parameters together) whose setup + call + teardown took at least ``--over`` seconds, so that
``make test-fast`` can leave them out (tests/conftest.py marks them ``slow``). ``make test`` runs
every test whatever this list says; a name no test has any more is only unused.

    .venv/bin/pytest -q -p no:cacheprovider tests/unit tests/integration --durations=0 > durations.txt
    .venv/bin/python scripts/slow_tests.py durations.txt [--over 2.0]
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections import defaultdict
from pathlib import Path

LINE = re.compile(r"^([\d.]+)s (?:setup|call|teardown)\s+(\S+)")
OUT = Path(__file__).resolve().parent.parent / "tests" / "slow_tests.txt"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report", type=Path, help="the text pytest printed with --durations=0")
    parser.add_argument("--over", type=float, default=2.0, help="seconds a test function takes at least to be listed")
    args = parser.parse_args()
    if not args.report.is_file():
        print(f"slow_tests: no such report: {args.report}", file=sys.stderr)
        return 2
    text = args.report.read_text(errors="replace")
    if "slowest durations" not in text:
        print(f"slow_tests: {args.report} has no 'slowest durations' section (run pytest with --durations=0)",
              file=sys.stderr)
        return 2
    seconds: dict[str, float] = defaultdict(float)
    for line in text.split("slowest durations", 1)[1].splitlines():
        if m := LINE.match(line):
            seconds[m.group(2).split("[", 1)[0]] += float(m.group(1))
    slow = sorted(name for name, s in seconds.items() if s >= args.over)
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    header = [
        "# Tests `make test-fast` leaves out (tests/conftest.py marks them slow); `make test` runs them all.",
        f"# Written by scripts/slow_tests.py --over {args.over:g} from a --durations=0 run of tests/unit and",
        f"# tests/integration (load average {load} when written): {len(slow)} of {len(seconds)} timed test functions,",
        f"# {sum(seconds[n] for n in slow):.0f} of {sum(seconds.values()):.0f} s.",
    ]
    OUT.write_text("\n".join(header + slow) + "\n")
    print(f"{OUT.relative_to(OUT.parent.parent)}: {len(slow)} slow test functions "
          f"({sum(seconds[n] for n in slow):.0f} of {sum(seconds.values()):.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
