"""Builders of small suite files for tests."""

import json


def write_suite_file(tmp_path, name, body: str, extra=""):
    (tmp_path / name).write_bytes(body.encode("utf-8"))
    m = tmp_path / "s.toml"
    m.write_text(f'name = "mine"\nfile = "{name}"\n{extra}')
    return str(m)


TINY_SYSTEM = "tiny-random/softmax/greedy,max_new_tokens=4"


def write_tiny_suite(tmp_path, n=6, prompt="Review {i}: the soup was", reference="cold and salty {i}", name="six"):
    rows = [{"id": f"p{i:02d}", "prompt": prompt.format(i=i), "reference": reference.format(i=i)} for i in range(n)]
    (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / f"{name}.toml").write_text(f'name = "{name}"\nfile = "{name}.jsonl"\n')
    return tmp_path / f"{name}.toml"


def write_lineup(tmp_path, systems, **extra):
    body = {
        "name": "t",
        "suite": str(write_tiny_suite(tmp_path)),
        "batch_size": 4,
        "metrics": ["distinct"],
        "systems": systems,
    }
    body |= extra
    path = tmp_path / "lineup.toml"
    path.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in body.items()))
    return path
