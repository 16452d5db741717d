"""Write the check-up document's JSON Schema, generated from its types (gpucheckup/document.py), to the two
places it is shipped: the package (`gpucheckup schema` prints it) and docs/. Run after changing a type:

    python scripts/write_schema.py          # tests/test_document.py fails while either copy differs
"""

import json
from pathlib import Path

from gpucheckup.document import json_schema

ROOT = Path(__file__).resolve().parents[1]
TARGETS = (ROOT / "src" / "gpucheckup" / "data" / "schema.json", ROOT / "docs" / "schema.json")


def main() -> None:
    """Write both copies."""
    text = json.dumps(json_schema(), indent=2) + "\n"
    for t in TARGETS:
        t.write_text(text)
        print(f"wrote {t.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
