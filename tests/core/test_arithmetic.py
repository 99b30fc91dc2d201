"""The CPU arithmetic pin (core/arithmetic.py): every library on its AVX2 kernels where the CPU has
them, set before anything computes, the user's own settings kept, and recorded in run manifests."""

import json
import os
import subprocess
import sys

from maxbench.arithmetic import AVX2_SETTINGS, OPT_OUT, cpu_flags, cpu_model, pin_cpu_arithmetic
from tests.support.paths import ROOT

CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 9R14
flags\t\t: fpu sse2 avx avx2 fma avx512f avx512bw
"""


def test_cpuinfo_is_parsed():
    assert {"avx2", "fma", "avx512f"} <= cpu_flags(CPUINFO)
    assert cpu_model(CPUINFO) == "AMD EPYC 9R14"
    assert cpu_flags("processor : 0\n") == set()


def test_every_library_is_pinned_on_an_avx2_cpu_and_the_users_own_setting_is_kept():
    env = {"ATEN_CPU_CAPABILITY": "default"}
    chosen = pin_cpu_arithmetic(env, flags={"avx2", "fma"}, machine="x86_64")
    assert "ATEN_CPU_CAPABILITY" not in chosen and env["ATEN_CPU_CAPABILITY"] == "default"
    assert env == {"ATEN_CPU_CAPABILITY": "default"} | {
        k: v for k, v in AVX2_SETTINGS.items() if k != "ATEN_CPU_CAPABILITY"
    }


def test_nothing_is_pinned_without_avx2_off_x86_or_when_the_user_opts_out():
    for env, flags, machine in (
        ({}, {"avx", "sse2"}, "x86_64"),
        ({}, {"avx2"}, "x86_64"),  # AVX2 without FMA: not what the AVX2 kernels assume
        ({}, {"avx2", "fma"}, "aarch64"),
        ({OPT_OUT: "1"}, {"avx2", "fma"}, "x86_64"),
    ):
        before = dict(env)
        assert pin_cpu_arithmetic(env, flags=flags, machine=machine) == {}
        assert env == before


def _probe(extra_env: dict, code: str) -> str:
    env = {k: v for k, v in os.environ.items() if k not in AVX2_SETTINGS and k != OPT_OUT} | extra_env
    cmd = [sys.executable, "-W", "default::ImportWarning", "-c", code]  # NumPy's warnings about its variable
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "cannot disable" not in out.stderr  # the pin names only features this NumPy dispatches
    return out.stdout.strip()


def test_a_maxbench_process_computes_with_the_avx2_kernels():
    # the first thing a maxbench command imports is the benchmark package; torch's kernels are
    # chosen at its first vectorised operation, NumPy's when it is imported
    code = (
        "import maxbench.cli, numpy, torch; torch.ones(4).exp();"
        "import json; print(json.dumps([torch.backends.cpu.get_cpu_capability(),"
        " numpy.core._multiarray_umath.__cpu_features__.get('AVX512F', False)]))"
    )
    capability, numpy_avx512 = json.loads(_probe({}, code))
    native = _probe({}, "import torch; torch.ones(4).exp(); print(torch.backends.cpu.get_cpu_capability())")
    if {"avx2", "fma"} <= cpu_flags() and os.uname().machine == "x86_64":
        assert capability == "AVX2" and numpy_avx512 is False
    else:
        assert capability == native
    opted_out = json.loads(_probe({OPT_OUT: "1"}, code))[0]
    assert opted_out == native


def test_the_run_manifest_records_the_arithmetic():
    from maxbench.benchmark.run.runner import machine

    rec = machine("cpu")["arithmetic"]
    assert rec["cpu"] and rec["torch_cpu_capability"]
    if {"avx2", "fma"} <= cpu_flags() and os.uname().machine == "x86_64" and not os.environ.get(OPT_OUT):
        assert rec["pinned"]["ATEN_CPU_CAPABILITY"] == os.environ["ATEN_CPU_CAPABILITY"]
