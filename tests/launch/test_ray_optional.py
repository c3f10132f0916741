"""Ray stays optional: never imported by `tfyard --help`, and one line when it is missing."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tfyard.errors import UserError
from tfyard.launch.ray import Placement


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)


def test_help_never_imports_ray():
    result = _python("import sys\nfrom tfyard.cli import main\n"
                     "for argv in (['--help'], ['launch', 'ray', '--help']):\n"
                     "    try:\n        main(argv)\n    except SystemExit:\n        pass\n"
                     "print('ray' in sys.modules)")
    assert result.returncode == 0, result.stderr
    assert result.stdout.rstrip().endswith("False")


def test_without_the_extra_launch_ray_says_how_to_install_it():
    result = _python("import sys\nsys.modules['ray'] = None  # as if not installed\n"
                     "from tfyard.cli import main\n"
                     "sys.exit(main(['launch', 'ray', '--workers', '2', '--', 'true']))")
    assert result.returncode == 2
    assert result.stderr == "tfyard: error: Ray support needs ray: pip install 'tfyard[ray]'\n"


@pytest.mark.parametrize("kwargs, fix", [
    ({"cpus": 0}, "--cpus_per_member must be above 0"),
    ({"gpus": -1}, "--gpus_per_member 0 or more"),
    ({"strategy": "STRICT_PACK"}, "not one of PACK, SPREAD"),
])
def test_impossible_placements_are_refused_with_the_fix(kwargs, fix):
    with pytest.raises(UserError, match=fix):
        Placement(**kwargs)
    assert Placement(cpus=0.5, gpus=1).bundle == {"CPU": 0.5, "GPU": 1}
