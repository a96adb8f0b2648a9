"""A module a stored error names (test_mapping.py): importing it leaves a mark, which reading a
result must never do."""

import os

os.environ["DTQ_TEST_NEVER_IMPORTED"] = "imported"


class Boom(Exception):
    pass
