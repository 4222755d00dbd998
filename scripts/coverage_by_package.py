"""Print how much of each product package the last coverage run executed (`./scripts/test
--fast` runs it after the unit tier). Reads .coverage; the packages are coverage's `source`
(pyproject.toml), files no test imported counting as not covered."""

from __future__ import annotations

import io
import sys

import coverage

PACKAGES = ("daemon", "web", "worker", "cli")


def main() -> int:
    cov = coverage.Coverage()
    cov.load()
    shares = {name: cov.report(include=[f"{name}/*"], file=io.StringIO()) for name in PACKAGES}
    total = cov.report(include=[f"{name}/*" for name in PACKAGES], file=io.StringIO())
    cells = "  ".join(f"{name} {share:.0f} %" for name, share in shares.items())
    print(f"coverage of the product's lines: {cells}; all {total:.1f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
