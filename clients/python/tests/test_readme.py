"""README.md's Python blocks run, as written, on the test's Redis."""

from __future__ import annotations

import os
import re
import unittest
from pathlib import Path
from unittest import mock

import support

README = Path(__file__).resolve().parents[1] / "README.md"


class ReadmeTest(unittest.TestCase):
    def test_python_blocks_run(self) -> None:
        blocks = re.findall(r"(?ms)^```python\n(.*?)^```$", README.read_text())
        self.assertGreaterEqual(len(blocks), 1)
        for block in blocks:
            with self.subTest(block=block[:60]), mock.patch.dict(os.environ, {"REDIS_URL": support.redis_url()}):
                exec(compile(block, str(README), "exec"), {"__name__": "readme"})  # noqa: S102

    def test_blocks_are_python_or_sh(self) -> None:
        """Every other block is the sh block go test checks (clients/python/python_test.go)."""
        infos = re.findall(r"(?m)^```(\w*)$", README.read_text())
        self.assertEqual([i for i in infos if i], ["python", "sh"])


if __name__ == "__main__":
    unittest.main()
