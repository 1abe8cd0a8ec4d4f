"""Extract vLLM's server arguments, per release, into triage/report/vllm_args.json (run only on purpose).

    pip download vllm==0.10.2 --no-deps -d /tmp/vllm-0.10.2 && cd /tmp/vllm-0.10.2 && unzip -q *.whl
    python tools/vllm_args.py /tmp/vllm-0.10.2 [/tmp/vllm-0.11.0 ...]     # each folder holds an unzipped wheel

For each release this reads, without importing vLLM, the argument parser `vllm serve` (or, before it, the
OpenAI server) builds: every `add_argument` call in `vllm/engine/arg_utils.py`, the module `vllm serve` takes
make_arg_parser from (`entrypoints/openai/cli_args.py`, later `launchers/` or `common/cli_args.py`; the old
`openai/api_server.py`) and `vllm/entrypoints/cli/serve.py`, with the flags that
config dataclasses generate (`get_kwargs(ModelConfig)`, the `FrontendArgs` loop) and the dataclass fields'
types and defaults. What it keeps per flag: its dest, whether it takes a value, a `--no-` form, and the
default where it is a literal (the `args: Namespace(...)` of <= 0.8.5 lists every argument, so only a value
other than the default was set by the user). vLLM's source is never copied: the JSON holds names and
defaults only. The existing file is read first and the releases given replace theirs, so the file can be
grown one wheel at a time.
"""
from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "triage" / "report" / "vllm_args.json"
_UNSET = object()


def _release(root: Path) -> str:
    """The version, from the wheel's dist-info folder name (vllm-0.10.2.dist-info) or vllm/version.py."""
    for info in root.glob("vllm-*.dist-info"):
        return info.name[len("vllm-"):-len(".dist-info")]
    m = re.search(r"(\d+(?:\.\d+)+(?:\.post\d+)?)$", root.name)
    if m:
        return m.group(1)
    raise SystemExit(f"{root}: no vllm-*.dist-info and no version in the folder name")


def _literal(node: ast.AST) -> object:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _UNSET


class Field:
    def __init__(self, annotation: str, default: object) -> None:
        self.annotation, self.default = annotation, default


def _dataclasses(files: list[Path]) -> dict[str, dict[str, Field]]:
    """Every class in these files: its annotated fields, their annotation text and literal default."""
    classes: dict[str, dict[str, Field]] = {}
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                fields = classes.setdefault(node.name, {})
                for item in node.body:
                    if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                        default = _literal(item.value) if item.value is not None else _UNSET
                        if isinstance(item.value, ast.Call) \
                                and getattr(item.value.func, "id", "") in ("field", "Field"):
                            kw = {k.arg: k.value for k in item.value.keywords}
                            default = _literal(kw["default"]) if "default" in kw else _UNSET
                        fields[item.target.id] = Field(ast.unparse(item.annotation), default)
    return classes


def _kind_of(annotation: str) -> dict:
    """What get_kwargs makes of a dataclass field's type: a negatable switch for a bool, one JSON value for a
    dict or a config object, several values for a list."""
    text = annotation.replace(" ", "")
    if re.search(r"(?<![A-Za-z_])bool(?![A-Za-z_])", text) and not text.startswith(("dict", "Dict", "list")):
        return {"value": False, "negatable": True}
    if re.search(r"(?<![A-Za-z_])(?:list|List)\[", text) and not text.startswith(("dict", "Dict")):
        return {"value": True, "many": True}
    return {"value": True}


def _flags(call: ast.Call) -> list[str]:
    return [value for value in (_literal(arg) for arg in call.args) if isinstance(value, str)]


