"""``/sandbox-fusion``: SandboxFusion's ``run_code`` against a real broker, through the
published ``sandbox-fusion`` client (requests, HTTP Basic from the URL) and plain httpx."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import requests
from sandbox_fusion import RunCodeRequest, RunStatus, run_code
from sandbox_fusion.models import CommandRunStatus

import stoker
from api_rig import embedded_broker, tenant_token
from stoker.agent.coderun import CAPTURE_BYTES
from stoker.broker.bench_code import problems, program
from stoker.broker.config import BrokerProfile
from stoker.broker.embedded import EmbeddedBroker


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    data = tmp_path_factory.mktemp("sf") / "data"
    with embedded_broker(
        data, [BrokerProfile.simple("plain"), BrokerProfile.simple("verify", gpus=0)], gpu_slots=1
    ) as eb:
        yield eb


@pytest.fixture(scope="module")
def token(broker: EmbeddedBroker) -> str:
    return tenant_token(broker, "rl")


@pytest.fixture(scope="module")
def endpoint(broker: EmbeddedBroker, token: str) -> str:
    """The base URL a verl user configures: credentials in it, HTTP Basic on the wire."""
    host = broker.url.removeprefix("http://")
    return f"http://rl:{token}@{host}/sandbox-fusion"


def _run(endpoint: str, **kw: Any) -> Any:
    return run_code(RunCodeRequest(language="python", **kw), endpoint=endpoint, max_attempts=1)


def test_success_with_stdin_and_files(endpoint: str) -> None:
    code = "import sys\nprint(open('in.txt').read() + sys.stdin.read())\nopen('o','w').write('x')"
    res = _run(
        endpoint,
        code=code,
        stdin="world",
        files={"in.txt": base64.b64encode(b"hello ").decode()},
        fetch_files=["o", "absent.txt"],
    )
    assert res.status == RunStatus.Success and res.message == ""
    assert res.compile_result is None
    run = res.run_result
    assert run.status == CommandRunStatus.Finished and run.return_code == 0
    assert run.stdout == "hello world\n" and run.stderr == ""
    assert run.execution_time is not None and run.execution_time > 0
    assert res.files == {"o": base64.b64encode(b"x").decode()}
    assert res.executor_pod_name


def test_syntax_error_is_a_failed_run(endpoint: str) -> None:
    # python compiles nothing apart: SandboxFusion gives a SyntaxError as the run's exit 1
    res = _run(endpoint, code="def f(:\n")
    assert res.status == RunStatus.Failed and res.compile_result is None
    assert res.run_result.status == CommandRunStatus.Finished
    assert res.run_result.return_code == 1 and "SyntaxError" in res.run_result.stderr


def test_runtime_error(endpoint: str) -> None:
    res = _run(endpoint, code="print('before')\nraise ValueError('boom')")
    assert res.status == RunStatus.Failed
    assert res.run_result.return_code == 1 and res.run_result.stdout == "before\n"
    assert "ValueError: boom" in res.run_result.stderr


def test_timeout(endpoint: str) -> None:
    res = _run(endpoint, code="print('started', flush=True)\nwhile True: pass", run_timeout=1)
    assert res.status == RunStatus.Failed and res.message == ""
    run = res.run_result
    assert run.status == CommandRunStatus.TimeLimitExceeded and run.return_code is None
    assert run.stdout == "started\n"


def test_output_over_the_cap_is_cut_as_sandbox_fusion_does(endpoint: str) -> None:
    # SandboxFusion keeps the first MiB of each stream and reads the rest away
    code = "import sys\nsys.stdout.write('a' * (3 << 20))\nsys.stderr.write('e')"
    res = _run(endpoint, code=code)
    assert res.status == RunStatus.Success
    assert res.run_result.stdout == "a" * CAPTURE_BYTES and res.run_result.stderr == "e"


def test_bash_exit_code_and_memory_limit(broker: EmbeddedBroker, token: str, endpoint: str) -> None:
    sh = run_code(
        RunCodeRequest(language="bash", code="read x; echo got $x; exit 3", stdin="v\n"),
        endpoint=endpoint,
        max_attempts=1,
    )
    assert sh.status == RunStatus.Failed
    assert (sh.run_result.return_code, sh.run_result.stdout) == (3, "got v\n")
    # the published client has no memory_limit_MB (SandboxFusion's server has)
    body = {"code": "b = bytearray(400 << 20)", "language": "python", "memory_limit_MB": 200}
    url = f"{broker.url}/sandbox-fusion/run_code"
    big = httpx.post(url, json=body, auth=("rl", token), timeout=60).json()
    assert big["status"] == "Failed" and "MemoryError" in big["run_result"]["stderr"]


def test_reuse_tag_keeps_the_pod_and_its_files(broker: EmbeddedBroker, token: str) -> None:
    url = f"{broker.url}/sandbox-fusion/run_code"
    head = {"Authorization": f"Bearer {token}", "X-Stoker-Reuse-Tag": "worker-1"}

    def call(code: str, headers: dict[str, str]) -> dict[str, Any]:
        return dict(
            http.post(url, headers=headers, json={"code": code, "language": "python"}).json()
        )

    with httpx.Client(timeout=60) as http:
        first = call("open('k','w').write('1')", head)
        again = call("print(open('k').read())", head)
        other = call("import os; print(os.path.exists('k'))", {"Authorization": f"Bearer {token}"})
    assert first["status"] == again["status"] == "Success"
    assert again["run_result"]["stdout"] == "1\n"
    assert again["executor_pod_name"] == first["executor_pod_name"]
    assert other["run_result"]["stdout"] == "False\n"  # no tag: a pod of its own
    with stoker.Client(broker.url, token) as c:  # each call a job, labelled as one of these
        tags = {j["reuse_tag"] for j in c.jobs(labels={"api": "sandbox-fusion"}, limit=1000)}
    assert "worker-1" in tags


def test_unknown_and_unsupported_language(broker: EmbeddedBroker, token: str) -> None:
    url = f"{broker.url}/sandbox-fusion/run_code"
    with httpx.Client(timeout=60, auth=("rl", token)) as http:
        cpp = http.post(url, json={"code": "int main(){}", "language": "cpp"})
        cobol = http.post(url, json={"code": "x", "language": "cobol"})
    assert cpp.status_code == cobol.status_code == 200
    assert cpp.json()["status"] == "SandboxError" and "'cpp' is not run" in cpp.json()["message"]
    assert "'cobol' is unknown" in cobol.json()["message"]
    assert cpp.json()["run_result"] is None


def test_auth(broker: EmbeddedBroker, token: str) -> None:
    base = f"{broker.url}/sandbox-fusion"
    body = {"code": "print(1)", "language": "python"}
    with httpx.Client(timeout=60) as http:
        assert http.get(f"{base}/v1/ping").json() == "pong"
        assert http.post(f"{base}/run_code", json=body).status_code == 401
        bad = http.post(f"{base}/run_code", json=body, auth=("rl", "stk_wrong"))
        assert bad.status_code == 401 and bad.json()["field"] == "authorization"
        # the user must be the token's own tenant
        assert http.post(f"{base}/run_code", json=body, auth=("other", token)).status_code == 401
        # Basic works on these routes only
        assert http.get(f"{broker.url}/v1/profiles", auth=("rl", token)).status_code == 401
        ok = http.post(f"{base}/run_code", json=body, auth=("rl", token))
        assert ok.status_code == 200 and ok.json()["run_result"]["stdout"] == "1\n"


# --- HumanEval: problems no one here wrote, through both paths -------------------------

SUBSET = 8  # of the 164; benchmarks/code_reward.py runs them all


def test_humaneval_through_sandbox_fusion(endpoint: str) -> None:
    for problem in problems()[:SUBSET]:
        ok = _run(endpoint, code=program(problem), reuse_tag="he")
        assert ok.status == RunStatus.Success, (problem["task_id"], ok.run_result)
        bad = _run(endpoint, code=program(problem, "broken"), reuse_tag="he")
        assert bad.status == RunStatus.Failed and bad.run_result.return_code == 1
        assert bad.run_result.status == CommandRunStatus.Finished
    loop = _run(endpoint, code=program(problems()[0], "loop"), run_timeout=1, reuse_tag="he")
    assert loop.status == RunStatus.Failed
    assert loop.run_result.status == CommandRunStatus.TimeLimitExceeded


def test_humaneval_through_async_client(broker: EmbeddedBroker, token: str) -> None:
    async def verify(c: stoker.AsyncClient, problem: dict[str, Any], completion: str,
                     timeout_s: float = 30) -> Any:  # fmt: skip
        argv = ["python", "-c", program(problem, completion)]
        job = await c.run("verify", argv, reuse_tag="he-sdk", timeout_s=timeout_s)
        return await job.result(60)

    async def main() -> None:
        async with stoker.AsyncClient(broker.url, token) as c:
            for problem in problems()[:SUBSET]:
                ok = await verify(c, problem, "canonical")
                assert ok.ok, (problem["task_id"], ok.stderr)
                bad = await verify(c, problem, "broken")
                assert (bad.exit_code, bad.failure) == (1, "user_error")
                assert b"Error" in bad.stderr  # the tests' assertion (or a TypeError on None)
            loop = await verify(c, problems()[0], "loop", timeout_s=1)
            assert loop.failure == "timeout"

    asyncio.run(main())


def test_a_bad_reuse_tag_is_a_422_naming_it(broker: EmbeddedBroker, token: str) -> None:
    body = {"code": "pass", "language": "python", "reuse_tag": "a\x00b"}
    url = f"{broker.url}/sandbox-fusion/run_code"
    reply = httpx.post(url, json=body, auth=("rl", token), timeout=60)
    assert reply.status_code == 422 and reply.json()["field"] == "body.reuse_tag"


def test_the_request_verl_sends(endpoint: str) -> None:
    # verl's call_sandbox_api (verl is not installed here): the full /run_code URL from its
    # config, its own headers, a JSON string body, no auth argument (requests takes the
    # credentials from the URL)
    payload = {"compile_timeout": 10, "run_timeout": 10, "code": "print(input()[::-1])",
               "stdin": "abc", "language": "python", "files": {}, "fetch_files": []}  # fmt: skip
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    reply = requests.post(f"{endpoint}/run_code", headers=headers, data=json.dumps(payload))
    assert reply.status_code == 200
    got = reply.json()
    assert got["status"] == "Success" and got["run_result"]["stdout"] == "cba\n"
