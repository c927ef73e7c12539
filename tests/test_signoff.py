"""The sign-off (properties/engine/signoff.py): every audit read as the deployment checklist, each
item yes, no with its witness, or not tested and why; never absent."""

from __future__ import annotations

from specproof.properties.endpoint.engine import Endpoint, endpoint_spec
from specproof.properties.endpoint.options import EndpointOptions
from specproof.properties.endpoint.standin import StandIn
from specproof.properties.engine.audit import audit_engine
from specproof.properties.engine.config import EngineAuditConfig
from specproof.properties.engine.contract import T1
from specproof.properties.engine.report import write_report
from specproof.properties.engine.signoff import NO, NOT_TESTED, YES, markdown, signoff

#: alpha 1e-3, seed 1, 200 samples a case (tests/test_load.py's plan, where batch_rows is rejected)
CONFIG = EngineAuditConfig(alpha=1e-3, samples=200, seed=1, report_samples=16)


def _audit(bug: str | None, loads: tuple[int, ...]):
    with StandIn(bug, loop="laws") as si, StandIn(speculative=False, loop="laws") as twin:
        ep = Endpoint(EndpointOptions((si.url,), twin=twin.url, concurrency=4, loads=loads))
        try:
            return audit_engine(endpoint_spec(ep, prompts=[(0, 6)], samplings=[T1], tokens=4), CONFIG)
        finally:
            ep.close()


def _answers(res) -> dict[str, str]:
    return {item.question: item.answer for item in signoff(res)}


def test_a_correct_server_under_load_signs_off_every_item_it_tested(tmp_path):
    res = _audit(None, (1, 8))
    items = signoff(res)
    assert len(items) == 14 and all(i.answer in (YES, NO, NOT_TESTED) and i.detail for i in items)
    a = _answers(res)
    for q in (
        "speculation ran",
        "the law holds under the deployed parameters",
        "the same law alone and at production concurrency",
        "seeds are honoured with other requests in flight",
        "a streamed answer equals the whole answer",
        "reported probabilities are the law's",
        "the tolerance comes from a speculation-off control",
        "the engine keeps the contract (a seed's tokens, ids, lengths)",
    ):
        assert a[q] == YES, (q, markdown(res))
    # what this audit did not run says so, with what would run it
    not_tested = {i.question: i.detail for i in items if i.answer == NOT_TESTED}
    assert "a prefix-cache hit behaves as a cold request" in not_tested
    assert "--param eos" in not_tested["stops inside an accepted block end the answer where the law says"]
    assert "grammar" in not_tested["constrained decoding keeps its law"]
    assert (
        "--completions" in not_tested["several completions of a request are independent samples of the law"]
    )
    assert [j["answer"] for j in res.to_json()["signoff"]] == [i.answer for i in items]
    out = tmp_path / "report.md"
    write_report(str(out), [res])
    text = out.read_text()
    assert "## Sign-off" in text and "a streamed answer equals the whole answer" in text


def test_a_batch_coupled_bug_is_a_no_on_the_concurrency_item_with_its_factor():
    res = _audit("batch_rows", (1, 8))
    a = {i.question: i for i in signoff(res)}
    assert a["the law holds under the deployed parameters"].answer == NO
    item = a["the same law alone and at production concurrency"]
    assert item.answer == NO and "lossy only with 8 in flight" in item.detail, markdown(res)


def test_without_a_load_axis_the_concurrency_items_say_how_to_run_them():
    res = _audit(None, ())
    a = {i.question: i for i in signoff(res)}
    for q in (
        "the same law alone and at production concurrency",
        "seeds are honoured with other requests in flight",
    ):
        assert a[q].answer == NOT_TESTED and "--load" in a[q].detail


