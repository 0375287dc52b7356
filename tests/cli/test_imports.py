"""What importing tpumem costs: no module of tpumem/ imports a framework when it is
imported (the CLI starts without one), and the runner, which lives in the user's
process, loads none of the analysis or the reports. Each in a fresh interpreter."""

from __future__ import annotations

import ast
import itertools
import json
import re
import subprocess
import sys
from pathlib import Path

import tomllib

from tpumem.adapters.import_watch import FRAMEWORKS as ADAPTED
from tpumem.adapters.import_watch import KERAS_BACKENDS

PACKAGE = Path(__file__).resolve().parent.parent.parent / "tpumem"
# Every framework tpumem has an adapter for (its registry), Keras and its backends.
FRAMEWORKS = tuple(sorted({*ADAPTED, *KERAS_BACKENDS, "keras"}))


def _modules_loaded(code: str) -> list[str]:
    result = subprocess.run(
        [sys.executable, "-c", code + "\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_no_module_of_tpumem_imports_a_framework():
    names = sorted(
        ".".join(("tpumem", *path.relative_to(PACKAGE).with_suffix("").parts)).removesuffix(
            ".__init__"
        )
        for path in PACKAGE.rglob("*.py")
    )
    assert "tpumem.cli" in names and "tpumem.analysis.trace_figures" in names
    loaded = _modules_loaded("\n".join(f"import {name}" for name in names))
    assert [m for m in loaded if m.split(".")[0] in FRAMEWORKS] == []


def test_the_runner_loads_no_analysis_and_no_report():
    loaded = _modules_loaded(
        "import tpumem.adapters.runner\n"
        "from tpumem.adapters import get_adapter\n"
        "from tpumem.trace.writer import TraceWriter\n"
        "for name in ('jax', 'tensorflow', 'torch', 'torch_xla'):\n"
        "    get_adapter(name)\n"
    )
    assert "tpumem.adapters.jax" in loaded
    assert [m for m in loaded if m.startswith(("tpumem.analysis", "tpumem.report"))] == []
    assert [m for m in loaded if m.split(".")[0] in FRAMEWORKS] == []


def test_the_capture_side_is_tpumem_adapters_by_the_file_system_alone():
    """adapters/ (the product's layout) is tpumem.adapters through the link
    tpumem/adapters, so a checkout, an install (which copies the files) and a
    static reader find the same modules under the same name, with no import hook."""
    assert (PACKAGE / "adapters").resolve() == PACKAGE.parent / "adapters"
    code = (  # -S: no site-packages, so no install or editable finder is there
        f"import importlib.util, sys; sys.path[:0] = [{str(PACKAGE.parent)!r}]\n"
        "print(importlib.util.find_spec('tpumem').submodule_search_locations[0])\n"
    )
    result = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    found = Path(result.stdout.strip()) / "adapters" / "runner.py"
    assert found.is_file() and found.resolve() == PACKAGE.parent / "adapters" / "runner.py"


def test_every_package_is_installed():
    """A package left out of pyproject's list is missing from an install that is
    not editable (tpumem.hlo was, until a GPU machine's install said so)."""
    import tomllib

    root = Path(__file__).resolve().parent.parent.parent
    listed = set(
        tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    found = {
        ".".join(init.parent.relative_to(root).parts)
        for init in (root / "tpumem").rglob("__init__.py")
    }
    assert found <= listed, sorted(found - listed)


def test_a_report_does_not_load_arrow_compute():
    """pyarrow.compute takes about 35 ms to import: more than a report of a
    100,000-event profile spends reading its trace. A report of a profile (read,
    written as a trace, read again) and of a trace reads its columns without it."""
    data = Path(__file__).resolve().parent.parent / "data"
    for given in (data / "xplane" / "tf_cpu.xplane.pb", data / "gpu" / "known.tpumem"):
        loaded = _modules_loaded(
            "import contextlib, io, sys\n"
            "from tpumem.cli import main\n"
            f"sys.argv = ['tpumem', 'report', {str(given)!r}]\n"
            "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
            "    main()\n"
            "assert 'tpumem.analysis.trace_figures' in sys.modules\n"
        )
        assert "pyarrow.compute" not in loaded, given


def test_follow_boot_watches_the_frameworks_the_import_watch_does():
    """follow_boot (the standard library only, in every process of a --follow run)
    keeps its own copy of the frameworks' modules: the same as the watch's."""
    import ast

    from tpumem.adapters.import_watch import FRAMEWORKS as WATCHED

    boot = PACKAGE.parent / "adapters" / "follow_boot" / "sitecustomize.py"
    tree = ast.parse(boot.read_text())
    (value,) = [
        node.value
        for node in tree.body
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "FRAMEWORKS"
    ]
    assert ast.literal_eval(value) == WATCHED


# The floors (docs/floors.toml): each module's, what each may import.
FLOORS = tomllib.loads((PACKAGE.parent / "docs" / "floors.toml").read_text())["floors"]
# The start of a string that names a module of tpumem's (or a name in one).
_PREFIX = re.compile(r"tpumem(?:\.[A-Za-z_]\w*)+\.?")
ROOTS = ((PACKAGE, ("tpumem",)), (PACKAGE.parent / "adapters", ("tpumem", "adapters")))


def _sources() -> list[tuple[str, Path]]:
    """Every module of tpumem with its file (tpumem/adapters is a link to
    adapters/, which rglob does not follow)."""
    found = []
    for root, prefix in ROOTS:
        for path in sorted(root.rglob("*.py")):
            module = ".".join((*prefix, *path.relative_to(root).with_suffix("").parts))
            found.append((module.removesuffix(".__init__"), path))
    assert any(module.startswith("tpumem.adapters.") for module, _ in found)
    return found


def _imported(module: str, path: Path) -> set[str]:
    """What the module imports, read from its source (inside functions too): each
    name as a module would be (`from tpumem import cli`: tpumem.cli), relative
    imports made absolute."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join(p for p in (*parts, base) if p)
            if base != "tpumem":  # (`from tpumem import x` takes x: the package is loaded anyway)
                names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def _floor_of(name: str) -> str | None:
    """The floor whose entry is the longest prefix of `name` (the package
    `tpumem` itself is its entry "tpumem" alone, not a prefix of its modules)."""
    best = None, -1
    for floor, rule in FLOORS.items():
        for entry in rule["modules"]:
            matches = name == entry or (entry != "tpumem" and name.startswith(f"{entry}."))
            if matches and len(entry) > best[1]:
                best = floor, len(entry)
    return best[0]


def _allowed(floor: str) -> set[str]:
    """The floor, and every floor it uses, and theirs."""
    found, queue = set(), [floor]
    while queue:
        name = queue.pop()
        if name not in found:
            found.add(name)
            queue.extend(FLOORS[name]["uses"])
    return found


def _named(path: Path, modules: set[str]) -> set[str]:
    """The modules of tpumem's that strings in the source name: imports by string
    and the reporters' registry ("module" or "module:function"), a function's
    dotted path, a name built from a module's ("tpumem.report." + x, an
    f-string), `python -m tpumem...` (the bare package runs its __main__)."""
    names = set()
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.List | ast.Tuple):
            for flag, value in itertools.pairwise(node.elts):
                if _text(flag) == "-m" and _text(value) == "tpumem":
                    names.add("tpumem.__main__")
        start = node.values[0] if isinstance(node, ast.JoinedStr) and node.values else node
        named = _PREFIX.match(_text(start) or "")
        if named is not None:
            # The longest part of the dotted name that is a module of tpumem's.
            parts = named.group(0).rstrip(".").split(".")
            prefixes = [".".join(parts[:n]) for n in range(len(parts), 1, -1)]
            names.update(next(([p] for p in prefixes if p in modules), []))
    return names


def _text(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _reexports(sources: list[tuple[str, Path]]) -> dict[str, str]:
    """`package.name` -> where the package's __init__ took the name from
    (`tpumem.trace.load` -> `tpumem.trace.reader.load`): an import of a
    re-exported name is an import of its module."""
    found = {}
    for module, path in sources:
        if path.name != "__init__.py":
            continue
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:
                    found[f"{module}.{alias.asname or alias.name}"] = f"{node.module}.{alias.name}"
    return found


def _upward(sources: list[tuple[str, Path]]) -> list[tuple[str, str]]:
    """(module, what it imports) for each import the floors do not allow."""
    modules = {module for module, _ in sources}
    reexported = _reexports(sources)
    found = []
    for module, path in sources:
        floor = _floor_of(module)
        if floor is None:
            found.append((module, "(on no floor)"))
            continue
        allowed, never = _allowed(floor), tuple(FLOORS[floor].get("never", ()))
        imported = _imported(module, path) | _named(path, modules)
        for name in sorted(imported | {reexported[n] for n in imported if n in reexported}):
            banned = any(name == n or name.startswith(f"{n}.") for n in never)
            ours = name == "tpumem" or name.startswith("tpumem.")
            if banned or (ours and _floor_of(name) not in allowed):
                found.append((module, name))
    return found


def test_the_floors_import_downwards_only():
    """Every module is on a floor, and imports none above it (by statement or by
    string), nor what its floor may never import."""
    assert _upward(_sources()) == []


def test_an_upward_import_is_found_in_any_form(tmp_path):
    """The rule above on imports planted where the floors forbid them (a test of
    the test): each is found, in every form an import takes (by statement, by a
    string or a name built from one, through a package's re-export, python -m),
    and a module on no floor is too."""
    planted = {
        "tpumem.threads": "from tpumem import cli",
        "tpumem.protos": "import tpumem.cli_options",
        "tpumem.report.rows": "from tpumem.adapters import runner",
        "tpumem.report.__init__": "RENDER = 'tpumem.commands.report:run_report'",
        "tpumem.analysis.peak": "import importlib; importlib.import_module('tpumem.reading.paths')",
        "tpumem.analysis.allocators.bins": "from tpumem.trace.reader import load",
        "tpumem.launch.launcher": "from ..analysis import peak",
        "tpumem.unplaced": "x = 1",
        # a name a package re-exports (tpumem.trace's load is its reader's)
        "tpumem.analysis.kinds": "from tpumem.trace import load",
        # names built at run time, a function's dotted path, python -m tpumem
        "tpumem.analysis.drawing.series": (
            "import importlib as i; i.import_module(f'tpumem.reading.{x}')"
        ),
        "tpumem.report.html": "RUN = 'tpumem.commands.' + name",
        "tpumem.report.text": "RUN = 'tpumem.commands.report.run_report'",
        "tpumem.launch.signals": "import sys; COMMAND = [sys.executable, '-m', 'tpumem', 'report']",
    }
    sources = []
    for module, code in planted.items():
        path = tmp_path / f"{module}.py"
        path.write_text(code + "\n")
        sources.append((module.removesuffix(".__init__"), path))
    # (the modules the plants name, as the package has them)
    named = ("tpumem.cli", "tpumem.cli_options", "tpumem.commands.report", "tpumem.reading.paths")
    named += ("tpumem.reading", "tpumem.commands", "tpumem.__main__")
    sources += [(m, PACKAGE / "units.py") for m in named]
    sources.append(("tpumem.trace", PACKAGE / "trace" / "__init__.py"))
    found: dict[str, set[str]] = {}
    for module, name in _upward(sources):
        found.setdefault(module, set()).add(name)
    assert found == {
        "tpumem.threads": {"tpumem.cli"},
        "tpumem.protos": {"tpumem.cli_options"},
        "tpumem.report.rows": {"tpumem.adapters", "tpumem.adapters.runner"},
        "tpumem.report": {"tpumem.commands.report"},
        "tpumem.analysis.peak": {"tpumem.reading.paths"},
        "tpumem.analysis.allocators.bins": {"tpumem.trace.reader", "tpumem.trace.reader.load"},
        "tpumem.launch.launcher": {"tpumem.analysis", "tpumem.analysis.peak"},
        "tpumem.unplaced": {"(on no floor)"},
        "tpumem.analysis.kinds": {"tpumem.trace.reader.load"},
        "tpumem.analysis.drawing.series": {"tpumem.reading"},
        "tpumem.report.html": {"tpumem.commands"},
        "tpumem.report.text": {"tpumem.commands.report"},
        "tpumem.launch.signals": {"tpumem.__main__"},
    }


def test_the_import_reader_sees_every_form():
    """The reader above, on the forms an import takes (a test of the test)."""
    source = PACKAGE / "commands" / "report.py"
    names = _imported("tpumem.commands.report", source)
    assert {"tpumem.reading.paths", "tpumem.reading.paths.opened_run"} <= names
    assert "tpumem.report" in names  # (inside the function)


def test_the_launcher_takes_from_the_adapters_their_registry_and_protocol_alone():
    """`tpumem profile`'s side knows the profiled process's modules through these:
    the registry (which frameworks there are), the protocol both sides speak, the
    header a trace starts with, and where XLA dumps its programs."""
    allowed = {
        "tpumem.adapters",
        "tpumem.adapters.launch_protocol",
        "tpumem.adapters.run_header",
        "tpumem.adapters.xla_dump",
    }
    found = set()
    for module, path in _sources():
        if module.startswith("tpumem.launch."):
            found |= {
                n.rpartition(".")[0] if n.rpartition(".")[0] in allowed else n
                for n in _imported(module, path)
                if n.startswith("tpumem.adapters")
            }
    assert found <= allowed, sorted(found - allowed)


_CLI = ("tpumem.cli", "tpumem.cli_tpu")


def _cli_nodes() -> list[ast.AST]:
    """Every node of the CLI's modules."""
    return [
        node
        for name in _CLI
        for node in ast.walk(
            ast.parse((PACKAGE / f"{name.removeprefix('tpumem.')}.py").read_text())
        )
    ]


def _commands() -> set[str]:
    """The commands' modules, found where the CLI takes each command's `run_*`."""
    return {
        node.module
        for node in _cli_nodes()
        if isinstance(node, ast.ImportFrom)
        and node.module is not None
        and node.module.startswith("tpumem.commands.")
        and any(alias.name.startswith("run_") for alias in node.names)
    }


def _commands_imported(
    sources: list[tuple[str, Path]], commands: set[str]
) -> list[tuple[str, str]]:
    """(module, command) for each command's module imported outside the CLI."""
    found = []
    for module, path in sources:
        if module not in _CLI:
            found += [(module, n) for n in _imported(module, path) if n in commands - {module}]
    return found


def test_only_the_cli_imports_a_command(tmp_path):
    """A command's module is the CLI's to import: what two commands share lives
    in a module of its own beside them (fit's names, for fit and its sweep). A
    shared helper planted importing a command is found."""
    commands = _commands()
    assert {"tpumem.commands.profile", "tpumem.commands.fit", "tpumem.commands.report"} <= commands
    # One module for each command the CLI registers (`app.command(...)`): none
    # reached another way escapes the rule.
    registered = sum(
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "command"
        for node in _cli_nodes()
    )
    assert len(commands) == registered
    assert "tpumem.commands.options" not in commands
    assert _commands_imported(_sources(), commands) == []
    planted = tmp_path / "analysed_runs.py"
    planted.write_text("from tpumem.commands import fit\n")
    found = _commands_imported([("tpumem.commands.analysed_runs", planted)], commands)
    assert found == [("tpumem.commands.analysed_runs", "tpumem.commands.fit")]
