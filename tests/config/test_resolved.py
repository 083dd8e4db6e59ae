"""causalpos.config.resolved: the config resolution on small config dicts (no Snakemake run), each
loaded and completed with the schema's defaults as the Snakefile does (tests/config/configs.py).
"""

from __future__ import annotations

import subprocess
import sys

from tests.config.configs import REPO


def test_importing_the_resolver_stays_light():
    code = (
        "import sys, causalpos.config; "
        "heavy = {'torch', 'transformers', 'xarray', 'pandas', 'snakemake'} & set(sys.modules); "
        "assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)