def _arguments(path: Path, classes: dict[str, dict[str, Field]], engine_defaults: dict[str, object]) -> dict:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    kwargs_of: dict[str, str] = {}                     # model_kwargs -> ModelConfig
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) \
                and getattr(node.value.func, "id", getattr(node.value.func, "attr", "")) == "get_kwargs" \
                and node.value.args and isinstance(node.targets[0], ast.Name):
            kwargs_of[node.targets[0].id] = ast.unparse(node.value.args[0]).split(".")[-1]
    found: dict[str, dict] = {}

    def fields_of(name: str) -> dict[str, Field]:
        """A class's fields; `cls` (a classmethod's own class, 0.20+) is the frontend's argument classes."""
        if name == "cls":
            return {k: f for c, fs in classes.items() if c.endswith("FrontendArgs") for k, f in fs.items()}
        return classes.get(name, {})

    def visit(node: ast.AST, loop: dict[str, Field] | None) -> None:
        if isinstance(node, ast.For) and isinstance(node.iter, ast.Call) \
                and isinstance(node.iter.func, ast.Attribute) and node.iter.func.attr == "items" \
                and isinstance(node.iter.func.value, ast.Name) and node.iter.func.value.id in kwargs_of:
            loop = fields_of(kwargs_of[node.iter.func.value.id])
            for child in node.body:
                visit(child, loop)
            return
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
            _record(node, loop, found, classes, kwargs_of, engine_defaults)
        for child in ast.iter_child_nodes(node):
            visit(child, loop)
    visit(tree, None)
    return found


def _record(call: ast.Call, loop: dict[str, Field] | None, found: dict[str, dict],
            classes: dict[str, dict[str, Field]], kwargs_of: dict[str, str],
            engine_defaults: dict[str, object]) -> None:
    if loop and any(isinstance(a, ast.JoinedStr) for a in call.args):
        for key, field in loop.items():                # the FrontendArgs loop: one flag per field
            _put(found, ["--" + key.replace("_", "-")], key, _kind_of(field.annotation), field.default)
        return
    names = _flags(call)
    keywords = {k.arg: k.value for k in call.keywords if k.arg}
    spread = [k.value for k in call.keywords if k.arg is None]
    if not names:
        return
    long = [n for n in names if n.startswith("--")]
    dest = _literal(keywords["dest"]) if "dest" in keywords else None
    if not isinstance(dest, str):
        dest = (long[0][2:] if long else names[0].lstrip("-")).replace("-", "_")
    kind: dict = {"value": True}
    default: object = _UNSET
    spread = [v for value in spread for v in ([value] + ([x for k, x in zip(value.keys, value.values) if k is None]
                                                         if isinstance(value, ast.Dict) else []))]
    spread.sort(key=lambda v: isinstance(v, ast.Dict))    # an explicit {"default": ...} overrides the field's
    for value in spread:                               # **model_kwargs["max_model_len"], **{**kwargs["x"], ...}
        if isinstance(value, ast.Dict):
            for k, x in zip(value.keys, value.values):
                if k is not None and _literal(k) == "default":
                    default = _literal(x)
            continue
        if isinstance(value, ast.Subscript) and isinstance(value.value, ast.Name) and value.value.id in kwargs_of:
            key = _literal(value.slice)
            field = classes.get(kwargs_of[value.value.id], {}).get(key) if isinstance(key, str) else None
            if field is not None:
                kind, default = _kind_of(field.annotation), field.default
    action = keywords.get("action")
    if action is not None:
        text = ast.unparse(action)
        if "store_true" in text or "store_false" in text:
            kind = {"value": False, **({"sets": False} if "store_false" in text else {})}
        elif "BooleanOptionalAction" in text:
            kind = {"value": False, "negatable": True}
    if "nargs" in keywords:
        nargs = _literal(keywords["nargs"])
        if nargs in ("+", "*"):
            kind = {**kind, "many": True}
        elif nargs == "?":
            kind = {**kind, "optional_value": True}
    if "default" in keywords:
        node = keywords["default"]
        default = _literal(node)
        if default is _UNSET and isinstance(node, ast.Attribute) and ast.unparse(node.value).endswith("EngineArgs"):
            default = engine_defaults.get(node.attr, _UNSET)
    elif kind.get("value") is False and default is _UNSET and not kind.get("negatable"):
        default = bool(kind.get("sets", True)) is False        # store_true defaults to False, store_false to True
    positional = not names[0].startswith("-")
    _put(found, names, dest, {**kind, **({"positional": True} if positional else {})}, default)


def _put(found: dict[str, dict], names: list[str], dest: str, kind: dict, default: object) -> None:
    entry = {"dest": dest, **kind}
    if default is not _UNSET and isinstance(default, (str, int, float, bool, type(None), list, dict)):
        entry["default"] = default
    primary = next((n for n in names if n.startswith("--")), names[0])
    aliases = [n for n in names if n != primary]
    if aliases:
        entry["aliases"] = aliases
    found[primary] = entry