def test_a_deployment_is_signed_off_once_over_its_audits(tmp_path, capsys):
    """specproof signoff: a load audit, a prefix-cache audit and a traffic audit of one server
    merged into one checklist; each question from the audit that gathered its evidence; audits of
    another server refused."""
    import json

    from specproof.properties.cli import main
    from specproof.properties.endpoint.families.llamacpp import LlamaCpp

    config = EngineAuditConfig(alpha=1e-3, samples=100, seed=1, report_samples=8)
    paths = {}
    with StandIn(loop="laws") as si, StandIn(speculative=False, loop="laws") as twin:
        for name, extra in (("load", {"loads": (1, 8)}), ("cache", {"prefix_cache": True})):
            ep = Endpoint(EndpointOptions((si.url,), twin=twin.url, concurrency=4, **extra))
            try:
                r = audit_engine(endpoint_spec(ep, prompts=[(0, 6)], samplings=[T1], tokens=4), config)
            finally:
                ep.close()
            paths[name] = tmp_path / f"{name}.json"
            paths[name].write_text(json.dumps(r.to_json()))
        rows = []
        for k in range(400):
            path, body = LlamaCpp().generation((0, 6), 12, k, T1, report=False)
            _, answer = si.respond("POST", path, json.dumps(body).encode())
            rows.append({"prompt": [0, 6], "tokens": answer["tokens"], "sampling": {"temperature": 1.0}})
        (tmp_path / "traffic.jsonl").write_text("\n".join(json.dumps(x) for x in rows) + "\n")
        args = ["audit", "traffic", str(tmp_path / "traffic.jsonl"), "--twin", twin.url, "--tv", "0.2"]
        assert main([*args, "--progress", "off", "--json", str(tmp_path / "traffic.json")]) == 0
    out = tmp_path / "signoff.json"
    files = [str(paths["load"]), str(paths["cache"]), str(tmp_path / "traffic.json")]
    page = tmp_path / "signoff.html"
    assert main(["signoff", *files, "--output-json", str(out), "--report", str(page)]) == 0
    doc = json.loads(out.read_text())
    text = page.read_text()  # the merged sign-off as a page, each audit and question in it
    assert text.startswith("<!doctype html>") and "Verdict: pass" in text
    assert all(f in text for f in files) and text.count("<tr>") == 1 + len(files) + 1 + len(doc["signoff"])
    assert doc["verdict"] == "pass" and set(doc["audits"]) == set(files)
    a = {i["question"]: i for i in doc["signoff"]}
    assert a["the same law alone and at production concurrency"]["answer"] == YES
    assert a["the same law alone and at production concurrency"]["detail"].startswith(str(paths["load"]))
    assert a["a prefix-cache hit behaves as a cold request"]["answer"] == YES
    assert a["the law holds under the deployed parameters"]["answer"] == YES
    assert "and 2 more audit(s)" in a["the law holds under the deployed parameters"]["detail"]
    assert a["several completions of a request are independent samples of the law"]["answer"] == NOT_TESTED
    # an audit of another server is refused
    other = json.loads(paths["load"].read_text())
    other["engine"] = "endpoint http://elsewhere:8080"
    (tmp_path / "other.json").write_text(json.dumps(other))
    assert main(["signoff", str(paths["cache"]), str(tmp_path / "other.json")]) == 4
    assert "different servers" in capsys.readouterr().err
    # the audits record the build the server said (GET /props); another build of it is refused
    load = json.loads(paths["load"].read_text())
    assert load["description"]["server"]["build"] == "specproof-standin"
    load["description"]["server"]["build"] = "specproof-standin+fixed_seed"
    (tmp_path / "rebuilt.json").write_text(json.dumps(load))
    assert main(["signoff", str(paths["cache"]), str(tmp_path / "rebuilt.json")]) == 4
    err = capsys.readouterr().err
    assert "different builds" in err and "specproof-standin+fixed_seed" in err


def test_the_build_is_read_from_the_server_in_each_familys_place():
    """llama-server's GET /props build_info and vLLM's GET /version, as the stand-in answers them
    in each shape; a planted bug is a build of its own."""
    for family in ("llamacpp", "vllm"):
        for bug in (None, "zero_logprobs"):
            with StandIn(bug, loop="laws") as si:
                ep = Endpoint(EndpointOptions((si.url,), profile=family, vocab=si.model.vocab)).open()
                try:
                    assert ep.server["build"] == "specproof-standin" + (f"+{bug}" if bug else "")
                finally:
                    ep.close()
