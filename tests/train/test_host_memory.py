"""train.host_memory: large blocks come from malloc's heap and stay there after `free`,
unless the user set malloc's own settings. Each probe runs in a fresh process, since the
settings are process-wide."""

import os
import subprocess
import sys

import pytest

from tfyard.train import host_memory

pytestmark = pytest.mark.skipif(not host_memory.is_glibc(), reason="glibc's malloc only")

PROBE = """
import ctypes
from tfyard.train.host_memory import keep_freed_memory

class Info(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks",
                "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Info
libc.malloc.restype = ctypes.c_void_p
kept = keep_freed_memory()
mapped = libc.mallinfo2().hblks
block = libc.malloc(64 << 20)
ctypes.memset(block, 1, 64 << 20)
mapped = libc.mallinfo2().hblks - mapped
libc.free(ctypes.c_void_p(block))
print(kept, mapped, libc.mallinfo2().fordblks >= 64 << 20)
"""
BLOCK_MAPPED = "False 1 False"   # glibc's default: a 64 MiB block is its own mmap


def probe(**settings) -> str:
    env = {k: v for k, v in os.environ.items()
           if k not in host_memory.USER_SETTINGS and k != "GLIBC_TUNABLES"}
    result = subprocess.run([sys.executable, "-c", PROBE], env={**env, **settings},
                            capture_output=True, text=True, check=True)
    return result.stdout.strip()


def test_a_large_block_comes_from_the_heap_and_stays_there_when_freed():
    assert probe() == "True 0 True"


@pytest.mark.parametrize("settings", [{"MALLOC_TRIM_THRESHOLD_": "131072"},
                                      {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=131072"}])
def test_the_users_own_malloc_settings_win(settings):
    assert probe(**settings) == BLOCK_MAPPED


def test_nothing_changes_without_glibc(monkeypatch):
    monkeypatch.setattr(host_memory, "is_glibc", lambda: False)
    assert host_memory.keep_freed_memory({}) is False
