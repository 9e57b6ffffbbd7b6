"""Pure tier: build.ninja is written with ninja's own ninja_syntax (shipped in the ninja wheel), and ninja reads
back the commands meant, whatever the toolchain's paths hold."""
from __future__ import annotations

import ast
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from kernelgen.build import buildplan
from kernelgen.build.buildplan import Unit, ninja_text
from kernelgen.build.toolchain import Toolchain

pytestmark = pytest.mark.pure

TC = Toolchain("/usr/local/cuda/bin/nvcc", "/usr/local/cuda", "release 13.0", "c++ 12", "0.1.15", ("/inc", "/inc"),
               "/lib")
UNITS = [Unit("a", "a-1/a.cu", ("sm_90a",), "a-1/a.so"), Unit("b", "b-2/b.cu", ("sm_90a", "sm_100f"), "b-2/b.so")]

RULES = """ninja_required_version = 1.3
nvcc = /usr/local/cuda/bin/nvcc
cuda_flags = -std=c++17 -O3 -compress-mode=none -Xcompiler -fPIC -Xcompiler -fvisibility=hidden -I/tpl -I/inc
ldflags = -shared -L/lib -ltvm_ffi {cudart}

rule compile
  command = $nvcc $cuda_flags $gencode -c $in -o $out
  description = nvcc $out

rule link
  command = $nvcc -shared $in -o $out $ldflags
  description = link $out

"""
BUILD = """build a-1/a.o: compile a-1/a.cu
  gencode = -gencode=arch=compute_90a,code=sm_90a
build a-1/a.so: link a-1/a.o
build b-2/b.o: compile b-2/b.cu
  gencode = -gencode=arch=compute_90a,code=sm_90a -gencode=arch=compute_100f,code=sm_100f
build b-2/b.so: link b-2/b.o
"""


def test_the_text_is_what_it_was() -> None:
    """The same build.ninja as the hand-written escaper gave, for every path a real toolchain has."""
    assert ninja_text(UNITS, TC, "/tpl", link=True) == RULES.format(cudart="-L/usr/local/cuda/lib64 -lcudart") + BUILD
    compile_only = "".join(line + "\n" for line in BUILD.splitlines() if ": link " not in line)
    assert ninja_text(UNITS, TC, "/tpl", link=False, portable=True) == RULES.format(cudart="-cudart static") + compile_only


def test_a_device_only_check_compiles_a_fatbin_and_builds_no_host_object() -> None:
    """compile_only's units (.fatbin outputs) take the device rule: nvcc --fatbin for every target of the unit, no
    -c object and no link; a build's text has no such rule."""
    units = [Unit("a", "a.cu", ("sm_90a", "sm_120a"), "a.fatbin")]
    text = ninja_text(units, TC, "/tpl", link=False)
    assert "rule device\n  command = $nvcc $cuda_flags $gencode --fatbin $in -o $out\n" in text
    assert "build a.fatbin: device a.cu\n" in text and ": compile " not in text and ": link " not in text
    assert "rule device" not in ninja_text(UNITS, TC, "/tpl", link=True)


def test_no_hand_written_escaper() -> None:
    tree = ast.parse(Path(buildplan.__file__).read_text())
    assert not [n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and "escape" in n.name]
    assert any(isinstance(n, ast.ImportFrom) and n.module == "ninja.ninja_syntax" for n in ast.walk(tree))


@pytest.mark.skipif(shutil.which("ninja") is None, reason="needs ninja on PATH (pip install ninja)")
def test_ninja_reads_back_the_commands_meant_for_awkward_paths(tmp_path: Path) -> None:
    """A CUDA_HOME or site-packages path with a space, a '$' or a ':' reaches nvcc as one argument."""
    odd = Toolchain("/opt/cuda 13:x/bin/nvcc", "/opt/cuda 13:x", "r", "c", "0", ("/site $pkgs/tvm_ffi/include",),
                    "/site $pkgs/tvm_ffi/lib")
    (tmp_path / "build.ninja").write_text(ninja_text([UNITS[0]], odd, "/my templates", link=True))
    listed = subprocess.run(["ninja", "-C", str(tmp_path), "-t", "commands"], capture_output=True, text=True, check=True)
    compile_line, link_line = (shlex.split(c) for c in listed.stdout.splitlines())
    assert compile_line[0] == link_line[0] == "/opt/cuda 13:x/bin/nvcc"
    assert "-I/my templates" in compile_line and "-I/site $pkgs/tvm_ffi/include" in compile_line
    assert compile_line[-4:] == ["-c", "a-1/a.cu", "-o", "a-1/a.o"]
    assert "-L/site $pkgs/tvm_ffi/lib" in link_line and "-L/opt/cuda 13:x/lib64" in link_line
