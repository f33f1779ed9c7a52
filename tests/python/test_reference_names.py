"""Every name of the reference API (NaNsense 0.4.0's API reference, our
users' specification) exists in `import nansense`, with the same parameter
names, kinds and defaults.

The names come mechanically from the reference: reference_api.json lists
every function, class, method (with its signature), property and enum
member its API reference names, and every Session attribute its text
mentions (session.X, Session.X, and the run-control and settings methods
lock() lists). The file is derived, not written by hand: when the
reference's text is at hand (NANSENSE_REFERENCE_SPEC, or the project's
shared spec folder) test_the_manifest_is_the_reference_parsed re-parses it
and must find the same, and

    python tests/python/test_reference_names.py --write

rewrites it. Ours may add parameters (with defaults, after the
reference's) and names; it never lacks one of the reference's."""

from __future__ import annotations

import enum
import importlib
import inspect
import json
import os
import re
import sys
from pathlib import Path

import pytest

MANIFEST = Path(__file__).with_name("reference_api.json")
SPEC_CANDIDATES = [os.environ.get("NANSENSE_REFERENCE_SPEC", ""), "/work/shared/spec/api-reference.md"]


# ---- parsing the reference's text


def _split_params(text: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def _parse_signature(text: str) -> list[list]:
    """`name(a: T, *, b: U = 1) -> R` -> [[name, kind, default-or-None], ...]."""
    inner = text[text.index("(") + 1:text.rindex(")")]
    params, kind = [], "POSITIONAL_OR_KEYWORD"
    for p in _split_params(inner):
        if p == "*":
            kind = "KEYWORD_ONLY"
            continue
        if p.startswith("**"):
            params.append([p[2:].split(":")[0].strip(), "VAR_KEYWORD", None])
            continue
        name = p.split(":")[0].split("=")[0].strip()
        default = p.split("=", 1)[1].strip() if "=" in p else None
        params.append([name, kind, default])
    return params


def parse_reference(text: str) -> dict:
    lines = text.splitlines()
    functions: dict[str, list] = {}
    classes: dict[str, dict] = {}
    section = None  # "start" / "Session" / "lightning.NansenseCallback"
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        heading = re.fullmatch(r"nansense\.([A-Za-z_.]+)( dataclass)?", line)
        if heading:
            section = heading.group(1)
            if section[section.rfind(".") + 1].isupper():
                classes.setdefault(section, {"methods": {}, "properties": [], "members": []})
            i += 1
            continue
        prop = re.fullmatch(r"([a-z_]+) property", line)
        if prop and section in classes:
            classes[section]["properties"].append(prop.group(1))
            i += 1
            continue
        member = re.match(r"• ([A-Z_]+)\b", line)
        if member and section in classes:
            classes[section]["members"].append(member.group(1))
        # A signature: `name(` opening a line, ended by the line holding `)`
        # at depth 0 (possibly the same line).
        sig = re.match(r"([A-Za-z_][A-Za-z_0-9]*)\(", lines[i])
        if sig and section is not None and not lines[i].startswith((" ", "def ", "for ")):
            name = sig.group(1)
            block, depth, j = "", 0, i
            while True:
                block += lines[j].strip() + " "
                depth += lines[j].count("(") - lines[j].count(")")
                if depth <= 0:
                    break
                j += 1
            short = section[section.rfind(".") + 1:]
            if section in classes and name != short:
                classes[section]["methods"][name] = _parse_signature(block)
            elif section not in classes and name == short:
                functions[section] = _parse_signature(block)
            i = j + 1
            continue
        i += 1
    # Mode's members are named in its prose (STEP, UNTIL_PHASE_CHANGE, ...).
    mode_text = text[text.index("\nnansense.Mode\n"):text.index("\nnansense.Schedule\n")]
    classes["Mode"]["members"] = sorted(set(re.findall(r"\b(STEP|UNTIL_[A-Z_]+|DETACH)\b", mode_text)))
    # Session attributes the text uses: session.X / Session.X, and the
    # methods lock() lists as locked.
    mentions = set(re.findall(r"\b[Ss]ession\.([a-z_]+)\b", text))
    lock = text[text.index("• the run-control methods"):]
    lock = lock[:lock.index("\n")]
    mentions |= {n for n in re.findall(r"\b([a-z_]{3,})\b", lock)
                 if "_" in n or n in ("stop", "detach", "watch", "unwatch")}
    mentions |= {n for n in re.findall(r"\b(watch_[a-z_]+)\b", text)}
    mentions.discard("step_")  # "every step_*"
    # Calls the Session section's prose names (batch(), step_run(), ...),
    # less Python's and torch's own and the module functions.
    session_text = text[text.index("\nnansense.Session\n"):text.index("\nnansense.lightning.")]
    mentions |= set(re.findall(r"\b([a-z_]+)\(\)", session_text)) - {
        "float", "item", "mean", "no_grad", "sqrt", "std", "serve", "start"}
    return {"functions": functions, "classes": classes, "session_mentions": sorted(mentions)}


def _spec_text():
    for path in SPEC_CANDIDATES:
        if path and os.path.exists(path):
            return Path(path).read_text()
    return None


def manifest() -> dict:
    return json.loads(MANIFEST.read_text())


# ---- resolving it against `import nansense`


def _resolve(dotted: str):
    import nansense
    if dotted.startswith("lightning."):
        pytest.importorskip("lightning")
        module = importlib.import_module("nansense.lightning")
        dotted = dotted[len("lightning."):]
    else:
        module = nansense
    obj = module
    for part in dotted.split("."):
        assert hasattr(obj, part), f"nansense.{dotted}: {obj!r} has no {part!r}"
        obj = getattr(obj, part)
    return obj


def _default_value(text: str):
    import nansense
    return eval(text, {"DEFAULT_CACHE_DIR": nansense.DEFAULT_CACHE_DIR})  # noqa: S307 (the manifest's literals)


def _same_default(ours, theirs_text: str) -> bool:
    theirs = _default_value(theirs_text)
    if isinstance(ours, os.PathLike) or isinstance(theirs, os.PathLike):
        return os.fspath(ours) == os.fspath(theirs)
    return type(ours) is type(theirs) and ours == theirs


def check_signature(where: str, func, params: list) -> list[str]:
    problems = []
    sig = inspect.signature(func)
    ours = [p for p in sig.parameters.values() if p.name != "self"]
    by_name = {p.name: p for p in ours}
    for name, kind, default in params:
        p = by_name.get(name)
        if p is None:
            if kind == "VAR_KEYWORD" and any(q.kind is q.VAR_KEYWORD for q in ours):
                continue
            problems.append(f"{where}: no parameter {name!r} (ours: {sig})")
            continue
        if kind == "KEYWORD_ONLY" and p.kind not in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD):
            problems.append(f"{where}({name}): keyword-only in the reference, {p.kind.name} here")
        if kind == "POSITIONAL_OR_KEYWORD" and p.kind is not p.POSITIONAL_OR_KEYWORD:
            problems.append(f"{where}({name}): positional-or-keyword in the reference, {p.kind.name} here")
        if default is None and p.default is not p.empty:
            continue  # ours gives a default the reference lacks: every reference call still works
        if default is not None:
            if p.default is p.empty:
                problems.append(f"{where}({name}): the reference's default is {default}, ours has none")
            elif not _same_default(p.default, default):
                problems.append(f"{where}({name}): default {p.default!r}, the reference's is {default}")
    # Positional order: the reference's positional parameters come first, in order.
    positional = [n for n, k, _ in params if k == "POSITIONAL_OR_KEYWORD"]
    our_positional = [p.name for p in ours if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if our_positional[:len(positional)] != positional:
        problems.append(f"{where}: positional parameters {our_positional}, the reference's {positional}")
    # Anything we add must not be required.
    names = {n for n, _, _ in params}
    for p in ours:
        if p.name not in names and p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            problems.append(f"{where}: our extra parameter {p.name!r} is required")
    return problems


# ---- the tests


def test_the_manifest_is_the_reference_parsed():
    text = _spec_text()
    if text is None:
        pytest.skip("the reference's text is not at hand (set NANSENSE_REFERENCE_SPEC to its api-reference.md)")
    assert parse_reference(text) == manifest(), (
        "reference_api.json differs from the reference: run `python tests/python/test_reference_names.py --write`")


def test_the_manifest_covers_the_reference():
    m = manifest()
    # Guards against a parser that silently finds nothing.
    assert {"start", "serve", "load_moment"} <= set(m["functions"])
    assert len(m["classes"]["Session"]["methods"]) >= 15
    assert set(m["classes"]["Mode"]["members"]) == {"STEP", "UNTIL_PHASE_CHANGE", "UNTIL_EPOCH_CHANGE",
                                                     "UNTIL_POSITION", "UNTIL_END", "DETACH"}
    assert {"stop", "step_run", "request_time_travel", "set_experiment_defaults"} <= set(m["session_mentions"])


@pytest.mark.parametrize("name", sorted(manifest()["functions"]))
def test_function(name):
    func = _resolve(name)
    assert callable(func)
    problems = check_signature(f"nansense.{name}", func, manifest()["functions"][name])
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("name", sorted(manifest()["classes"]))
def test_class(name):
    spec = manifest()["classes"][name]
    cls = _resolve(name)
    assert inspect.isclass(cls), f"nansense.{name} is not a class"
    problems = []
    for method, params in spec["methods"].items():
        if not hasattr(cls, method):
            problems.append(f"{name}.{method}: missing")
            continue
        problems += check_signature(f"{name}.{method}", getattr(cls, method), params)
    for prop in spec["properties"]:
        attr = inspect.getattr_static(cls, prop, None)
        fields = getattr(cls, "__dataclass_fields__", {})
        if not isinstance(attr, property) and prop not in fields:
            problems.append(f"{name}.{prop}: not a property (or dataclass field) here: {attr!r}")
    for member in spec["members"]:
        assert issubclass(cls, enum.Enum), f"{name} has members in the reference but is not an enum here"
        if member not in cls.__members__:
            problems.append(f"{name}.{member}: no such member")
    assert not problems, "\n".join(problems)


def test_every_session_attribute_the_reference_mentions():
    import nansense
    missing = [n for n in manifest()["session_mentions"] if not hasattr(nansense.Session, n)]
    assert not missing, f"nansense.Session lacks {missing}"


def test_every_step_method_the_reference_implies():
    # lock()'s "every step_*": the reference's Session has these five.
    import nansense
    for name in ("step_batch", "step_phase", "step_epoch", "step_run", "step_until_position"):
        assert callable(getattr(nansense.Session, name)), name


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: test_reference_names.py --write  (rewrites reference_api.json from the reference)")
    spec = _spec_text()
    if spec is None:
        sys.exit("the reference's text is not at hand: set NANSENSE_REFERENCE_SPEC to its api-reference.md")
    MANIFEST.write_text(json.dumps(parse_reference(spec), indent=1, sort_keys=True) + "\n")
    print(f"wrote {MANIFEST}")