def _server_parser(vllm: Path) -> Path:
    """The module that builds the OpenAI server's parser: where `vllm serve` imports make_arg_parser from
    (openai/cli_args.py, then launchers/cli_args.py in 0.29-0.32, common/cli_args.py from 0.33), else the
    old openai/api_server.py."""
    serve = vllm / "entrypoints" / "cli" / "serve.py"
    if serve.exists():
        for node in ast.walk(ast.parse(serve.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and any(a.name == "make_arg_parser"
                                                                        for a in node.names):
                path = vllm.parent / (node.module.replace(".", "/") + ".py")
                if path.exists():
                    return path
    for candidate in ("openai/cli_args.py", "launchers/cli_args.py", "common/cli_args.py"):
        if (vllm / "entrypoints" / candidate).exists():
            return vllm / "entrypoints" / candidate
    return vllm / "entrypoints" / "openai" / "api_server.py"


def extract(root: Path) -> dict:
    vllm = root / "vllm"
    cli_args = _server_parser(vllm)
    config_files = sorted(vllm.glob("config.py")) + sorted((vllm / "config").glob("*.py")) \
        + sorted(vllm.glob("engine/arg_utils.py")) + [cli_args]
    classes = _dataclasses([p for p in config_files if p.exists()])
    engine_defaults = {k: f.default for k, f in classes.get("EngineArgs", {}).items() if f.default is not _UNSET}
    files = [vllm / "engine" / "arg_utils.py", cli_args]
    if (vllm / "entrypoints" / "cli" / "serve.py").exists():
        files.append(vllm / "entrypoints" / "cli" / "serve.py")
    arguments: dict[str, dict] = {}
    for path in files:
        if path.exists():
            arguments.update(_arguments(path, classes, engine_defaults))
    serve = (vllm / "entrypoints" / "cli" / "serve.py").exists() or (vllm / "scripts.py").exists()
    return {"program": "vllm serve" if serve else "python -m vllm.entrypoints.openai.api_server",
            "arguments": dict(sorted(arguments.items()))}


def _key(version: str) -> tuple:
    return tuple(int(p) for p in re.findall(r"\d+", version))


def pack(releases: dict[str, dict]) -> dict:
    """Releases in order, and per flag the runs of consecutive releases that share one entry:
    {"--max-model-len": [[first, last, {...}], ...]} with first/last indexes into "releases"."""
    order = sorted(releases, key=_key)
    arguments: dict[str, list] = {}
    for i, release in enumerate(order):
        for flag, entry in releases[release]["arguments"].items():
            runs = arguments.setdefault(flag, [])
            if runs and runs[-1][1] == i - 1 and runs[-1][2] == entry:
                runs[-1][1] = i
            else:
                runs.append([i, i, entry])
    return {"about": ("vLLM's server arguments per release, extracted by tools/vllm_args.py from each release's "
                      "wheel (arg_utils.py, cli_args.py): per flag, runs of releases [first, last] (indexes into "
                      "releases) sharing one entry: dest, whether it takes a value, a --no- form (negatable), several "
                      "values (many), the default where it is a literal. Names and defaults only; no vLLM source."),
            "releases": order, "programs": [releases[r]["program"] for r in order],
            "arguments": dict(sorted(arguments.items()))}


def unpack(data: dict) -> dict[str, dict]:
    releases = {r: {"program": p, "arguments": {}} for r, p in zip(data["releases"], data["programs"])}
    for flag, runs in data["arguments"].items():
        for first, last, entry in runs:
            for release in data["releases"][first:last + 1]:
                releases[release]["arguments"][flag] = entry
    return releases


def main(folders: list[str]) -> None:
    releases = unpack(json.loads(OUT.read_text())) if OUT.exists() else {}
    for folder in folders:
        root = Path(folder)
        release = _release(root)
        releases[release] = extract(root)
        print(f"{release}: {len(releases[release]['arguments'])} arguments", file=sys.stderr)
    OUT.write_text(json.dumps(pack(releases), separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
