"""The test suite's kernel zygote (tests/kernel_zygote.py, tests/kernel_proxy.py): a kernel it forks
is a fresh one, answers an interrupt, and dies with the process jupyter_client manages.

conftest.py rewrites jupyter_client's command for a plain ipykernel in this process, so the
KernelManager below gets a forked kernel as nbval and nbclient do.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time

import pytest
from conftest import KERNELS

pytestmark = pytest.mark.skipif(os.environ.get("POSENC_TEST_FORK_KERNELS") == "0",
                                reason="POSENC_TEST_FORK_KERNELS=0: kernels start cold")


@contextlib.contextmanager
def _kernel():
    """A kernel as nbval starts one (here: forked), shut down at the end; (manager, client)."""
    from jupyter_client.manager import KernelManager
    from nbval.kernel import CURRENT_ENV_KERNEL_NAME, NbvalKernelspecManager

    km = KernelManager(kernel_name=CURRENT_ENV_KERNEL_NAME, kernel_spec_manager=NbvalKernelspecManager())
    km.start_kernel(env={**os.environ, "POSENC_ZYGOTE_TEST": "seen"})
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=60)
        yield km, kc
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def _run(kc, code: str, expression: str, timeout: float = 30) -> tuple[str, dict]:
    """Run ``code``, then evaluate ``expression`` in the kernel: its repr, and the reply's content.
    (Read from the reply, not from printed output: a stream message may come after the kernel
    says it is idle.)"""
    reply = kc.execute(code, user_expressions={"value": expression}, reply=True, timeout=timeout)
    content = reply["content"]
    value = content.get("user_expressions", {}).get("value", {})
    return value.get("data", {}).get("text/plain", repr(value)), content


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def test_a_forked_kernel_is_fresh_and_has_the_environment_it_was_started_with():
    with _kernel() as (first, kc):
        assert first.provisioner.process.args[:4] == [sys.executable, "-I", "-S", str(KERNELS.PROXY)]
        value, _ = _run(kc, "import os, sys\nleft_here = 1",
                        "(os.getppid() != os.getpid(), 'torch' in sys.modules, "
                        "os.environ.get('POSENC_ZYGOTE_TEST'))")
        assert value == "(True, True, 'seen')"  # torch came with the fork
    with _kernel() as (_second, kc):
        value, _ = _run(kc, "", "'left_here' in globals()")
        assert value == "False"  # nothing of the first kernel's


def test_an_interrupt_reaches_the_forked_kernel():
    with _kernel() as (km, kc):
        msg_id = kc.execute("import time\nfor _ in range(600):\n    time.sleep(0.1)")
        while True:  # interrupt once the cell runs (a kernel at rest ignores SIGINT)
            msg = kc.get_iopub_msg(timeout=30)
            if msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "execute_input":
                break
        time.sleep(0.5)
        km.interrupt_kernel()  # SIGINT to the proxy's process group, forwarded to the kernel's
        reply = kc.get_shell_msg(timeout=30)
        assert reply["parent_header"]["msg_id"] == msg_id
        assert reply["content"]["status"] == "error" and reply["content"]["ename"] == "KeyboardInterrupt"
        value, content = _run(kc, "answer = 6 * 7", "answer")  # and it still runs cells
        assert content["status"] == "ok" and value == "42", content


def test_killing_the_proxy_kills_its_kernel():
    with _kernel() as (km, kc):
        value, _ = _run(kc, "import os", "os.getpid()")
        kernel = int(value)
        assert _alive(kernel)
        os.killpg(km.provisioner.pgid, signal.SIGKILL)  # as a restart or a shutdown(now=True) does
        deadline = time.monotonic() + 20
        while _alive(kernel) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(kernel), "the kernel outlived its proxy"
