"""Print the golden build keys of every shipped variant (tests/test_build_keys.py), for a commit that
changes the generated code on purpose: python tools/golden_keys.py > /tmp/keys.json"""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from test_build_keys import current_keys

print(json.dumps(current_keys(), indent=1))
